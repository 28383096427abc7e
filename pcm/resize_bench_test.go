package pcm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
)

// BenchmarkResizeData measures the data half of a resize: the time from the first rank
// entering resizeData to the last leaving it (the job's pause for the data), for a global
// block of S MiB on goroutine ranks connected over TCP loopback (as local ranks are), and the
// bytes moved against the minimum the distribution change needs. Sizes are set with
// MPIOS_BENCH_RESIZE_MIB (default "64"; e.g. "64,256,1024").
//
//	MPIOS_BENCH_RESIZE_MIB=64,256,1024 go test -run '^$' -bench ResizeData -benchtime 3x ./pcm
func BenchmarkResizeData(b *testing.B) {
	sizes := []int{64}
	if s := os.Getenv("MPIOS_BENCH_RESIZE_MIB"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, v)
		}
	}
	for _, c := range []struct{ from, to int }{{2, 4}, {4, 2}, {4, 6}, {6, 3}} {
		for _, mib := range sizes {
			b.Run(fmt.Sprintf("%d-to-%d/%dMiB", c.from, c.to, mib), func(b *testing.B) {
				benchResize(b, c.from, c.to, mib)
			})
		}
	}
}

// benchResize resizes from -> to and back b.N times; only the first direction is timed. The
// processes that are not in the smaller configuration are the last ones, so that the way
// back is valid too.
func benchResize(b *testing.B, from, to, mib int) {
	n := max(from, to)
	const rowLen = 1024 // 8 KiB rows
	rows := mib << 20 / (8 * rowLen)
	ranksTo := func(size int) []int {
		r := make([]int, n)
		for w := range r {
			r[w] = w
			if w >= size {
				r[w] = -1
			}
		}
		return r
	}
	// The minimum: rows whose owner changes.
	oldR, _ := redist.Blocks(rows, nil, from)
	newR, _ := redist.Blocks(rows, nil, to)
	kept := 0
	for w := range min(from, to) {
		kept += oldR[w].Intersect(newR[w]).Len()
	}
	minimum := float64(rows-kept) * 8 * rowLen
	var pause time.Duration
	var moved int64
	b.ReportAllocs()
	mpitest.RunEndpoints(b, mpitest.Endpoints(b, mpitest.TCP, n), func(c *mpi.Comm) error {
		me := c.Rank()
		p, blk, err := oldAndJoining(c, from, rows, rowLen)
		if err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		for i := range blk.Local() {
			blk.Local()[i] = float64(i)
		}
		if me >= from {
			blk.release() // a process that joins holds nothing
		}
		for range b.N {
			if err := c.Barrier(); err != nil {
				return err
			}
			t0 := time.Now()
			if err := resize(p, c, from, ranksTo(to), to, nil); err != nil {
				return err
			}
			sent := []int64{p.MovedBytes()}
			total := []int64{0}
			if err := mpi.Allreduce(c, sent, total, mpi.Sum); err != nil {
				return err
			}
			if me == 0 {
				pause += time.Since(t0)
				moved += total[0]
			}
			if err := resize(p, c, to, ranksTo(from), from, nil); err != nil {
				return err
			}
		}
		return nil
	})
	b.ReportMetric(float64(pause.Milliseconds())/float64(b.N), "pause-ms")
	b.ReportMetric(float64(moved)/float64(b.N)/(1<<20), "moved-MiB")
	b.ReportMetric(minimum/(1<<20), "min-MiB")
	b.ReportMetric(float64(moved)/float64(b.N)/(1<<20)/(float64(pause.Seconds())/float64(b.N)), "MiB/s")
}
