package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

func ExampleInit() {
	// Outside mpirun, Init gives a world of one rank, so the same program runs on a laptop.
	world, err := mpi.Init()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank %d of %d\n", world.Rank(), world.Size())
	if err := mpi.Finalize(); err != nil {
		fmt.Println(err)
	}
	// Output: rank 0 of 1
}

func ExampleSend() {
	// Ranks are goroutines here (mpitest); under mpirun each is a process and the code is the same.
	mpitest.Run(&testing.T{}, mpitest.InProc, 2, func(c *mpi.Comm) error {
		const tag = 7
		switch c.Rank() {
		case 0:
			return mpi.Send(c, []float64{1.5, 2.5, 3.5}, 1, tag)
		case 1:
			buf := make([]float64, 10) // may be longer than the message
			st, err := mpi.Recv(c, buf, 0, tag)
			if err != nil {
				return err
			}
			fmt.Println("from rank", st.Source, "got", buf[:st.Count])
		}
		return nil
	})
	// Output: from rank 0 got [1.5 2.5 3.5]
}

func ExampleComm_Split() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(world *mpi.Comm) error {
		// Even and odd ranks form two communicators; ranks keep their order (key = world rank).
		half, err := world.Split(world.Rank()%2, world.Rank())
		if err != nil {
			return err
		}
		sum := make([]int, 1)
		if err := mpi.Allreduce(half, []int{world.Rank()}, sum, mpi.Sum); err != nil {
			return err
		}
		if world.Rank() == 3 {
			fmt.Printf("world rank 3 is rank %d of %d in its half; the half's ranks sum to %d\n", half.Rank(), half.Size(), sum[0])
		}
		return nil
	})
	// Output: world rank 3 is rank 1 of 2 in its half; the half's ranks sum to 4
}
