package mpi

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mpios/mpios/comm"
)

// Request is a pending nonblocking operation, returned by Isend, Irecv, Issend, Imrecv and the
// persistent SendInit, SsendInit and RecvInit. Complete it with Wait, Test, WaitAll, WaitAny,
// WaitSome, TestAll, TestAny or TestSome. A Request may be waited on from any goroutine; the
// buffer of the operation belongs to mpi until the request completes.
type Request struct {
	e    *engine
	comm *Comm
	ctx  uint32
	// finished is set by the first complete; Start of a persistent request clears it.
	finished atomic.Bool
	// done is set once status and err are written: the request is complete. A goroutine that
	// polls for its message (comm.Poller) watches it, and mostly finds it set on its own stack.
	done atomic.Bool
	// mu guards wake, closed by complete: the channel of goroutines that block until the
	// request completes, made by the first of them (waitChan). Most waits never block.
	mu   sync.Mutex
	wake chan struct{}

	status Status
	err    error

	// receive
	peer  int // world rank, or AnySource
	tag   int
	buf   []byte
	elem  uint8
	esize int
	alloc bool // grow buf to the message's size (RecvValue)

	// rendezvous
	id    uint64
	total uint64
	got   uint64

	// send
	send bool
	dest int // world rank

	// from is the world rank whose frame completes a pending request (AnySource: any), for
	// the transport's polling while wait waits. Set at creation and never changed (peer is:
	// an AnySource receive learns its sender).
	from int

	// persist is the template of a persistent request (SendInit, RecvInit), nil otherwise.
	persist *persistent
}

// complete records the outcome and wakes waiters. Only the first call counts.
func (r *Request) complete(st Status, err error) {
	if !r.finished.CompareAndSwap(false, true) {
		return
	}
	r.status, r.err = st, err
	r.mu.Lock()
	r.done.Store(true)
	wake := r.wake
	r.mu.Unlock() // the last use of r: its owner may recycle it now (putRequest)
	if wake != nil {
		close(wake)
	}
}

// completedNow marks r, a new request, as complete (with the status it holds) and returns it:
// for requests that complete when they are made, and inactive persistent ones.
func (r *Request) completedNow() *Request {
	r.finished.Store(true)
	r.done.Store(true)
	return r
}

// waitChan returns a channel that is closed once r completes.
func (r *Request) waitChan() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return closedChan
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}

// rearm makes a completed request pending again, for its next use: a persistent request's
// next activation, or the next receive of a collective's round. Nothing but its owner refers
// to it any more (complete's last step is unlocking mu).
func (r *Request) rearm() {
	r.mu.Lock()
	r.wake = nil
	r.mu.Unlock()
	r.done.Store(false)
	r.finished.Store(false)
}

// requestPool recycles the requests of blocking calls, which nothing refers to once the call
// returns: a receive then allocates nothing.
var requestPool = sync.Pool{New: func() any { return new(Request) }}

// getRequest returns a zero request from requestPool.
func getRequest() *Request { return requestPool.Get().(*Request) }

// putRequest returns r, completed (or never posted) and referred to by nothing but its
// caller, to requestPool.
func putRequest(r *Request) {
	if r == nil || r.persist != nil {
		return
	}
	r.reset()
	requestPool.Put(r)
}

// reset makes r, completed (or never posted) and referred to by nothing but its caller, a
// zero request again.
func (r *Request) reset() {
	r.mu.Lock() // complete may still be unlocking it
	r.mu.Unlock()
	*r = Request{}
}

