package profiler

import (
	"reflect"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// TestRingCountsOfSynchronousPersistentAndMatchedCalls: the traffic of Issend, persistent
// sends and receives, SendrecvReplace and Mprobe/Mrecv lands in the per-peer tables like that
// of Send, Irecv/Wait, Sendrecv and Recv.
func TestRingCountsOfSynchronousPersistentAndMatchedCalls(t *testing.T) {
	const n, iters, k = 3, 4, 5
	p := New(Options{Job: "ring2"})
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		right, left := (c.Rank()+1)%n, (c.Rank()+n-1)%n
		out, in := make([]float64, k), make([]float64, k)
		send, err := mpi.SendInit(c, out, right, 1)
		if err != nil {
			return err
		}
		recv, err := mpi.RecvInit(c, in, left, 1)
		if err != nil {
			return err
		}
		for range iters {
			if err := mpi.StartAll(recv, send); err != nil {
				return err
			}
			if err := mpi.WaitAll(recv, send); err != nil {
				return err
			}
			if _, err := mpi.SendrecvReplace(c, out, right, 2, left, 2); err != nil {
				return err
			}
			sreq, err := mpi.Issend(c, out, right, 3)
			if err != nil {
				return err
			}
			m, _, err := c.Mprobe(left, 3)
			if err != nil {
				return err
			}
			if _, err := mpi.Mrecv(m, in); err != nil {
				return err
			}
			if _, err := sreq.Wait(); err != nil {
				return err
			}
		}
		return nil
	})
	if err := p.Uninstall(); err != nil {
		t.Fatal(err)
	}
	snaps := p.Snapshot()
	for r := range n {
		s := byRank(t, snaps, r)
		right, left := (r+1)%n, (r+n-1)%n
		if got, want := s.Sent, []PeerTraffic{{right, 3 * iters, 3 * iters * 8 * k}}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d sent %+v, want %+v", r, got, want)
		}
		if got, want := s.Received, []PeerTraffic{{left, 3 * iters, 3 * iters * 8 * k}}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d received %+v, want %+v", r, got, want)
		}
		for _, w := range []OpStat{
			{Op: "Start", Calls: 2 * iters, Bytes: iters * 8 * k},
			{Op: "SendrecvReplace", Calls: iters, Bytes: iters * 8 * k},
			{Op: "Issend", Calls: iters, Bytes: iters * 8 * k},
			{Op: "Mrecv", Calls: iters, Bytes: iters * 8 * k},
		} {
			got := s.Op(w.Op)
			got.Seconds = 0
			if got != w {
				t.Errorf("rank %d %s: %+v, want %+v", r, w.Op, got, w)
			}
		}
	}
}
