package ctlplane

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// NoRespondersGrace is how long Request believes a "no responders" status only once no
// reply is taken within it. That status is a message of the NATS server, which any client
// can also send to a requester's inbox: believed at once, a forged one would make a process
// take a live peer for dead. A live responder answers within milliseconds.
const NoRespondersGrace = 300 * time.Millisecond

// Tentative is what a Request's take returns for a reply it does not take that still
// answers the request if nothing better comes within Wait: a refusal in clear from a
// responder that cannot authenticate it (a node that does not know the job's key). The
// Request then ends at most Wait later, with Err if no reply is taken meanwhile.
type Tentative struct {
	Err  error
	Wait time.Duration
}

func (t *Tentative) Error() string { return t.Err.Error() }

// Unwrap returns Err.
func (t *Tentative) Unwrap() error { return t.Err }

// RefusedError is Request's error when replies came within the wait but take refused
// them all: forgeries, or a responder that cannot authenticate its answer. It matches
// nats.ErrTimeout with errors.Is.
type RefusedError struct {
	Refused int   // replies refused
	Last    error // why the last one was
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v (%d replies refused, the last: %v)", nats.ErrTimeout, e.Refused, e.Last)
}

// Unwrap returns nats.ErrTimeout.
func (e *RefusedError) Unwrap() error { return nats.ErrTimeout }

// Request publishes data on subject with a reply inbox of its own and returns the first
// reply that take accepts (take returns nil; it decodes and verifies the reply, keeping what
// it needs), within wait. Anyone on the NATS server can answer a request, and answer first:
// replies take refuses are skipped while the wait lasts, so a forgery can delay nothing
// but its own acceptance. A "no responders" status counts (nats.ErrNoResponders) only if
// no reply is taken within NoRespondersGrace. Without a reply taken, the error is the first
// *Tentative take returned, if any, else a *RefusedError if replies were refused, else
// nats.ErrTimeout.
func Request(nc *nats.Conn, subject string, data []byte, wait time.Duration, take func(*nats.Msg) error) error {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	noResponders, refused := false, 0
	var lastRefusal error
	var tentative *Tentative
	shorten := func(d time.Duration) {
		if at := time.Now().Add(d); at.Before(deadline) {
			deadline = at
		}
	}
	for {
		msg, err := (*nats.Msg)(nil), error(nats.ErrTimeout)
		if left := time.Until(deadline); left > 0 {
			msg, err = sub.NextMsg(left)
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			if !noResponders {
				noResponders = true
				shorten(NoRespondersGrace)
			}
			continue
		case err != nil && tentative != nil:
			return tentative
		case err != nil && noResponders:
			return nats.ErrNoResponders
		case errors.Is(err, nats.ErrTimeout) && refused > 0:
			return &RefusedError{Refused: refused, Last: lastRefusal}
		case err != nil:
			return err
		}
		if err := take(msg); err != nil {
			var t *Tentative
			if tentative == nil && errors.As(err, &t) {
				tentative = t
				shorten(t.Wait)
				continue
			}
			refused++
			lastRefusal = err
			continue
		}
		return nil
	}
}

// Gather publishes data on subject with a reply inbox of its own and returns every reply
// that arrives within wait, unverified: a scatter request answered by many (every node, every
// agent). A "no responders" status, which any client can also send to the inbox, ends
// nothing: the responders that do answer still count until the wait ends.
func Gather(nc *nats.Conn, subject string, data []byte, wait time.Duration) ([]*nats.Msg, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("ctlplane: gather on %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, fmt.Errorf("ctlplane: gather on %s: %w", subject, err)
	}
	var out []*nats.Msg
	for deadline := time.Now().Add(wait); ; {
		left := time.Until(deadline)
		if left <= 0 {
			return out, nil
		}
		msg, err := sub.NextMsg(left)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			continue
		case errors.Is(err, nats.ErrTimeout):
			return out, nil
		case err != nil:
			return out, fmt.Errorf("ctlplane: gather on %s: %w", subject, err)
		}
		out = append(out, msg)
	}
}
