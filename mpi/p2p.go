package mpi

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/vmihailenco/msgpack/v5"
)

// Send sends buf to rank dest of c with tag, and returns when buf may be reused. Small messages
// are sent eagerly; large ones wait until the receiver has posted a matching receive.
func Send[T Elem](c *Comm, buf []T, dest, tag int) (err error) {
	if t := observe("Send"); t != nil {
		defer func() { t.done(c, dest, len(buf)*sizeOf[T](), err) }()
	}
	if err := c.valid("Send"); err != nil {
		return err
	}
	if err := checkTag("Send", tag, false); err != nil {
		return err
	}
	r, err := c.startSend("Send", c.ctx, asBytes(buf), elemCode[T](), dest, tag)
	if err != nil {
		return err
	}
	_, err = r.wait()
	return err
}

// Isend starts a send and returns at once; buf must not be modified until the Request completes.
func Isend[T Elem](c *Comm, buf []T, dest, tag int) (r *Request, err error) {
	if t := observe("Isend"); t != nil {
		defer func() { t.done(c, dest, len(buf)*sizeOf[T](), err) }()
	}
	return isendT(c, buf, dest, tag)
}

func isendT[T Elem](c *Comm, buf []T, dest, tag int) (*Request, error) {
	if err := c.valid("Isend"); err != nil {
		return nil, err
	}
	if err := checkTag("Isend", tag, false); err != nil {
		return nil, err
	}
	return c.isend("Isend", c.ctx, asBytes(buf), elemCode[T](), dest, tag)
}

// Recv receives a message from rank source (or AnySource) with tag (or AnyTag) into buf.
// A longer message fails with a *TruncationError and is consumed; a message of another element
// type fails with a *TypeMismatchError.
func Recv[T Elem](c *Comm, buf []T, source, tag int) (st Status, err error) {
	if t := observe("Recv"); t != nil {
		defer func() { t.done(c, st.Source, st.Count*sizeOf[T](), err) }()
	}
	r, err := irecvT(c, getRequest(), buf, source, tag)
	if err != nil {
		return Status{}, err
	}
	st, err = r.wait()
	putRequest(r)
	return st, err
}

// Irecv starts a receive into buf and returns at once.
func Irecv[T Elem](c *Comm, buf []T, source, tag int) (r *Request, err error) {
	if t := observe("Irecv"); t != nil {
		defer func() { t.done(c, source, 0, err) }()
	}
	return irecvT(c, nil, buf, source, tag)
}

// irecvT posts a receive into r (nil: a new request; see irecvInto).
func irecvT[T Elem](c *Comm, r *Request, buf []T, source, tag int) (*Request, error) {
	if err := c.valid("Irecv"); err != nil {
		return nil, err
	}
	if err := checkTag("Irecv", tag, true); err != nil {
		return nil, err
	}
	return c.irecvInto(r, "Irecv", c.ctx, asBytes(buf), elemCode[T](), sizeOf[T](), source, tag, false)
}

// Sendrecv sends send to dest and receives recv from source, without deadlocking when every
// rank does the same (the exchange of a halo, a shift around a ring).
func Sendrecv[T Elem](c *Comm, send []T, dest, sendtag int, recv []T, source, recvtag int) (st Status, err error) {
	if t := observe("Sendrecv"); t != nil {
		defer func() {
			t.i.Observe(CallEvent{Op: t.op, Comm: c, Peer: dest, Bytes: len(send) * sizeOf[T](),
				RecvPeer: st.Source, RecvBytes: st.Count * sizeOf[T](), Start: t.start, Dur: time.Since(t.start), Err: err})
		}()
	}
	return sendrecv(c, "Sendrecv", send, dest, sendtag, recv, source, recvtag)
}

func sendrecv[T Elem](c *Comm, op string, send []T, dest, sendtag int, recv []T, source, recvtag int) (Status, error) {
	if err := checkTag(op, sendtag, false); err != nil { // before a receive is posted
		return Status{}, err
	}
	rr, err := irecvT(c, getRequest(), recv, source, recvtag)
	if err != nil {
		return Status{}, err
	}
	defer putRequest(rr)
	sr, err := c.startSend(op, c.ctx, asBytes(send), elemCode[T](), dest, sendtag)
	if err != nil {
		st, _ := rr.wait() // no buffer may stay in use after we return
		return st, err
	}
	st, rerr := rr.wait()
	_, serr := sr.wait()
	if rerr != nil {
		return st, rerr
	}
	return st, serr
}

