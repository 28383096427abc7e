package mpi_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// killer is implemented by endpoints that can simulate the death of their process.
type killer interface{ Fail() }

// attachAll returns n connected endpoints with a world attached to each, which the test
// closes itself (its ranks die or block, so they are not finalized).
func attachAll(t *testing.T, tr mpitest.Transport, n int) ([]comm.Endpoint, []*mpi.Comm) {
	t.Helper()
	eps := mpitest.Endpoints(t, tr, n)
	worlds := make([]*mpi.Comm, n)
	for i := range eps {
		w, err := mpi.Attach(eps[i])
		if err != nil {
			t.Fatal(err)
		}
		worlds[i] = w
	}
	return eps, worlds
}

func TestDeadPeerFailsBlockedCalls(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			eps, worlds := attachAll(t, tr, 3)
			errs := make(chan error, 3)
			// Rank 1 waits for a message from rank 2 (small and large), rank 0 for a large
			// send to rank 2 to be received; rank 2 dies without answering.
			go func() {
				_, err := mpi.Recv(worlds[1], make([]int, 1), 2, 0)
				errs <- err
			}()
			go func() {
				errs <- mpi.Send(worlds[0], make([]float64, 1<<20), 2, 0)
			}()
			go func() {
				// Make sure rank 2 has a connection to rank 1 (the usual case) and to rank 0.
				mpi.Send(worlds[2], []int{}, 1, 99)
				time.Sleep(100 * time.Millisecond)
				switch ep := eps[2].(type) {
				case killer:
					ep.Fail()
				case *comm.TCPEndpoint:
					// Closing abruptly is what the kernel does to a killed process's sockets.
					ep.Abandon()
				}
				errs <- nil
			}()
			deadline := time.After(10 * time.Second)
			for i := 0; i < 3; i++ {
				select {
				case err := <-errs:
					if err == nil {
						continue
					}
					var pf *mpi.ProcFailedError
					if !errors.As(err, &pf) || pf.Rank != 2 {
						t.Errorf("want ProcFailedError for rank 2, got %v", err)
					}
				case <-deadline:
					t.Fatal("blocked calls did not fail within 10s of the peer's death")
				}
			}
			// Later calls naming the dead rank fail at once; others still work.
			if err := mpi.Send(worlds[0], []int{1}, 2, 0); !errors.Is(err, mpi.ErrProcFailed) {
				t.Errorf("send to dead rank: %v", err)
			}
			go mpi.Send(worlds[0], []int{5}, 1, 1)
			v := []int{0}
			if _, err := mpi.Recv(worlds[1], v, 0, 1); err != nil || v[0] != 5 {
				t.Errorf("live ranks: %v %v", v, err)
			}
			for _, ep := range eps[:2] {
				ep.Close()
			}
		})
	}
}

func ExampleAllreduce() {
	// Ranks are goroutines here (mpitest); under mpirun each is a process and the code is the same.
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(c *mpi.Comm) error {
		local := []float64{float64(c.Rank() + 1)}
		total := make([]float64, 1)
		if err := mpi.Allreduce(c, local, total, mpi.Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("sum of 1..4 =", total[0])
		}
		return nil
	})
	// Output: sum of 1..4 = 10
}
