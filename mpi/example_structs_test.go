package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// Slices of fixed-size structs travel as memory, with no encoding: StructBytes views them as
// bytes for Send, Recv and the collectives.
func ExampleStructBytes() {
	type body struct {
		Pos  [3]float64
		Mass float32
		ID   int32
	}
	mpitest.Run(&testing.T{}, mpitest.InProc, 2, func(c *mpi.Comm) error {
		if c.Rank() == 0 {
			b, err := mpi.StructBytes([]body{{Pos: [3]float64{1, 2, 3}, Mass: 5, ID: 7}, {ID: 8}})
			if err != nil {
				return err
			}
			return mpi.Send(c, b, 1, 0)
		}
		got := make([]body, 4)
		b, err := mpi.StructBytes(got)
		if err != nil {
			return err
		}
		st, err := mpi.Recv(c, b, 0, 0)
		if err != nil {
			return err
		}
		n, err := mpi.StructCount[body](st.Count)
		fmt.Println(n, "bodies:", got[:n], err)
		return nil
	})
	// Output: 2 bodies: [{[1 2 3] 5 7} {[0 0 0] 0 8}] <nil>
}

// A column of a row-major matrix, packed with a strided vector for sending and unpacked on
// arrival.
func ExamplePack() {
	const rows, cols = 3, 4
	m := []int{
		0, 1, 2, 3,
		4, 5, 6, 7,
		8, 9, 10, 11,
	}
	col := mpi.Column(rows, cols)
	last, _ := mpi.Pack(make([]int, col.Len()), m[cols-1:], col) // column 3
	_ = mpi.Unpack(m[0:], last, col)                             // into column 0
	fmt.Println(last, m)
	// Output: [3 7 11] [3 1 2 3 7 5 6 7 11 9 10 11]
}
