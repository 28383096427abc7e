package mpi

import (
	"fmt"
	"sync/atomic"
)

// Matched probes (MPI_Mprobe, MPI_Improbe, MPI_Mrecv, MPI_Imrecv). Probe then Recv is unsafe
// when several goroutines of a rank receive from the same source: another goroutine's receive
// may take the probed message between the two calls. Mprobe takes the message out of matching
// and hands it to the caller as a *Message, which only Mrecv (or Imrecv) can receive.

// Message is a message that Mprobe took out of matching (MPI_Message). Receive it exactly once
// with Mrecv or Imrecv; until then it counts as a pending operation (see Comm.Pending).
type Message struct {
	c        *Comm
	m        *message // nil for a message "from" ProcNull (MPI_MESSAGE_NO_PROC)
	st       Status
	received atomic.Bool
}

// Status returns the probed message's status (its source, tag and element count).
func (m *Message) Status() Status { return m.st }

// Mprobe blocks until a message from source with tag can be received and takes it out of
// matching (MPI_Mprobe): no other receive can match it any more.
func (c *Comm) Mprobe(source, tag int) (m *Message, st Status, err error) {
	if t := observe("Mprobe"); t != nil {
		defer func() { t.done(c, st.Source, 0, err) }()
	}
	m, st, _, err = c.mprobe("Mprobe", source, tag, true)
	return m, st, err
}

// Improbe is Mprobe without blocking (MPI_Improbe): found is false, and m nil, when no
// matching message has arrived.
func (c *Comm) Improbe(source, tag int) (m *Message, st Status, found bool, err error) {
	if t := observe("Improbe"); t != nil {
		defer func() { t.done(c, st.Source, 0, err) }()
	}
	return c.mprobe("Improbe", source, tag, false)
}

func (c *Comm) mprobe(op string, source, tag int, wait bool) (*Message, Status, bool, error) {
	if err := c.valid(op); err != nil {
		return nil, Status{}, false, err
	}
	if err := checkTag(op, tag, true); err != nil {
		return nil, Status{}, false, err
	}
	src, err := c.worldRankOf(op, source, true)
	if err != nil {
		return nil, Status{}, false, err
	}
	if src == ProcNull {
		st := Status{Source: ProcNull, Tag: AnyTag}
		return &Message{c: c, st: st}, st, true, nil
	}
	msg, st, ok, err := c.e.take(c, c.ctx, src, tag, wait)
	if err != nil {
		return nil, Status{}, false, fmt.Errorf("mpi: %s: %w", op, err)
	}
	if !ok {
		return nil, Status{}, false, nil
	}
	return &Message{c: c, m: msg, st: st}, st, true, nil
}

// Mrecv receives a message that Mprobe took (MPI_Mrecv), into buf, with the checks of Recv.
func Mrecv[T Elem](m *Message, buf []T) (st Status, err error) {
	if t := observe("Mrecv"); t != nil {
		defer func() { t.done(m.comm(), st.Source, st.Count*sizeOf[T](), err) }()
	}
	r, err := imrecvT(m, buf)
	if err != nil {
		return Status{}, err
	}
	return r.wait()
}

// Imrecv starts receiving a message that Mprobe took (MPI_Imrecv).
func Imrecv[T Elem](m *Message, buf []T) (r *Request, err error) {
	if t := observe("Imrecv"); t != nil {
		defer func() { t.done(m.comm(), m.st.Source, 0, err) }()
	}
	return imrecvT(m, buf)
}

func (m *Message) comm() *Comm {
	if m == nil {
		return nil
	}
	return m.c
}

func imrecvT[T Elem](m *Message, buf []T) (*Request, error) {
	if m == nil {
		return nil, fmt.Errorf("mpi: Mrecv: %w: nil message", ErrRequest)
	}
	if !m.received.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("mpi: Mrecv: %w: message already received", ErrRequest)
	}
	if m.m == nil {
		return (&Request{comm: m.c, status: Status{Source: ProcNull, Tag: AnyTag}}).completedNow(), nil
	}
	c, msg := m.c, m.m
	r := &Request{e: c.e, comm: c, ctx: c.ctx, peer: msg.peer, from: msg.peer,
		tag: int(msg.tag), buf: asBytes(buf), elem: elemCode[T](), esize: sizeOf[T]()}
	c.e.mu.Lock()
	c.e.claimed--
	c.e.mu.Unlock()
	c.e.receive(r, msg)
	return r, nil
}
