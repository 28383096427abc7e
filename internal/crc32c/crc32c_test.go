package crc32c

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func randomBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func TestZerosMatchesTheStandardLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 100, 4095, BlockSize, 4097, 1 << 16, 1<<20 + 13} {
		for _, crc := range []uint32{0, 1, 0xffffffff, r.Uint32()} {
			want := crc32.Update(crc, Table, make([]byte, n))
			if got := Zeros(crc, int64(n)); got != want {
				t.Errorf("Zeros(%#x, %d) = %#x, want %#x", crc, n, got, want)
			}
		}
	}
}

func TestCombineIsTheChecksumOfTheConcatenation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, na := range []int{0, 1, 4096, 5000} {
		for _, nb := range []int{0, 1, 17, BlockSize, 65536 + 5} {
			a, b := randomBytes(r, na), randomBytes(r, nb)
			want := crc32.Update(0, Table, append(append([]byte{}, a...), b...))
			if got := Combine(Update(0, a), Update(0, b), int64(nb)); got != want {
				t.Errorf("Combine of %d and %d bytes = %#x, want %#x", na, nb, got, want)
			}
		}
	}
}

func TestUpdateSparseEqualsUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// Blocks of zeros and data in every order, with a tail, from several starting values.
	p := make([]byte, 7*BlockSize+123)
	for _, blk := range []int{1, 2, 5} {
		copy(p[blk*BlockSize:], randomBytes(r, BlockSize))
	}
	p[6*BlockSize+7] = 9 // one non-zero byte in an otherwise zero block
	for _, crc := range []uint32{0, 0xdeadbeef} {
		for _, q := range [][]byte{p, p[1:], p[:BlockSize], p[3*BlockSize:], nil} {
			if got, want := UpdateSparse(crc, q), Update(crc, q); got != want {
				t.Errorf("UpdateSparse(%#x, %d bytes) = %#x, want %#x", crc, len(q), got, want)
			}
		}
	}
}

func TestIsZero(t *testing.T) {
	p := make([]byte, 3*BlockSize+5)
	if !IsZero(p) || !IsZero(nil) {
		t.Fatal("zeros not zero")
	}
	for _, i := range []int{0, BlockSize, 3 * BlockSize, len(p) - 1} {
		p[i] = 1
		if IsZero(p) {
			t.Errorf("byte %d set, IsZero still true", i)
		}
		p[i] = 0
	}
}

func BenchmarkUpdateSparse(b *testing.B) {
	for _, c := range []struct {
		name string
		data []byte
	}{{"zeros", make([]byte, 1<<20)}, {"dense", randomBytes(rand.New(rand.NewPCG(7, 8)), 1<<20)}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				UpdateSparse(0, c.data)
			}
		})
	}
}

func ExampleCombine() {
	a, b := []byte("iteration "), []byte("boundary")
	whole := Combine(Update(0, a), Update(0, b), int64(len(b)))
	fmt.Println(whole == Update(0, []byte("iteration boundary")))
	// Output: true
}
