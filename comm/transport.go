// Package comm is the data plane under package mpi: it moves frames between the ranks of a job.
//
// A transport connects one rank (an Endpoint) to every other rank of its job. It preserves the
// order of frames between each ordered pair of ranks, authenticates who sent each frame, and
// reports peers that go away. It knows nothing of matching, communicators or collectives: the
// mpi layer implements those on top, as a Handler.
//
// Two transports exist: TCP between processes (NewTCP) and in-process channels between goroutine
// ranks (NewInProcNetwork), used by fast unit tests. A TCP endpoint moves the frames of peers on
// its own node through shared-memory rings instead of their sockets (see shm.go), chosen per
// peer when a connection is set up.
package comm

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Endpoint is one rank's attachment to the data plane.
type Endpoint interface {
	// Rank is this endpoint's world rank; Size the number of ranks in the world.
	Rank() int
	Size() int
	// Start begins delivering incoming frames to h. It is called once, before any Send.
	Start(h Handler) error
	// Send writes one frame to peer (a world rank other than Rank()); len(payload) must equal
	// h.Len. Frames to one peer arrive in the order their Send calls returned. Send may block
	// while the peer applies back-pressure. It is safe for concurrent use.
	Send(peer int, h *Header, payload []byte) error
	// Close ends every connection in an orderly way (peers see a Bye, not a failure).
	Close() error
}

// Handler consumes the frames that arrive at an Endpoint. The transport calls it from one
// goroutine per source peer, in that peer's sending order, so a Handler that blocks applies
// back-pressure to that peer only. A Handler must not call Send on the same Endpoint from inside
// these callbacks in a way that waits for the peer it is handling (that can deadlock two ranks);
// hand such sends to another goroutine.
type Handler interface {
	// HandleFrame handles an Eager, RTS or CTS frame. payload is valid only during the call.
	HandleFrame(peer int, h *Header, payload []byte) error
	// DataBuffer returns where the payload of a Data frame goes (len(dst) == h.Len), or nil to
	// discard it. DataDone is called once it has been filled.
	DataBuffer(peer int, h *Header) (dst []byte, err error)
	DataDone(peer int, h *Header) error
	// PeerClosed reports that the stream from peer ended: err is nil after an orderly Bye and
	// wraps ErrPeerLost otherwise. It may be called more than once for one peer.
	PeerClosed(peer int, flags uint8, err error)
}

// EagerReceiver is implemented by Handlers that can take an eager payload straight into the
// buffer of a receive that is waiting for it, which saves the TCP transport a copy of every
// large eager payload. The transport calls EagerBuffer after an eager frame's header, before
// it reads the payload (only for payloads that have not arrived yet). A nil result sends the
// frame to HandleFrame as usual; after a non-nil dst (len(dst) == h.Len), the transport fills
// dst and then calls EagerDone exactly once, with the error that stopped it, if any. Both are
// called from the goroutine that handles peer's frames, in order with its other callbacks.
type EagerReceiver interface {
	EagerBuffer(peer int, h *Header) (dst []byte)
	EagerDone(peer int, h *Header, err error)
}

// WaitNotifier is implemented by endpoints that poll for incoming frames longer while the
// process waits for one: Waiting(peer, true) when a goroutine starts waiting for a frame from
// peer (a message, or the clear-to-send of a send; peer < 0: from any peer), Waiting(peer,
// false) when it stops.
type WaitNotifier interface {
	Waiting(peer int, on bool)
}

// Poller is implemented by endpoints whose waiting goroutines can take a peer's frames
// themselves, which saves the hand-over from a reader goroutine: Poll(peer, done) reads and
// dispatches frames from peer (to the Handler, in order with the transport's own dispatch)
// until done is set (by the Handler, typically while Poll dispatches) or the endpoint stops
// polling; the caller then waits for its event as usual. It may return at once (a peer it
// cannot poll, or polling off).
type Poller interface {
	Poll(peer int, done *atomic.Bool)
}

// ErrPeerLost reports that a peer's connection broke without an orderly goodbye: the peer
// process died, or the network between the two failed.
var ErrPeerLost = errors.New("comm: connection to peer lost")

// ErrClosed reports use of a closed Endpoint.
var ErrClosed = errors.New("comm: endpoint closed")

// PeerError attaches the peer rank to a transport error.
type PeerError struct {
	Peer int
	Op   string
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("comm: %s rank %d: %v", e.Op, e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }
