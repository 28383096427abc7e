package mpi

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Persistent requests (MPI_Send_init, MPI_Ssend_init, MPI_Recv_init, MPI_Start,
// MPI_Startall): a halo exchange repeated every iteration binds its buffers, peers and tags
// once, then each iteration starts the requests and waits for them. A persistent request is
// inactive until Start; Wait, Test and the other completion calls complete the current
// activation, after which Start may activate it again. Waiting on an inactive persistent
// request returns at once with an empty status.

// ErrRequest reports a request that does not fit the call: Start of a request that is not
// persistent or is still active.
var ErrRequest = errors.New("mpi: invalid request")

// inactiveStatus is the empty status of an inactive request, as for MPI_REQUEST_NULL.
var inactiveStatus = Status{Source: ProcNull, Tag: AnyTag}

// persistent is the template of a persistent request.
type persistent struct {
	buf     []byte
	elem    uint8
	peer    int // comm rank of the destination or source (or ProcNull, AnySource)
	sync    bool
	started atomic.Bool // Start was called at least once (until then the request is inactive)
}

// SendInit creates a persistent send of buf to rank dest of c with tag (MPI_Send_init). buf
// is read by every Start, so it may change between activations but not while one is active.
func SendInit[T Elem](c *Comm, buf []T, dest, tag int) (r *Request, err error) {
	if t := observe("SendInit"); t != nil {
		defer func() { t.done(c, dest, 0, err) }()
	}
	return sendInit(c, "SendInit", asBytes(buf), elemCode[T](), sizeOf[T](), dest, tag, false)
}

// SsendInit is SendInit for synchronous sends (MPI_Ssend_init): each activation completes only
// once a receive has matched its message.
func SsendInit[T Elem](c *Comm, buf []T, dest, tag int) (r *Request, err error) {
	if t := observe("SsendInit"); t != nil {
		defer func() { t.done(c, dest, 0, err) }()
	}
	return sendInit(c, "SsendInit", asBytes(buf), elemCode[T](), sizeOf[T](), dest, tag, true)
}

func sendInit(c *Comm, op string, buf []byte, elem uint8, esize, dest, tag int, sync bool) (*Request, error) {
	if err := c.valid(op); err != nil {
		return nil, err
	}
	if err := checkTag(op, tag, false); err != nil {
		return nil, err
	}
	w, err := c.worldRankOf(op, dest, false)
	if err != nil {
		return nil, err
	}
	r := &Request{e: c.e, comm: c, ctx: c.ctx, status: inactiveStatus, send: true, dest: w, from: w, tag: tag,
		elem: elem, esize: esize, persist: &persistent{buf: buf, elem: elem, peer: dest, sync: sync}}
	return r.completedNow(), nil
}

// RecvInit creates a persistent receive into buf from rank source (or AnySource) of c with
// tag (or AnyTag) (MPI_Recv_init).
func RecvInit[T Elem](c *Comm, buf []T, source, tag int) (r *Request, err error) {
	if t := observe("RecvInit"); t != nil {
		defer func() { t.done(c, source, 0, err) }()
	}
	if err := c.valid("RecvInit"); err != nil {
		return nil, err
	}
	if err := checkTag("RecvInit", tag, true); err != nil {
		return nil, err
	}
	w, err := c.worldRankOf("RecvInit", source, true)
	if err != nil {
		return nil, err
	}
	b := asBytes(buf)
	r = &Request{e: c.e, comm: c, ctx: c.ctx, status: inactiveStatus, peer: w, from: w, tag: tag, buf: b,
		elem: elemCode[T](), esize: sizeOf[T](), persist: &persistent{buf: b, elem: elemCode[T](), peer: source}}
	return r.completedNow(), nil
}

// Start activates a persistent request (MPI_Start). It fails with ErrRequest for a request that
// is not persistent or whose previous activation has not completed.
func (r *Request) Start() (err error) {
	if t := observe("Start"); t != nil {
		defer func() { r.reportStart(t, err) }()
	}
	return r.start()
}

// reportStart tells the interceptor about one activation: a send's peer and size, so that a
// profiler counts the traffic of persistent sends (a receive's is reported when it completes,
// by the Wait that completes it).
func (r *Request) reportStart(t *trace, err error) {
	peer, bytes := -1, 0
	if r != nil && r.persist != nil && r.send {
		peer, bytes = r.persist.peer, len(r.persist.buf)
	}
	t.done(r.commOrNil(), peer, bytes, err)
}

func (r *Request) start() error {
	if r == nil || r.persist == nil {
		return fmt.Errorf("mpi: Start: %w: not a persistent request", ErrRequest)
	}
	if !r.completed() {
		return fmt.Errorf("mpi: Start: %w: still active", ErrRequest)
	}
	if err := r.comm.valid("Start"); err != nil {
		return err
	}
	p := r.persist
	// The previous activation is complete and the engine holds no reference to r: reset it.
	r.rearm()
	r.status, r.err, r.id, r.total, r.got = Status{}, nil, 0, 0, 0
	p.started.Store(true)
	if r.send {
		pending, err := r.comm.send(nil, "Start", r, r.ctx, p.buf, p.elem, p.peer, r.tag, p.sync)
		if err != nil {
			r.complete(Status{}, err)
			return err
		}
		if pending == nil {
			r.complete(Status{}, nil)
		}
		return nil
	}
	r.buf, r.peer = p.buf, r.from
	if r.peer == ProcNull {
		r.complete(Status{Source: ProcNull, Tag: AnyTag}, nil)
		return nil
	}
	if err := r.e.post(r); err != nil {
		err = fmt.Errorf("mpi: Start: receive from rank %d: %w", p.peer, err)
		r.complete(Status{}, err)
		return err
	}
	return nil
}

// StartAll starts every request (MPI_Startall) and returns the first error; the requests that
// did start must still be completed. With an interceptor installed it reports one "Start" per
// request.
func StartAll(reqs ...*Request) (err error) {
	for _, r := range reqs {
		var serr error
		if t := observe("Start"); t != nil {
			serr = r.start()
			r.reportStart(t, serr)
		} else {
			serr = r.start()
		}
		if serr != nil && err == nil {
			err = serr
		}
	}
	return err
}
