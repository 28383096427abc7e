package mpi

import "testing"

// BenchmarkReduceLocal measures the ring's reduction of one 64 KiB segment with this rank's
// contribution, walking through a 2 MiB vector as Allreduce does.
func BenchmarkReduceLocal(b *testing.B) {
	const n, seg = 1 << 18, 8192
	acc := make([]float64, n)
	local := make([]float64, n)
	for i := range local {
		local[i], acc[i] = float64(i), 1
	}
	b.SetBytes(seg * 8)
	off := 0
	for b.Loop() {
		reduceLocal(Sum, acc[off:off+seg], local[off:off+seg])
		off = (off + seg) % n
	}
}
