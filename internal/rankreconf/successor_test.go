package rankreconf

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/rewire"
)

// fakeLink is the successor's end of the hand-over, with the predecessor's messages.
type fakeLink struct {
	tr       *trace
	state    []byte
	stateErr error
	final    rewire.Final
	finalErr error
	acks     []string // "" for success
}

func (l *fakeLink) ReceiveState() ([]byte, error) {
	l.tr.add("receive state")
	return l.state, l.stateErr
}

func (l *fakeLink) Ack(err error) error {
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	l.tr.add("ack %q", reason)
	l.acks = append(l.acks, reason)
	return nil
}

func (l *fakeLink) ReceiveFinal() (rewire.Final, error) {
	l.tr.add("receive final")
	return l.final, l.finalErr
}

type joinRecord struct {
	addrs []string
	snap  rewire.Snapshot
}

func newTakeOver(link *fakeLink, joinErr error, joined *[]joinRecord) *TakeOver {
	return &TakeOver{Rank: 1, Size: 3, Self: "n1:9001", Link: link, Join: func(addrs []string, snap rewire.Snapshot) error {
		link.tr.add("join")
		*joined = append(*joined, joinRecord{addrs, snap})
		return joinErr
	}}
}

// "newly created process gets assigned rank": the successor takes the predecessor's rank
// — its own address in the rank's place of the table, the predecessor's unreceived
// messages in its engine — and only once the ranks committed the migration.
func TestSuccessorIsAssignedTheRank(t *testing.T) {
	snap := rewire.Snapshot{NextCtx: 6, Unexpected: []rewire.Message{{Peer: 2, Tag: 1, Data: []byte("in flight")}}}
	link := &fakeLink{tr: &trace{}, state: []byte("registered state"),
		final: rewire.Final{Addrs: []string{"n1:7000", "n2:7001", "n2:7002"}, Snap: snap}}
	var joined []joinRecord
	state, err := newTakeOver(link, nil, &joined).Run()
	if err != nil || string(state) != "registered state" {
		t.Fatalf("Run = %q, %v", state, err)
	}
	if want := `receive state, ack "", receive final, join, ack ""`; link.tr.String() != want {
		t.Fatalf("effects %s, want %s", link.tr, want)
	}
	want := joinRecord{[]string{"n1:7000", "n1:9001", "n2:7002"}, snap}
	if len(joined) != 1 || !reflect.DeepEqual(joined[0], want) {
		t.Fatalf("joined %+v, want %+v", joined, want)
	}
}

// A successor whose migration is aborted before the commit, or that cannot join in the
// rank's place, does not join (or says why); the predecessor goes on.
func TestSuccessorThatCannotTakeOverDoesNotJoin(t *testing.T) {
	table := []string{"a:1", "b:2", "c:3"}
	cases := []struct {
		name    string
		link    fakeLink
		joinErr error
		err     string
		refusal string // the last acknowledgement: the reason given to the predecessor
		joins   int
	}{
		{"aborted", fakeLink{final: rewire.Final{Abort: "ranks failed to agree"}}, nil, "aborted by the predecessor: ranks failed to agree", "", 0},
		{"predecessor-gone-mid-state", fakeLink{stateErr: errors.New("EOF")}, nil, "EOF", "", 0},
		{"predecessor-gone-before-final", fakeLink{finalErr: errors.New("connection reset")}, nil, "connection reset", "", 0},
		{"wrong-table", fakeLink{final: rewire.Final{Addrs: table[:2]}}, nil, "2 entries for rank 1 of 3", "address table of the wrong size", 0},
		{"cannot-join", fakeLink{final: rewire.Final{Addrs: table}}, errors.New("inherited message from rank 7 outside the world"), "rank 7", "inherited message from rank 7 outside the world", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			link := tc.link
			link.tr = &trace{}
			var joined []joinRecord
			_, err := newTakeOver(&link, tc.joinErr, &joined).Run()
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Run error %v, want %q", err, tc.err)
			}
			if len(joined) != tc.joins {
				t.Fatalf("%d joins, want %d", len(joined), tc.joins)
			}
			if tc.refusal != "" && link.acks[len(link.acks)-1] != tc.refusal {
				t.Fatalf("acknowledgements %q, want the refusal %q last", link.acks, tc.refusal)
			}
		})
	}
}
