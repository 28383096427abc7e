package mpi

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Completion calls over several requests (MPI_Testall, MPI_Testany, MPI_Waitsome,
// MPI_Testsome) and cancellation (MPI_Cancel). They accept any *Request: point-to-point,
// persistent, or returned by a nonblocking collective. As in MPI, a nil request (the
// counterpart of MPI_REQUEST_NULL) and a persistent request that was never started are
// inactive: they are skipped. A completed request stays complete; callers that loop over
// WaitSome or TestSome set the requests they were given back to nil, as MPI sets them to
// MPI_REQUEST_NULL.

// ErrCancel reports a request that can no longer be cancelled: a receive already matched by a
// message, a completed request, or a send (sends are never cancelled: MPI-4 deprecates it).
// The request is unaffected and completes as usual.
var ErrCancel = errors.New("mpi: request cannot be cancelled")

// active reports whether r takes part in a completion call.
func (r *Request) active() bool {
	return r != nil && (r.persist == nil || r.persist.started.Load())
}

// completed reports whether r has completed, without blocking.
func (r *Request) completed() bool { return r.done.Load() }

// TestAll reports whether every request has completed, without blocking (MPI_Testall). When
// they have, it returns the first of their errors; their statuses are then available from
// each request's Test or Wait.
func TestAll(reqs ...*Request) (done bool, err error) {
	if t := observe("TestAll"); t != nil {
		defer func() {
			if done {
				reportCompleted(t, reqs, nil, true)
			} else {
				t.done(nil, -1, 0, nil)
			}
		}()
	}
	for _, r := range reqs {
		if r.active() && !r.completed() {
			return false, nil
		}
	}
	for _, r := range reqs {
		if r.active() && r.err != nil {
			return true, r.err
		}
	}
	return true, nil
}

// TestAny reports whether one of the active requests has completed, without blocking
// (MPI_Testany). It returns the index and status of the first completed one; with no active
// request at all it returns index -1 and done true, like MPI's MPI_UNDEFINED.
func TestAny(reqs ...*Request) (index int, st Status, done bool, err error) {
	if t := observe("TestAny"); t != nil {
		defer func() {
			if index >= 0 {
				reportCompleted(t, reqs, []int{index}, false)
			} else {
				t.done(nil, -1, 0, err)
			}
		}()
	}
	return testAny(reqs)
}

func testAny(reqs []*Request) (int, Status, bool, error) {
	live := 0
	for i, r := range reqs {
		if !r.active() {
			continue
		}
		live++
		if r.completed() {
			return i, r.status, true, r.err
		}
	}
	if live == 0 {
		return -1, Status{Source: ProcNull, Tag: AnyTag}, true, nil
	}
	return -1, Status{}, false, nil
}

// WaitSome blocks until at least one active request has completed and returns the indices of
// all that have (MPI_Waitsome), in increasing order, with the first of their errors. With no
// active request it returns nil at once.
func WaitSome(reqs ...*Request) (indices []int, err error) {
	if t := observe("WaitSome"); t != nil {
		defer func() { reportCompleted(t, reqs, indices, false) }()
	}
	for {
		indices, live, err := testSome(reqs)
		if len(indices) > 0 || live == 0 {
			return indices, err
		}
		waitAnyChan(reqs)
	}
}

// TestSome returns the indices of the active requests that have completed, without blocking
// (MPI_Testsome), with the first of their errors. The slice is empty when none has.
func TestSome(reqs ...*Request) (indices []int, err error) {
	if t := observe("TestSome"); t != nil {
		defer func() { reportCompleted(t, reqs, indices, false) }()
	}
	indices, _, err = testSome(reqs)
	return indices, err
}

// testSome returns the completed active requests, the number of active ones and the first
// error of the completed.
func testSome(reqs []*Request) (indices []int, live int, err error) {
	for i, r := range reqs {
		if !r.active() {
			continue
		}
		live++
		if r.completed() {
			indices = append(indices, i)
			if err == nil {
				err = r.err
			}
		}
	}
	return indices, live, err
}

// waitAnyChan blocks until one of the active requests completes.
func waitAnyChan(reqs []*Request) {
	cases := make([]reflect.SelectCase, 0, len(reqs))
	for _, r := range reqs {
		if r.active() {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.waitChan())})
		}
	}
	if len(cases) > 0 {
		reflect.Select(cases)
	}
}

// reportCompleted tells the interceptor about a completion call as WaitAll does: one "Wait"
// per completed request (the given indices, or with all every active one), so that a
// profiler sees each receive's peer and size, the first carrying the call's duration; a call
// that completed nothing is reported under its own name.
func reportCompleted(t *trace, reqs []*Request, indices []int, all bool) {
	dur := time.Since(t.start)
	reported := false
	for i, r := range reqs {
		if !r.active() || (!all && !slices.Contains(indices, i)) {
			continue
		}
		t.i.Observe(CallEvent{Op: "Wait", Comm: r.comm, Peer: r.status.Source, Bytes: r.status.Count * r.esize,
			RecvPeer: -1, Start: t.start, Dur: dur, Err: r.err})
		dur, reported = 0, true
	}
	if !reported {
		t.done(nil, -1, 0, nil)
	}
}

// Cancel cancels a pending receive (MPI_Cancel): if no message has matched it yet, it is
// withdrawn and completes at once with Status.Cancelled set and no error, its buffer
// untouched. A receive that a message already matched, a completed request and a send are not
// cancelled: Cancel returns an error wrapping ErrCancel and the request completes as usual.
// Either way the request must still be completed (Wait, Test, ...).
func (r *Request) Cancel() (err error) {
	if t := observe("Cancel"); t != nil {
		defer func() { t.done(r.commOrNil(), -1, 0, err) }()
	}
	switch {
	case r == nil:
		return fmt.Errorf("mpi: Cancel: %w: nil request", ErrCancel)
	case r.send:
		return fmt.Errorf("mpi: Cancel: %w: a send", ErrCancel)
	case r.e == nil || !r.active():
		return fmt.Errorf("mpi: Cancel: %w: not pending", ErrCancel)
	}
	if !r.e.withdrawOne(r) {
		return fmt.Errorf("mpi: Cancel: %w: already matched", ErrCancel)
	}
	src := AnySource
	if r.peer != AnySource {
		src = r.comm.commRank(r.peer)
	}
	r.complete(Status{Source: src, Tag: r.tag, Cancelled: true}, nil)
	return nil
}

func (r *Request) commOrNil() *Comm {
	if r == nil {
		return nil
	}
	return r.comm
}

// withdrawOne removes receive r from the posted receives if no message has matched it yet.
func (e *engine) withdrawOne(r *Request) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.ctxs[r.ctx]
	if q == nil {
		return false
	}
	for i, p := range q.posted {
		if p == r {
			q.posted = append(q.posted[:i], q.posted[i+1:]...)
			return true
		}
	}
	return false
}
