package ckptstore_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/mpios/mpios/pcm/ckptstore"
)

// BenchmarkMemStoreCheckpoint is the store's part of one rank's background checkpoint in a
// memory store (pcmd serve --ckpt-store mem, a directory in /dev/shm), after the snapshot
// (BenchmarkSnapshot): the capacity check and the write of the piece into its node's store,
// the buddy's capacity check and its copy from the sparse stream, and the commit and prune
// (keep 2) in both stores. The piece is one rank's 8 MiB of heat2d N=2048 at P=4 with its
// first rows non-zero. Each step is a sub-benchmark; run with -benchtime=200x and compare CPU
// time (-cpuprofile), since the machine may be shared.
func BenchmarkMemStoreCheckpoint(b *testing.B) {
	const rows, cols = 512, 2050
	const capacity = 4 << 30
	for _, hot := range []int{50, rows} {
		r := heatFront(b, rows, cols, hot)
		var snap ckptstore.PieceBuffer
		snap.Grow(int(r.Size()) + 4096)
		if _, err := r.WriteTo(&snap); err != nil {
			b.Fatal(err)
		}
		var sparse bytes.Buffer
		if _, err := snap.WriteSparseTo(&sparse); err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("rows-%d-of-%d-nonzero", hot, rows)
		opts := &ckptstore.Options{Node: "n1", Checksum: ckptstore.CRC32C, CommitSizeOnly: true}
		own, buddy := memStore(b, opts), memStore(b, &ckptstore.Options{Node: "n2"})
		seq := uint64(0)
		var info ckptstore.PieceInfo
		put := func(b *testing.B) {
			var err error
			if err = own.Reserve(int64(snap.Len()), capacity); err == nil {
				info, err = own.PutPieceBuffer("bench", seq, 0, &snap)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		copyIt := func(b *testing.B) {
			want := info
			want.Node = "n2"
			err := buddy.Reserve(want.Size, capacity)
			if err == nil {
				err = buddy.PutSparseCopy("bench", seq, want, bytes.NewReader(sparse.Bytes()))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		commit := func(b *testing.B) {
			info.Copies = []string{"n2"}
			m := ckptstore.Manifest{Job: "bench", Seq: seq, Size: 1, Pieces: []ckptstore.PieceInfo{info}}
			for _, s := range []*ckptstore.Store{own, buddy} {
				if err := s.CommitManifest(m); err != nil {
					b.Fatal(err)
				}
				if err := s.Prune("bench", 2); err != nil {
					b.Fatal(err)
				}
			}
		}
		// Each step runs on checkpoints the step before left: the other steps run outside
		// the timer.
		steps := []struct {
			name string
			run  func(*testing.B)
		}{{"put", put}, {"copy", copyIt}, {"commit-prune", commit}}
		for k, step := range steps {
			b.Run(name+"/"+step.name, func(b *testing.B) {
				b.SetBytes(int64(snap.Len()))
				for b.Loop() {
					b.StopTimer()
					seq++
					for _, before := range steps[:k] {
						before.run(b)
					}
					b.StartTimer()
					step.run(b)
					b.StopTimer()
					for _, after := range steps[k+1:] {
						after.run(b)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// memStore opens a store in /dev/shm, as pcmd serve --ckpt-store mem does, or skips.
func memStore(b *testing.B, opts *ckptstore.Options) *ckptstore.Store {
	b.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "mpios-bench-ckpt-")
	if err != nil {
		b.Skipf("no /dev/shm: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	s, err := ckptstore.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