// check validates an incoming message against the receive buffer. It returns the status the
// receive will report and the typed error for a mismatch or truncation.
func (r *Request) check(peer int, tag int32, elem uint8, total uint64) (Status, error) {
	st := Status{Source: r.comm.commRank(peer), Tag: int(tag)}
	if elem == elemAbort && r.elem != elemRaw {
		return st, &AbandonedError{Source: st.Source}
	}
	if elem != r.elem && r.elem != elemRaw {
		return st, &TypeMismatchError{Source: st.Source, Tag: st.Tag, Sent: elemName(elem), Want: elemName(r.elem)}
	}
	if total%uint64(r.esize) != 0 {
		return st, &TypeMismatchError{Source: st.Source, Tag: st.Tag, Sent: fmt.Sprintf("%d bytes", total), Want: elemName(r.elem)}
	}
	if r.alloc && total > maxValueBytes {
		// Checked before anything is allocated: a message may announce up to comm.MaxMessage.
		return st, &TruncationError{Source: st.Source, Tag: st.Tag, Have: maxValueBytes, Need: int(min(total, math.MaxInt))}
	}
	st.Count = int(total / uint64(r.esize))
	if total > uint64(len(r.buf)) && !r.alloc {
		st.Count = len(r.buf) / r.esize
		return st, &TruncationError{Source: st.Source, Tag: st.Tag, Have: len(r.buf) / r.esize, Need: int(total / uint64(r.esize))}
	}
	return st, nil
}

// deliver completes the receive with an eager payload.
func (r *Request) deliver(peer int, tag int32, elem uint8, data []byte) {
	st, err := r.check(peer, tag, elem, uint64(len(data)))
	if err == nil && r.alloc && len(data) > len(r.buf) {
		r.buf = make([]byte, len(data))
	}
	if !errors.Is(err, ErrTypeMismatch) {
		n := copy(r.buf, data)
		r.buf = r.buf[:n]
	}
	r.complete(st, err)
}

// Wait blocks until the operation completes and returns its status (meaningful for receives).
// Waiting on a nil Request returns at once, like MPI_REQUEST_NULL.
func (r *Request) Wait() (Status, error) {
	if r == nil {
		return Status{Source: ProcNull, Tag: AnyTag}, nil
	}
	if t := observe("Wait"); t != nil {
		defer func() { t.done(r.comm, r.status.Source, r.status.Count*r.esize, r.err) }()
	}
	return r.wait()
}

// wait is Wait without observation, for calls inside mpi.
func (r *Request) wait() (Status, error) {
	if r == nil {
		return Status{Source: ProcNull, Tag: AnyTag}, nil
	}
	if !r.done.Load() {
		peer := r.from
		// Take the peer's frames ourselves while the transport lets us (comm.Poller): the
		// message then completes on this goroutine, without a hand-over from a reader.
		if r.e != nil && r.e.poller != nil {
			r.e.poller.Poll(peer, &r.done)
			if r.done.Load() {
				return r.status, r.err
			}
		}
		// Tell the transport that this process waits: it keeps polling for the message
		// instead of letting its reader sleep (see comm.WaitNotifier).
		var w comm.WaitNotifier
		if r.e != nil {
			w = r.e.waitHint
		}
		if w != nil {
			w.Waiting(peer, true)
		}
		<-r.waitChan()
		if w != nil {
			w.Waiting(peer, false)
		}
	}
	return r.status, r.err
}

// Test reports whether the operation has completed, without blocking.
func (r *Request) Test() (Status, bool, error) {
	if r == nil {
		return Status{Source: ProcNull, Tag: AnyTag}, true, nil
	}
	if r.done.Load() {
		return r.status, true, r.err
	}
	return Status{}, false, nil
}

// WaitAll waits for every request and returns the first error (each request is still waited
// for, so no buffer stays in use after WaitAll returns).
// With an interceptor installed, WaitAll reports one "Wait" per request (so a profiler sees
// each receive's peer and size), the first carrying the whole duration.
func WaitAll(reqs ...*Request) error {
	p := interceptor.Load()
	if p == nil {
		return waitAll(reqs...)
	}
	start := time.Now()
	err := waitAll(reqs...)
	dur := time.Since(start)
	for _, r := range reqs {
		if r == nil {
			continue
		}
		(*p).Observe(CallEvent{Op: "Wait", Comm: r.comm, Peer: r.status.Source, Bytes: r.status.Count * r.esize,
			RecvPeer: -1, Start: start, Dur: dur, Err: r.err})
		dur = 0
	}
	return err
}

func waitAll(reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if _, err := r.wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// WaitAny waits until one of the active requests completes and returns its index and status.
// It returns -1 if none is active (every request is nil, or a persistent request never
// started).
func WaitAny(reqs ...*Request) (int, Status, error) {
	for {
		i, st, done, err := testAny(reqs)
		if done {
			return i, st, err
		}
		waitAnyChan(reqs)
	}
}
