package mpi_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

func TestAlltoallwIsSeenByTheInterceptorWithTheBytesItSends(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	rec := interceptFunc(func(ev mpi.CallEvent) {
		if ev.Op == "Alltoallw" {
			mu.Lock()
			seen[ev.Comm.Rank()] = ev.Bytes
			mu.Unlock()
		}
	})
	mpi.SetInterceptor(rec)
	defer mpi.SetInterceptor(nil)
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		// 3 int16 (6 bytes) and 1 float64 (8 bytes) out of every rank.
		send := []mpi.Block{mpi.BlockOf(make([]int16, 3)), mpi.BlockOf(make([]float64, 1))}
		recv := []mpi.Block{mpi.BlockOf(make([]int16, 3)), mpi.BlockOf(make([]int16, 3))}
		if c.Rank() == 1 {
			recv = []mpi.Block{mpi.BlockOf(make([]float64, 1)), mpi.BlockOf(make([]float64, 1))}
		}
		return mpi.Alltoallw(c, send, recv)
	})
	if len(seen) != 2 || seen[0] != 14 || seen[1] != 14 {
		t.Errorf("Alltoallw observed as %v (rank: bytes), want 14 bytes on each of 2 ranks", seen)
	}
}

type interceptFunc func(mpi.CallEvent)

func (f interceptFunc) Observe(ev mpi.CallEvent) { f(ev) }

func TestAlltoallwReturnsTypedErrors(t *testing.T) {
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		// A rank that sends itself another type than it receives from itself.
		send := []mpi.Block{mpi.BlockOf([]int32{1}), mpi.BlockOf([]int32{1})}
		recv := []mpi.Block{mpi.BlockOf([]int32{0}), mpi.BlockOf([]int32{0})}
		recv[c.Rank()] = mpi.BlockOf([]uint32{0})
		if err := mpi.Alltoallw(c, send, recv); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("own block of another type: %v, want ErrCount", err)
		}
		freed, err := c.Dup()
		if err != nil {
			return err
		}
		freed.Free()
		if err := mpi.Alltoallw(freed, send, recv); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("freed communicator: %v, want ErrComm", err)
		}
		return nil
	})
}

func ExampleAlltoallw() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 2, func(c *mpi.Comm) error {
		// Rank 0 sends rank 1 two float64 and itself an int32; rank 1 sends rank 0 a
		// string's bytes and itself nothing.
		var send, recv []mpi.Block
		names := make([]byte, 5)
		weights := make([]float64, 2)
		own := make([]int32, 1)
		if c.Rank() == 0 {
			send = []mpi.Block{mpi.BlockOf([]int32{7}), mpi.BlockOf([]float64{0.25, 0.75})}
			recv = []mpi.Block{mpi.BlockOf(own), mpi.BlockOf(names)}
		} else {
			send = []mpi.Block{mpi.BlockOf([]byte("hello")), {}}
			recv = []mpi.Block{mpi.BlockOf(weights), {}}
		}
		if err := mpi.Alltoallw(c, send, recv); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println(own, string(names))
		}
		return nil
	})
	// Output: [7] hello
}
