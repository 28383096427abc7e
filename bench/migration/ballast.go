package main

import "math"

// These mirror stateapp's ballast functions, so the driver checks the checksum the job prints
// against one it computes itself. Keep them identical to stateapp/main.go.

func elems(mib float64) int { return int(mib * (1 << 20) / 8) }

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func base(rank, j int) float64 {
	return float64(splitmix64(uint64(rank)<<40^uint64(j)) >> 20)
}

func expected(rank, j, n, iters int) float64 {
	v := base(rank, j) + float64(iters/n)
	if j < iters%n {
		v++
	}
	return v
}

// expectedRankHash is the hash stateapp computes of rank's ballast of mib MiB after iters
// iterations, computed without holding the ballast in memory.
func expectedRankHash(mib float64, rank, iters int) uint64 {
	n := elems(mib)
	h := uint64(0xcbf29ce484222325) ^ uint64(n)
	for j := range n {
		h = (h ^ math.Float64bits(expected(rank, j, n, iters))) * 0x100000001b3
		h ^= h >> 29
	}
	return h
}

// expectedChecksum is the checksum stateapp prints for size ranks.
func expectedChecksum(mib float64, size, iters int) string {
	c := uint64(0x84222325cbf29ce4)
	for r := range size {
		c = splitmix64(c ^ expectedRankHash(mib, r, iters) ^ uint64(r))
	}
	return formatHex(c)
}

func formatHex(x uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[x&15]
		x >>= 4
	}
	return string(b)
}
