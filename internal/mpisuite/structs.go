package mpisuite

import (
	"errors"
	"fmt"

	"github.com/mpios/mpios/mpi"
)

// Structured element types (MPICH datatype struct and vector tests: structpack, vecblklen).
func init() {
	register(
		Case{"struct-types", 2, structTypes},
		Case{"vector-column", 2, vectorColumn},
	)
}

// particle has padding after Kind and after Alive, and a nested array of structs.
type particle struct {
	Kind  int8
	Pos   [3]float64
	Alive bool
	ID    int32
	Links [2]struct{ To, Weight int16 }
}

func makeParticles(n, rank int) []particle {
	ps := make([]particle, n)
	for i := range ps {
		ps[i] = particle{Kind: int8(i % 100), Pos: [3]float64{float64(rank), float64(i), -1.5}, Alive: i%2 == 0, ID: int32(rank*1000000 + i)}
		ps[i].Links[1].Weight = int16(i)
	}
	return ps
}

// structTypes: slices of structs with padding travel point-to-point (eager and rendezvous) and
// through collectives; types with references are refused with the offending field named.
func structTypes(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	for _, n := range []int{1, 3, 5000} {
		out := makeParticles(n, r)
		in := make([]particle, n)
		ob, err := mpi.StructBytes(out)
		if err != nil {
			return err
		}
		ib, err := mpi.StructBytes(in)
		if err != nil {
			return err
		}
		st, err := mpi.Sendrecv(c, ob, right, 0, ib, left, 0)
		if err != nil {
			return err
		}
		if k, err := mpi.StructCount[particle](st.Count); err != nil || k != n {
			return fmt.Errorf("received %d particles (%v), want %d", k, err, n)
		}
		want := makeParticles(n, left)
		for i := range want {
			if in[i] != want[i] {
				return fmt.Errorf("particle %d = %+v, want %+v", i, in[i], want[i])
			}
		}
	}
	// Allgather of one particle per rank.
	all := make([]particle, p)
	ab, _ := mpi.StructBytes(all)
	mine, _ := mpi.StructBytes(makeParticles(1, r))
	if err := mpi.Allgather(c, mine, ab); err != nil {
		return err
	}
	for q := range all {
		if all[q] != makeParticles(1, q)[0] {
			return fmt.Errorf("allgather: particle of rank %d = %+v", q, all[q])
		}
	}
	type withPointer struct {
		A int
		B struct{ C [2]*int }
	}
	var se *mpi.StructTypeError
	if _, err := mpi.StructBytes([]withPointer{}); !errors.As(err, &se) || se.Field != "B.C[]" || se.Kind != "pointer" {
		return fmt.Errorf("struct with a pointer: %v", err)
	}
	if _, err := mpi.StructBytes([]struct{ S string }{}); !errors.Is(err, mpi.ErrStructType) {
		return fmt.Errorf("struct with a string: %v", err)
	}
	if _, err := mpi.StructBytes([][]float64{}); !errors.Is(err, mpi.ErrStructType) {
		return fmt.Errorf("slice elements: %v", err)
	}
	if _, err := mpi.StructCount[particle](7); !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("StructCount of a partial element: %v", err)
	}
	return nil
}

// vectorColumn: the last column of a row-major matrix goes to the right neighbour's first
// column, packed with a strided vector.
func vectorColumn(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	const rows, cols = 7, 5
	m := make([]float64, rows*cols)
	for i := range m {
		m[i] = float64(r*1000 + i)
	}
	col := mpi.Column(rows, cols)
	out, err := mpi.Pack(make([]float64, col.Len()), m[cols-1:], col)
	if err != nil {
		return err
	}
	in := make([]float64, col.Len())
	if _, err := mpi.Sendrecv(c, out, right, 0, in, left, 0); err != nil {
		return err
	}
	if err := mpi.Unpack(m[0:], in, col); err != nil {
		return err
	}
	for i := 0; i < rows; i++ {
		if got, want := m[i*cols], float64(left*1000+i*cols+cols-1); got != want {
			return fmt.Errorf("row %d: first column %v, want %v", i, got, want)
		}
		if got, want := m[i*cols+1], float64(r*1000+i*cols+1); got != want {
			return fmt.Errorf("row %d: second column changed to %v", i, got)
		}
	}
	// Blocks of two elements every three; a vector that does not fit fails.
	v := mpi.Vector{Count: 3, BlockLen: 2, Stride: 3}
	packed, err := mpi.Pack(make([]int, 6), []int{0, 1, 2, 3, 4, 5, 6, 7}, v)
	if err != nil || fmt.Sprint(packed) != "[0 1 3 4 6 7]" {
		return fmt.Errorf("Pack blocks: %v %v", packed, err)
	}
	if _, err := mpi.Pack(make([]int, 6), make([]int, 7), v); !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("Pack from a short slice: %v", err)
	}
	if err := mpi.Unpack(make([]int, 8), make([]int, 5), v); !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("Unpack of too few elements: %v", err)
	}
	return nil
}
