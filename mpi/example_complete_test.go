package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// A halo exchange repeated every iteration binds its buffers once (SendInit, RecvInit) and
// starts the same requests each time.
func ExampleSendInit() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 3, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		out, in := make([]float64, 1), make([]float64, 1)
		recv, err := mpi.RecvInit(c, in, (r-1+p)%p, 0)
		if err != nil {
			return err
		}
		send, err := mpi.SendInit(c, out, (r+1)%p, 0)
		if err != nil {
			return err
		}
		sum := 0.0
		for iter := 0; iter < 4; iter++ {
			out[0] = float64(10*iter + r) // the send reads out at each Start
			if err := mpi.StartAll(recv, send); err != nil {
				return err
			}
			if err := mpi.WaitAll(recv, send); err != nil {
				return err
			}
			sum += in[0]
		}
		if r == 0 {
			fmt.Println("rank 0 received", sum)
		}
		return nil
	})
	// Output: rank 0 received 68
}

// WaitSome hands over the receives as they complete, whatever their order.
func ExampleWaitSome() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(c *mpi.Comm) error {
		if c.Rank() != 0 {
			return mpi.Send(c, []int{c.Rank() * c.Rank()}, 0, 0)
		}
		reqs := make([]*mpi.Request, c.Size()-1)
		bufs := make([][]int, c.Size()-1)
		for i := range reqs {
			bufs[i] = make([]int, 1)
			reqs[i], _ = mpi.Irecv(c, bufs[i], i+1, 0)
		}
		total := 0
		for {
			done, err := mpi.WaitSome(reqs...)
			if err != nil {
				return err
			}
			if done == nil {
				break // no active request left
			}
			for _, i := range done {
				total += bufs[i][0]
				reqs[i] = nil
			}
		}
		fmt.Println("sum of squares:", total)
		return nil
	})
	// Output: sum of squares: 14
}