// Probe blocks until a message from source with tag can be received, without receiving it.
func (c *Comm) Probe(source, tag int) (Status, error) {
	st, _, err := c.probe("Probe", source, tag, true)
	return st, err
}

// Iprobe reports whether a message from source with tag can be received now.
func (c *Comm) Iprobe(source, tag int) (Status, bool, error) {
	return c.probe("Iprobe", source, tag, false)
}

func (c *Comm) probe(op string, source, tag int, wait bool) (Status, bool, error) {
	if err := c.valid(op); err != nil {
		return Status{}, false, err
	}
	if err := checkTag(op, tag, true); err != nil {
		return Status{}, false, err
	}
	src, err := c.worldRankOf(op, source, true)
	if err != nil {
		return Status{}, false, err
	}
	if src == ProcNull {
		return Status{Source: ProcNull, Tag: AnyTag}, true, nil
	}
	st, ok, err := c.e.probe(c, c.ctx, src, tag, wait)
	if err != nil {
		err = fmt.Errorf("mpi: %s: %w", op, err)
	}
	return st, ok, err
}

// SendValue sends any Go value, encoded with msgpack. Use it for irregular data (maps,
// structs, strings); use Send for numeric slices, which travel without encoding.
func SendValue(c *Comm, v any, dest, tag int) (err error) {
	var data []byte
	if t := observe("SendValue"); t != nil {
		defer func() { t.done(c, dest, len(data), err) }()
	}
	if err := c.valid("SendValue"); err != nil {
		return err
	}
	if err := checkTag("SendValue", tag, false); err != nil {
		return err
	}
	data, err = msgpack.Marshal(v)
	if err != nil {
		return fmt.Errorf("mpi: SendValue: encode %T: %w", v, err)
	}
	if len(data) > maxValueBytes {
		return fmt.Errorf("mpi: SendValue: %T encodes to %d bytes, RecvValue takes at most %d", v, len(data), maxValueBytes)
	}
	r, err := c.startSend("SendValue", c.ctx, data, elemValue, dest, tag)
	if err != nil {
		return err
	}
	_, err = r.wait()
	return err
}

// maxValueBytes bounds the encoded size of a value RecvValue accepts, as it allocates the
// buffer the sender announces.
const maxValueBytes = 1 << 30

// RecvValue receives a value sent with SendValue into the value ptr points to. Status.Count is
// the encoded size in bytes. A message of more than 1 GiB fails with a TruncationError.
func RecvValue(c *Comm, ptr any, source, tag int) (st Status, err error) {
	if t := observe("RecvValue"); t != nil {
		defer func() { t.done(c, st.Source, st.Count, err) }()
	}
	if err := c.valid("RecvValue"); err != nil {
		return Status{}, err
	}
	if err := checkTag("RecvValue", tag, true); err != nil {
		return Status{}, err
	}
	r, err := c.irecv("RecvValue", c.ctx, nil, elemValue, 1, source, tag, true)
	if err != nil {
		return Status{}, err
	}
	st, err = r.wait()
	if err != nil || st.Source == ProcNull {
		return st, err
	}
	if err := msgpack.Unmarshal(r.buf, ptr); err != nil {
		return st, fmt.Errorf("mpi: RecvValue: decode into %T: %w", ptr, err)
	}
	return st, nil
}

// isend sends raw bytes of element type elem on context ctx to rank dest of c.
func (c *Comm) isend(op string, ctx uint32, buf []byte, elem uint8, dest, tag int) (*Request, error) {
	r, err := c.startSend(op, ctx, buf, elem, dest, tag)
	if err == nil && r == nil {
		r = (&Request{comm: c, send: true}).completedNow()
	}
	return r, err
}

// startSend is isend for callers inside mpi: a send that completed at once (eager, to itself,
// to ProcNull) returns a nil Request, which waits return from at once, so that the common case
// allocates nothing.
func (c *Comm) startSend(op string, ctx uint32, buf []byte, elem uint8, dest, tag int) (*Request, error) {
	return c.send(nil, op, nil, ctx, buf, elem, dest, tag, false)
}

// sendWith is startSend with a frame header of the caller's, which it overwrites (collSender
// uses one header for all the messages of a collective call).
func (c *Comm) sendWith(h *comm.Header, op string, ctx uint32, buf []byte, elem uint8, dest, tag int) (*Request, error) {
	return c.send(h, op, nil, ctx, buf, elem, dest, tag, false)
}

