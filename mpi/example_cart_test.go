package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// A 2-D periodic grid: DimsCreate picks its shape, Shift names the neighbours, and
// NeighborAllgather exchanges a value with all four of them in one call.
func ExampleCartCreate() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 6, func(world *mpi.Comm) error {
		dims := []int{0, 0}
		if err := mpi.DimsCreate(world.Size(), dims); err != nil {
			return err
		}
		cart, err := mpi.CartCreate(world, dims, []bool{true, true}, true)
		if err != nil {
			return err
		}
		coords, _ := cart.Coords(cart.Rank())
		north, south, _ := cart.Shift(0, 1)
		got := make([]int, 4) // from: north, south (dimension 0), then west, east (dimension 1)
		if err := mpi.NeighborAllgather(cart, []int{cart.Rank()}, got); err != nil {
			return err
		}
		if cart.Rank() == 4 {
			fmt.Println("grid", dims, "rank 4 at", coords, "north", north, "south", south, "neighbours", got)
		}
		return nil
	})
	// Output: grid [3 2] rank 4 at [2 0] north 2 south 0 neighbours [2 0 5 5]
}
