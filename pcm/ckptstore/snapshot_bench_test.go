package ckptstore_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

// BenchmarkSnapshot is a background checkpoint's snapshot (pcm's startCheckpoint): a
// registered grid copied into a reused PieceBuffer at the boundary. The grid is one rank's
// 8 MiB of heat2d N=2048 at P=4 (512 rows of 2050 values) with its first rows non-zero, as
// after that many iterations of the heat front.
func BenchmarkSnapshot(b *testing.B) {
	const rows, cols = 512, 2050
	for _, hot := range []int{0, 50, 150, rows} {
		b.Run(fmt.Sprintf("rows-%d-of-%d-nonzero", hot, rows), func(b *testing.B) {
			r := heatFront(b, rows, cols, hot)
			var buf ckptstore.PieceBuffer
			buf.Grow(int(r.Size()) + 4096)
			b.SetBytes(int64(8 * rows * cols))
			for b.Loop() {
				buf.Reset()
				if _, err := r.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// heatFront registers a rows×cols grid, like one rank's part of heat2d, whose first hot rows
// are non-zero and the rest zero, as after that many iterations of the heat front.
func heatFront(b *testing.B, rows, cols, hot int) *state.Registry {
	u := make([]float64, rows*cols)
	for i := range hot * cols {
		u[i] = 1 + float64(i%7)
	}
	r := state.NewRegistry()
	if err := r.Register("u", &u); err != nil {
		b.Fatal(err)
	}
	return r
}
