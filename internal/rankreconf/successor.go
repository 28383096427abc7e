package rankreconf

import (
	"errors"
	"fmt"
	"io"

	"github.com/mpios/mpios/internal/rewire"
)

// SuccessorLink is the new process's end of the connection to its predecessor
// (rewire.Successor).
type SuccessorLink interface {
	// ReceiveState reads the rank's state.
	ReceiveState() ([]byte, error)
	// Ack acknowledges the last message; a non-nil err refuses it with err's text.
	Ack(err error) error
	// ReceiveFinal waits for the predecessor's last word: the commit or an abort.
	ReceiveFinal() (rewire.Final, error)
}

// TakeOver is the successor's side of a migration: "the newly created process gets
// assigned the rank". It receives the state, waits for the commit, and joins the data
// plane in the rank's place, with the address table the predecessor had after every move
// of the boundary and the messages it had not received.
type TakeOver struct {
	Rank, Size int
	// Self is the successor's own data-plane address, which replaces the predecessor's.
	Self string
	Link SuccessorLink
	// Join starts the successor's data plane with addrs and the predecessor's snapshot.
	Join func(addrs []string, snap rewire.Snapshot) error
	// Log receives what cannot be returned (a predecessor gone after the commit); nil:
	// discarded.
	Log io.Writer
}

// Run takes the rank over and returns the state the predecessor handed over. An error
// means the successor did not join: the migration was aborted, or it cannot take part.
func (t *TakeOver) Run() ([]byte, error) {
	state, err := t.Link.ReceiveState()
	if err != nil {
		return nil, err
	}
	if err := t.Link.Ack(nil); err != nil {
		return nil, fmt.Errorf("rewire: acknowledge state: %w", err)
	}
	final, err := t.Link.ReceiveFinal()
	if err != nil {
		return nil, err
	}
	if final.Abort != "" {
		return nil, fmt.Errorf("migration aborted by the predecessor: %s", final.Abort)
	}
	if len(final.Addrs) != t.Size || t.Rank < 0 || t.Rank >= t.Size {
		t.Link.Ack(errors.New("address table of the wrong size"))
		return nil, fmt.Errorf("rewire: address table has %d entries for rank %d of %d", len(final.Addrs), t.Rank, t.Size)
	}
	final.Addrs[t.Rank] = t.Self
	if err := t.Join(final.Addrs, final.Snap); err != nil {
		t.Link.Ack(err)
		return nil, err
	}
	if err := t.Link.Ack(nil); err != nil && t.Log != nil {
		// Joined already: the peers talk to this process; the predecessor only misses
		// the news.
		fmt.Fprintf(t.Log, "mpi: rank %d: predecessor did not take the final acknowledgement: %v\n", t.Rank, err)
	}
	return state, nil
}
