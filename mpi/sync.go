package mpi

import (
	"errors"
	"time"
)

// Synchronous sends (MPI_Ssend, MPI_Issend) complete only once a matching receive has been
// posted at the destination. They always use the rendezvous protocol, whatever the size: the
// receiver's clear-to-send is the acknowledgement that the message matched. A synchronous
// send of a rank to itself completes when its own receive matches it. Plain Send keeps its
// eager path for small messages.

// Ssend sends buf to rank dest of c with tag and returns once a receive has matched the message
// and buf may be reused (MPI_Ssend). A program that is correct with Ssend does not rely on
// buffering, which makes it the tool for finding unsafe send orders.
func Ssend[T Elem](c *Comm, buf []T, dest, tag int) (err error) {
	if t := observe("Ssend"); t != nil {
		defer func() { t.done(c, dest, len(buf)*sizeOf[T](), err) }()
	}
	r, err := issendT(c, "Ssend", buf, dest, tag)
	if err != nil {
		return err
	}
	_, err = r.wait()
	return err
}

// Issend starts a synchronous send (MPI_Issend): the Request completes once a receive has
// matched the message.
func Issend[T Elem](c *Comm, buf []T, dest, tag int) (r *Request, err error) {
	if t := observe("Issend"); t != nil {
		defer func() { t.done(c, dest, len(buf)*sizeOf[T](), err) }()
	}
	r, err = issendT(c, "Issend", buf, dest, tag)
	if err == nil && r == nil {
		r = (&Request{comm: c, send: true}).completedNow() // to ProcNull
	}
	return r, err
}

func issendT[T Elem](c *Comm, op string, buf []T, dest, tag int) (*Request, error) {
	if err := c.valid(op); err != nil {
		return nil, err
	}
	if err := checkTag(op, tag, false); err != nil {
		return nil, err
	}
	return c.send(nil, op, nil, c.ctx, asBytes(buf), elemCode[T](), dest, tag, true)
}

// SendrecvReplace sends buf to dest and receives into buf from source (MPI_Sendrecv_replace):
// a Sendrecv with one buffer. The message received may be shorter than buf; the elements
// beyond Status.Count keep their values.
func SendrecvReplace[T Elem](c *Comm, buf []T, dest, sendtag, source, recvtag int) (st Status, err error) {
	if t := observe("SendrecvReplace"); t != nil {
		defer func() {
			t.i.Observe(CallEvent{Op: t.op, Comm: c, Peer: dest, Bytes: len(buf) * sizeOf[T](),
				RecvPeer: st.Source, RecvBytes: st.Count * sizeOf[T](), Start: t.start, Dur: time.Since(t.start), Err: err})
		}()
	}
	if err := c.valid("SendrecvReplace"); err != nil {
		return Status{}, err
	}
	// The outgoing message is read from buf while the incoming one arrives: receive into a
	// copy's worth of space, then move it in.
	tmp := make([]T, len(buf))
	st, err = sendrecv(c, "SendrecvReplace", buf, dest, sendtag, tmp, source, recvtag)
	if err == nil || errors.Is(err, ErrTruncate) {
		copy(buf, tmp[:min(st.Count, len(buf))])
	}
	return st, err
}
