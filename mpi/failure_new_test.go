package mpi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
)

// TestDeadPeerFailsNewBlockingCalls: a synchronous send waiting for its match (completed
// through WaitSome), a matched probe, a persistent receive and a neighbour collective that
// wait on a rank that dies all fail with its ProcFailedError instead of hanging.
func TestDeadPeerFailsNewBlockingCalls(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			eps, worlds := attachAll(t, tr, 3)
			errs := make(chan error, 4)
			go func() {
				r, err := mpi.Issend(worlds[0], []int{1}, 2, 0) // rank 2 never receives it
				if err == nil {
					_, err = mpi.WaitSome(r)
					if err == nil {
						_, _, err = r.Test()
					}
				}
				errs <- err
			}()
			go func() {
				_, _, err := worlds[1].Mprobe(2, 0)
				errs <- err
			}()
			go func() {
				r, err := mpi.RecvInit(worlds[1], make([]int, 1), 2, 1)
				if err == nil {
					if err = r.Start(); err == nil {
						_, err = r.Wait()
					}
				}
				errs <- err
			}()
			go func() {
				// A chain 0-1-2: rank 0's neighbour collective waits on rank 1 only, so rank 1
				// alone joins it here, waiting on rank 2 (and on rank 0, which sends).
				cart, err := mpi.CartView(worlds[1], []int{3}, []bool{false})
				if err == nil {
					err = mpi.NeighborAllgather(cart, []int{1}, make([]int, 2))
				}
				errs <- err
			}()
			go func() {
				cart, _ := mpi.CartView(worlds[0], []int{3}, []bool{false})
				mpi.NeighborAllgather(cart, []int{0}, make([]int, 2))
			}()
			mpi.Send(worlds[2], []int{}, 0, 99) // rank 2 has connections to both
			mpi.Send(worlds[2], []int{}, 1, 99)
			time.Sleep(100 * time.Millisecond) // let the calls block first
			switch ep := eps[2].(type) {
			case killer:
				ep.Fail()
			case *comm.TCPEndpoint:
				ep.Abandon()
			}
			deadline := time.After(10 * time.Second)
			for range 4 {
				select {
				case err := <-errs:
					var pf *mpi.ProcFailedError
					if !errors.As(err, &pf) || pf.Rank != 2 {
						t.Errorf("want ProcFailedError for rank 2, got %v", err)
					}
				case <-deadline:
					t.Fatal("blocked calls did not fail within 10s of the peer's death")
				}
			}
			for _, ep := range eps[:2] {
				ep.Close()
			}
		})
	}
}
