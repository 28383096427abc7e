package mpisuite

import (
	"errors"
	"slices"

	"github.com/mpios/mpios/mpi"
)

// Completion calls and cancellation (MPICH pt2pt waitany-null, testsome/waitsome, rcancel,
// sendinit/startall).
func init() {
	register(
		Case{"waitsome-testsome", 2, waitSomeTestSome},
		Case{"testall-testany", 2, testAllTestAny},
		Case{"rcancel", 2, receiveCancel},
		Case{"persistent-startall", 2, persistentStartAll},
	)
}

// waitSomeTestSome: rank 0 receives one message from every other rank, eager and rendezvous
// sizes, completing them with WaitSome and TestSome; each request is reported exactly once.
func waitSomeTestSome(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	size := func(peer int) int { return 10 + (peer%2)*20000 }
	for round, useTest := range []bool{false, true} {
		if r != 0 {
			if err := mpi.Send(c, fill(size(r), r, round), 0, 7); err != nil {
				return err
			}
			continue
		}
		reqs := make([]*mpi.Request, p-1)
		bufs := make([][]float64, p-1)
		for i := range reqs {
			bufs[i] = make([]float64, size(i+1))
			var err error
			if reqs[i], err = mpi.Irecv(c, bufs[i], i+1, 7); err != nil {
				return err
			}
		}
		seen := make([]int, p-1)
		for left := p - 1; left > 0; {
			var idx []int
			var err error
			if useTest {
				idx, err = mpi.TestSome(reqs...)
			} else {
				idx, err = mpi.WaitSome(reqs...)
				if err := check(len(idx) > 0, "WaitSome returned no request with %d pending", left); err != nil {
					return err
				}
			}
			if err != nil {
				return err
			}
			if err := check(slices.IsSorted(idx), "indices %v not increasing", idx); err != nil {
				return err
			}
			for _, i := range idx {
				st, done, err := reqs[i].Test()
				if err := check(done && err == nil && st.Source == i+1 && st.Count == size(i+1), "request %d: %+v %v %v", i, st, done, err); err != nil {
					return err
				}
				if err := sameAs(bufs[i], fill(size(i+1), i+1, round)); err != nil {
					return err
				}
				seen[i]++
				reqs[i] = nil // as MPI sets it to MPI_REQUEST_NULL
				left--
			}
		}
		if err := check(!slices.ContainsFunc(seen, func(n int) bool { return n != 1 }), "completions per request %v", seen); err != nil {
			return err
		}
		if idx, err := mpi.WaitSome(reqs...); idx != nil || err != nil {
			return check(false, "WaitSome of inactive requests: %v %v", idx, err)
		}
	}
	return nil
}

// testAllTestAny: receives posted before anybody sends are not complete; once the senders
// pass a barrier they all complete, and TestAll reports it.
func testAllTestAny(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	in := make([]int64, 3)
	rr, err := mpi.Irecv(c, in, left, 9)
	if err != nil {
		return err
	}
	done, err := mpi.TestAll(rr, nil)
	if err := check(!done && err == nil, "TestAll before any send: %v %v", done, err); err != nil {
		return err
	}
	i, _, done, err := mpi.TestAny(rr)
	if err := check(i == -1 && !done && err == nil, "TestAny before any send: %d %v %v", i, done, err); err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if err := mpi.Send(c, []int64{int64(r), 1, 2}, right, 9); err != nil {
		return err
	}
	for {
		i, st, done, err := mpi.TestAny(nil, rr)
		if err != nil {
			return err
		}
		if done {
			if err := check(i == 1 && st.Source == left && in[0] == int64(left), "TestAny: %d %+v %v", i, st, in); err != nil {
				return err
			}
			break
		}
	}
	if done, err := mpi.TestAll(rr, nil); !done || err != nil {
		return check(false, "TestAll after completion: %v %v", done, err)
	}
	i, st, done, err := mpi.TestAny(nil, nil)
	return check(i == -1 && done && err == nil && st.Source == mpi.ProcNull, "TestAny of nils: %d %+v %v %v", i, st, done, err)
}

