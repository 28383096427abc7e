// Package fill defines the benchmark state of bench/migration: its contents after any
// number of iterations and its checksum, shared by the application (stateapp), which holds
// the state, and the driver, which recomputes the checksum the job must print.
package fill

import "math"

// Elems is the number of float64 elements in mib MiB.
func Elems(mib float64) int { return int(mib * (1 << 20) / 8) }

// splitmix64 is a 64-bit mixing function (the SplitMix64 finalizer).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Base is the initial value of element j of rank's ballast: an integer below 2^44, so adding
// small counts to it stays exact.
func Base(rank, j int) float64 {
	return float64(splitmix64(uint64(rank)<<40^uint64(j)) >> 20)
}

// Expected is element j of rank's ballast of n elements after iters iterations (each
// iteration adds 1 to one element, round robin).
func Expected(rank, j, n, iters int) float64 {
	v := Base(rank, j) + float64(iters/n)
	if j < iters%n {
		v++
	}
	return v
}

// Hasher hashes a sequence of float64 bit patterns of known length.
type Hasher struct{ h uint64 }

// NewHasher starts the hash of n values.
func NewHasher(n int) Hasher { return Hasher{uint64(0xcbf29ce484222325) ^ uint64(n)} }

// Add hashes the next value.
func (h *Hasher) Add(x float64) {
	h.h = (h.h ^ math.Float64bits(x)) * 0x100000001b3
	h.h ^= h.h >> 29
}

// Sum returns the hash.
func (h Hasher) Sum() uint64 { return h.h }

// Hash hashes xs.
func Hash(xs []float64) uint64 {
	h := NewHasher(len(xs))
	for _, x := range xs {
		h.Add(x)
	}
	return h.Sum()
}

// ExpectedHash is Hash of rank's ballast of mib MiB after iters iterations, computed
// without holding the ballast in memory.
func ExpectedHash(mib float64, rank, iters int) uint64 {
	n := Elems(mib)
	h := NewHasher(n)
	for j := range n {
		h.Add(Expected(rank, j, n, iters))
	}
	return h.Sum()
}

// Combine folds the per-rank hashes, in rank order, into the job's checksum (the job prints
// it as %016x).
func Combine(hs []uint64) uint64 {
	c := uint64(0x84222325cbf29ce4)
	for r, h := range hs {
		c = splitmix64(c ^ h ^ uint64(r))
	}
	return c
}
