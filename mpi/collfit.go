package mpi

import (
	"errors"
	"fmt"

	"github.com/mpios/mpios/comm"
)

// Buffers that do not fit a collective.
//
// A rank whose buffer does not fit what the others send (a Bcast buffer shorter or longer than
// the root's, a Gatherv count that disagrees with the sender's) must not simply return: the
// ranks that wait for its part of the tree or ring would wait forever. Such a rank reports
// ErrCount but completes its part of the collective, sending an empty message of element type
// elemAbort in place of each message it would have sent, and receiving (draining) whatever it
// would have received. A rank that receives an abort does the same and returns an
// *AbandonedError. So every rank that can see the misfit, and every rank whose result depends
// on it, returns an error that matches ErrCount, and none of them blocks.

// elemAbort is the element type of the empty message sent in place of a collective's data by
// a rank that found (or heard of) a misfit: the last wire code the transport accepts, kept
// apart from the element types' sequence in types.go so that new element types do not
// collide with it.
const elemAbort uint8 = comm.MaxElemType

// AbandonedError reports that a rank before this one in a collective found buffers that do not
// fit the operation (it returned ErrCount with the details) and sent word of it instead of its
// data. errors.Is(err, ErrCount) is true.
type AbandonedError struct {
	Source int // the rank of the communicator the word came from
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("mpi: collective abandoned (word from rank %d): buffers do not fit the operation on some rank", e.Source)
}

// Is makes errors.Is(err, ErrCount) true.
func (e *AbandonedError) Is(target error) bool { return target == ErrCount }

// countError is the misfit a rank finds in its own arguments.
func countError(op, format string, a ...any) error {
	return fmt.Errorf("mpi: %s: %w: %s", op, ErrCount, fmt.Sprintf(format, a...))
}

// fitOutcome classifies the completion of a collective receive that should have filled want
// elements: bad is a misfit (the message was shorter, longer, of another element type, or an
// abort), fatal anything else (a failed peer, a finalized process), which ends the call.
func fitOutcome(op string, st Status, err error, want int) (bad, fatal error) {
	switch {
	case err == nil && st.Count == want:
		return nil, nil
	case err == nil:
		return countError(op, "rank %d sent %d elements where this rank's buffer takes %d", st.Source, st.Count, want), nil
	case isAbandoned(err):
		return fmt.Errorf("mpi: %s: %w", op, err), nil
	case errors.Is(err, ErrTruncate), errors.Is(err, ErrTypeMismatch):
		return fmt.Errorf("mpi: %s: %w: %w", op, ErrCount, err), nil
	}
	return nil, err
}

// crecvFit receives exactly len(buf) elements from src on the collective context (see
// fitOutcome). With bad already set, it only drains what src sends.
func crecvFit[T Elem](c *Comm, op string, buf []T, src, tag int, bad error) (error, error) {
	if bad != nil {
		return bad, cdrain(c, src, tag)
	}
	r, err := crecv(c, buf, src, tag)
	if err != nil {
		return nil, err
	}
	st, err := r.wait()
	return fitOutcome(op, st, err, len(buf))
}

// csendFit sends buf to dest on the collective context, or an abort if bad is set.
func csendFit[T Elem](c *Comm, buf []T, bad error, dest, tag int) (*Request, error) {
	if bad != nil {
		return c.startSend("collective", c.ctx+1, nil, elemAbort, dest, tag)
	}
	return csend(c, buf, dest, tag)
}

// cdrain receives and drops whatever src sends on the collective context with tag: a rank
// whose own buffers are unusable still consumes its part of the traffic.
func cdrain(c *Comm, src, tag int) error {
	r, err := c.irecv("collective", c.ctx+1, nil, elemRaw, 1, src, tag, true)
	if err != nil {
		return err
	}
	_, err = r.wait()
	return err
}

// cexchangeFit is cexchange for collectives that survive a misfit: recv must be filled exactly,
// and with bad set the exchange sends an abort and drains.
func cexchangeFit[T Elem](c *Comm, op string, send []T, dest int, recv []T, src, tag int, bad error) (error, error) {
	if bad != nil {
		if err := cwait(csendFit(c, send, bad, dest, tag)); err != nil {
			return bad, err
		}
		return bad, cdrain(c, src, tag)
	}
	rr, err := crecv(c, recv, src, tag)
	if err != nil {
		return nil, err
	}
	sr, err := csend(c, send, dest, tag)
	if err != nil {
		rr.wait()
		return nil, err
	}
	st, rerr := rr.wait()
	if _, err := sr.wait(); err != nil {
		return nil, err
	}
	return fitOutcome(op, st, rerr, len(recv))
}

// firstErr returns a if it is set, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// misfitErr reports whether err, returned by a collective, is a misfit (ErrCount) rather than
// a failure of the job.
func misfitErr(err error) bool { return errors.Is(err, ErrCount) }

// isAbandoned reports whether err is an *AbandonedError. It is a function of its own because
// the target of errors.As escapes: declared in fitOutcome, it would be allocated by every
// receive of every collective.
func isAbandoned(err error) bool {
	var ab *AbandonedError
	return errors.As(err, &ab)
}