// receiveCancel: a receive nothing matches is cancelled and reports it; a receive a message
// already matched is not; a cancelled AnySource receive does not take a later message.
func receiveCancel(c *mpi.Comm) error {
	r := c.Rank()
	buf := []float64{-1, -1}
	req, err := mpi.Irecv(c, buf, mpi.AnySource, 76) // sent only after the barrier below
	if err != nil {
		return err
	}
	if err := req.Cancel(); err != nil {
		return err
	}
	st, err := req.Wait()
	if err := check(err == nil && st.Cancelled && buf[0] == -1, "cancelled receive: %+v %v %v", st, err, buf); err != nil {
		return err
	}
	if err := check(errors.Is(req.Cancel(), mpi.ErrCancel), "second cancel succeeded"); err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	// Rank 1 sends to rank 0, which cancels a receive the message has already matched.
	switch r {
	case 1:
		if err := mpi.Send(c, []float64{5}, 0, 76); err != nil {
			return err
		}
		if err := mpi.Send(c, []float64{1, 2}, 0, 77); err != nil {
			return err
		}
		sreq, err := mpi.Isend(c, []float64{3}, 0, 78)
		if err != nil {
			return err
		}
		if err := check(errors.Is(sreq.Cancel(), mpi.ErrCancel), "a send was cancelled"); err != nil {
			return err
		}
		if _, err := sreq.Wait(); err != nil {
			return err
		}
	case 0:
		// The cancelled receive did not take this message.
		if _, err := mpi.Recv(c, buf[:1], 1, 76); err != nil || buf[0] != 5 {
			return check(false, "message after a cancelled receive: %v %v", buf, err)
		}
		if _, err := c.Probe(1, 77); err != nil { // the message has arrived
			return err
		}
		req, err := mpi.Irecv(c, buf, 1, 77) // matches at once
		if err != nil {
			return err
		}
		cerr := req.Cancel()
		st, err := req.Wait()
		if err := check(errors.Is(cerr, mpi.ErrCancel) && err == nil && !st.Cancelled && buf[1] == 2, "cancel of a matched receive: %v, %+v %v %v", cerr, st, err, buf); err != nil {
			return err
		}
		one := []float64{0}
		if _, err := mpi.Recv(c, one, 1, 78); err != nil || one[0] != 3 {
			return check(false, "message after a failed cancel of a send: %v %v", one, err)
		}
	}
	return nil
}

// persistentStartAll: a ring exchange with persistent requests, restarted every iteration
// with new data, in eager and rendezvous sizes; Start of an active or a plain request fails.
func persistentStartAll(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	for _, n := range []int{5, 30000} {
		out := make([]float64, n)
		in := make([]float64, n)
		recv, err := mpi.RecvInit(c, in, left, 3)
		if err != nil {
			return err
		}
		send, err := mpi.SendInit(c, out, right, 3)
		if err != nil {
			return err
		}
		if st, err := recv.Wait(); err != nil || st.Source != mpi.ProcNull {
			return check(false, "wait on an inactive persistent request: %+v %v", st, err)
		}
		for iter := 0; iter < 10; iter++ {
			copy(out, fill(n, r, iter))
			if err := mpi.StartAll(recv, send); err != nil {
				return err
			}
			if err := mpi.WaitAll(recv, send); err != nil {
				return err
			}
			if err := sameAs(in, fill(n, left, iter)); err != nil {
				return check(false, "size %d iteration %d: %v", n, iter, err)
			}
		}
	}
	// A persistent receive nothing matches: a second Start fails, Cancel withdraws it.
	idle, err := mpi.RecvInit(c, make([]float64, 1), left, 4)
	if err != nil {
		return err
	}
	for iter := 0; iter < 2; iter++ {
		if err := idle.Start(); err != nil {
			return err
		}
		if err := check(errors.Is(idle.Start(), mpi.ErrRequest), "Start of an active request"); err != nil {
			return err
		}
		if err := idle.Cancel(); err != nil {
			return err
		}
		if st, err := idle.Wait(); err != nil || !st.Cancelled {
			return check(false, "cancelled persistent receive: %+v %v", st, err)
		}
	}
	plain, err := mpi.Isend(c, []int{1}, mpi.ProcNull, 0)
	if err != nil {
		return err
	}
	return check(errors.Is(plain.Start(), mpi.ErrRequest), "Start of a plain request")
}
