package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// A communicator of the ranks a group lists: rank 0 and the odd ranks here, a "manager and
// workers" split made from set operations on groups.
func ExampleCommCreate() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 5, func(world *mpi.Comm) error {
		all := world.Group()
		evens, _ := all.Incl([]int{0, 2, 4})
		manager, _ := all.Incl([]int{0})
		team := all.Difference(evens).Union(manager) // ranks 1, 3, then 0
		c, err := mpi.CommCreate(world, team)
		if err != nil || c == nil { // ranks 2 and 4 get nil
			return err
		}
		sum := []int{0}
		if err := mpi.Allreduce(c, []int{world.Rank()}, sum, mpi.Sum); err != nil {
			return err
		}
		if world.Rank() == 0 {
			in, _ := team.TranslateRanks([]int{0, 1, 2}, all)
			fmt.Println("team of world ranks", in, "my rank", c.Rank(), "sum", sum[0])
		}
		return nil
	})
	// Output: team of world ranks [1 3 0] my rank 2 sum 4
}