// send is startSend with the frame header to overwrite (nil: one from a pool), the request to
// use for a send that does not complete at once (nil: a new one; persistent requests pass
// themselves) and the synchronous mode of Ssend, which completes only once a receive has
// matched the message: the message then always goes by rendezvous, whose clear-to-send is the
// receiver's acknowledgement.
func (c *Comm) send(h *comm.Header, op string, r *Request, ctx uint32, buf []byte, elem uint8, dest, tag int, sync bool) (*Request, error) {
	w, err := c.worldRankOf(op, dest, false)
	if err != nil {
		return nil, err
	}
	if w == ProcNull {
		return nil, nil
	}
	e := c.e
	if h == nil {
		h = headerPool.Get().(*comm.Header) // a header of our own would escape to the heap
		defer headerPool.Put(h)
	}
	*h = comm.Header{Kind: comm.KindEager, Elem: elem, Ctx: ctx, Tag: int32(tag), Total: uint64(len(buf))}
	if w == e.rank {
		e.mu.Lock()
		ferr := e.failure()
		e.mu.Unlock()
		if ferr != nil {
			return nil, fmt.Errorf("mpi: %s: %w", op, ferr)
		}
		if sync {
			r = c.sendRequest(r, ctx, buf, elem, w)
			e.arriveAck(w, h, buf, false, r)
			return r, nil
		}
		e.arrive(w, h, buf, false) // copies what it queues, so the send completes at once
		return nil, nil
	}
	ferr := e.peerFailure(w)
	if ferr != nil {
		return nil, fmt.Errorf("mpi: %s to rank %d: %w", op, dest, ferr)
	}
	if len(buf) <= eagerLimit && !sync {
		h.Len = uint32(len(buf))
		if err := e.ep.Send(w, h, buf); err != nil {
			return nil, fmt.Errorf("mpi: %s to rank %d: %w", op, dest, e.sendError(w, err))
		}
		return nil, nil
	}
	// from: a rendezvous send waits for the receiver's clear-to-send.
	r = c.sendRequest(r, ctx, buf, elem, w)
	h.Kind, h.ID = comm.KindRTS, r.id
	if err := e.ep.Send(w, h, nil); err != nil {
		e.mu.Lock()
		delete(e.sends, r.id)
		e.mu.Unlock()
		return nil, fmt.Errorf("mpi: %s to rank %d: %w", op, dest, e.sendError(w, err))
	}
	return r, nil
}

// sendRequest prepares r (nil: a new request) for a send to world rank w that completes
// later, and registers it among the sends waiting for their receiver.
func (c *Comm) sendRequest(r *Request, ctx uint32, buf []byte, elem uint8, w int) *Request {
	if r == nil {
		r = &Request{}
	}
	r.e, r.comm, r.ctx, r.send, r.dest, r.from, r.buf, r.elem = c.e, c, ctx, true, w, w, buf, elem
	r.id = c.e.nextID.Add(1)
	c.e.mu.Lock()
	c.e.sends[r.id] = r
	c.e.mu.Unlock()
	return r
}

// irecv posts a receive of raw bytes on context ctx from rank source of c.
func (c *Comm) irecv(op string, ctx uint32, buf []byte, elem uint8, esize, source, tag int, alloc bool) (*Request, error) {
	return c.irecvInto(nil, op, ctx, buf, elem, esize, source, tag, alloc)
}

// irecvInto is irecv into r: nil for a new request, or a zero one of requestPool, which a
// blocking call puts back once the receive completed (the result may be another request, for
// ProcNull).
func (c *Comm) irecvInto(r *Request, op string, ctx uint32, buf []byte, elem uint8, esize, source, tag int, alloc bool) (*Request, error) {
	w, err := c.worldRankOf(op, source, true)
	if err != nil {
		return nil, err
	}
	if w == ProcNull {
		return (&Request{status: Status{Source: ProcNull, Tag: AnyTag}}).completedNow(), nil
	}
	if r == nil {
		r = new(Request)
	}
	r.e, r.comm, r.ctx, r.peer, r.from, r.tag, r.buf, r.elem, r.esize, r.alloc = c.e, c, ctx, w, w, tag, buf, elem, esize, alloc
	if err := c.e.post(r); err != nil {
		return nil, fmt.Errorf("mpi: %s from rank %d: %w", op, source, err)
	}
	return r, nil
}
