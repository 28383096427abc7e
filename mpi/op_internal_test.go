package mpi

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// reference computes a ∘ b for one element the plain way, as the MPI standard defines each
// operation (bitwise ones through int64/uint64, which keeps the low bits of every size).
func reference[T Number](op Op, a, b T) T {
	switch op.id {
	case opSum:
		return a + b
	case opProd:
		return a * b
	case opMax:
		return max(a, b)
	case opMin:
		return min(a, b)
	case opLAnd:
		return truth[T](a != 0 && b != 0)
	case opLOr:
		return truth[T](a != 0 || b != 0)
	case opLXor:
		return truth[T]((a != 0) != (b != 0))
	}
	x, y := uint64(int64(a)), uint64(int64(b))
	switch op.id {
	case opBAnd:
		return T(int64(x & y))
	case opBOr:
		return T(int64(x | y))
	}
	return T(int64(x ^ y))
}

func checkKernels[T Number](t *testing.T, integer bool) {
	ops := []Op{Sum, Prod, Max, Min, LAnd, LOr, LXor}
	if integer {
		ops = append(ops, BAnd, BOr, BXor)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, op := range ops {
		for _, n := range []int{0, 1, 7, 8, 9, 100} {
			a, b := make([]T, n), make([]T, n)
			for i := range a {
				a[i], b[i] = T(rng.IntN(7)-2), T(rng.IntN(7)-2)
			}
			want := make([]T, n)
			for i := range want {
				want[i] = reference(op, a[i], b[i])
			}
			for _, into := range []string{"a", "b"} {
				x, y := append([]T(nil), a...), append([]T(nil), b...)
				out := y
				if into == "a" {
					out = x
				}
				combine(op, x, y, out)
				for i := range want {
					if out[i] != want[i] {
						t.Fatalf("%v %T n %d into %s: element %d = %v, want %v", op, a[0], n, into, i, out[i], want[i])
					}
				}
			}
		}
	}
}

// TestOneKernelTableForEveryOpAndType checks the kernel of every predefined elementwise
// operation against the plain definition, for every Number type, with the result in either
// operand (apply writes into the second, the ring's reduceLocal into the first).
func TestOneKernelTableForEveryOpAndType(t *testing.T) {
	checkKernels[int8](t, true)
	checkKernels[int16](t, true)
	checkKernels[int32](t, true)
	checkKernels[int64](t, true)
	checkKernels[int](t, true)
	checkKernels[uint8](t, true)
	checkKernels[uint16](t, true)
	checkKernels[uint32](t, true)
	checkKernels[uint64](t, true)
	checkKernels[uint](t, true)
	checkKernels[float32](t, false)
	checkKernels[float64](t, false)
}

func TestLocOpsKeepPairsAndPreferTheSmallerIndex(t *testing.T) {
	a := []float64{3, 7, 2, 1, 5, 9}
	b := []float64{3, 4, 8, 6, 1, 0}
	out := make([]float64, 6)
	copy(out, b)
	combine(MaxLoc, a, out, out)
	if fmt.Sprint(out) != "[3 4 8 6 5 9]" {
		t.Errorf("MaxLoc: %v", out)
	}
	copy(out, a)
	combine(MinLoc, out, b, out)
	if fmt.Sprint(out) != "[3 4 2 1 1 0]" {
		t.Errorf("MinLoc: %v", out)
	}
}
