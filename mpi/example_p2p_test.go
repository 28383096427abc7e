package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// Mprobe takes a message of unknown size out of matching, so that the buffer can be sized
// before Mrecv without another goroutine's receive taking the message meanwhile.
func ExampleComm_Mprobe() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 2, func(c *mpi.Comm) error {
		if c.Rank() == 1 {
			return mpi.Ssend(c, []int32{4, 5, 6}, 0, 0) // returns once rank 0 has matched it
		}
		m, st, err := c.Mprobe(mpi.AnySource, mpi.AnyTag)
		if err != nil {
			return err
		}
		buf := make([]int32, st.Count)
		if _, err := mpi.Mrecv(m, buf); err != nil {
			return err
		}
		fmt.Println("from rank", st.Source, "got", buf)
		return nil
	})
	// Output: from rank 1 got [4 5 6]
}

// SendrecvReplace shifts values around a ring in place.
func ExampleSendrecvReplace() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 3, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		buf := []int{r * 10}
		if _, err := mpi.SendrecvReplace(c, buf, (r+1)%p, 0, (r-1+p)%p, 0); err != nil {
			return err
		}
		if r == 0 {
			fmt.Println("rank 0 now holds", buf[0])
		}
		return nil
	})
	// Output: rank 0 now holds 20
}
