package reconf

import (
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The two-phase commit: Proposed → Prepared → Committed, or Aborted before the commit.
func TestStateMachineAllowsOnlyTwoPhaseCommitTransitions(t *testing.T) {
	allowed := map[[2]State]bool{
		{Proposed, Prepared}:  true,
		{Proposed, Committed}: true, // a checkpoint commits without a prepare phase
		{Proposed, Aborted}:   true,
		{Prepared, Committed}: true,
		{Prepared, Aborted}:   true,
	}
	for from := State(0); from <= Aborted+1; from++ {
		for to := State(0); to <= Aborted+1; to++ {
			if got := from.CanMoveTo(to); got != allowed[[2]State{from, to}] {
				t.Errorf("%v.CanMoveTo(%v) = %v", from, to, got)
			}
		}
	}
}

func TestFinalStatesNeverChange(t *testing.T) {
	var l Log
	e := l.Propose(Reconfiguration{Kind: Migrate, Ranks: []int{1}, To: "n2"}, time.Unix(1, 0))
	if e.Seq != 1 || e.State != Proposed {
		t.Fatalf("proposed entry = %+v", e)
	}
	if err := l.Advance(1, Aborted, errors.New("target gone")); err != nil {
		t.Fatal(err)
	}
	if got := l.Get(1).Error; got != "target gone" {
		t.Errorf("abort reason = %q", got)
	}
	if err := l.Advance(1, Committed, nil); !errors.Is(err, ErrTransition) {
		t.Errorf("commit after abort: err = %v, want ErrTransition", err)
	}
	if err := l.Advance(7, Committed, nil); err == nil {
		t.Error("advancing an unknown entry succeeded")
	}
	if len(l.Pending()) != 0 {
		t.Errorf("pending = %v", l.Pending())
	}
}

func TestLogRoundTripsAndValidates(t *testing.T) {
	var l Log
	l.Propose(Reconfiguration{Kind: Checkpoint}, time.Unix(5, 0).UTC())
	l.Propose(Reconfiguration{Kind: Migrate, Ranks: []int{0, 3}, To: "n1", Reason: "test"}, time.Unix(6, 0).UTC())
	if err := l.Advance(2, Prepared, nil); err != nil {
		t.Fatal(err)
	}
	data, err := msgpack.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back Log
	if err := msgpack.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	if back.Entries[1].State != Prepared || back.Entries[1].To != "n1" || len(back.Entries[1].Ranks) != 2 {
		t.Errorf("decoded = %+v", back.Entries[1])
	}
	for name, bad := range map[string]Log{
		"gap":       {Entries: []Reconfiguration{{Seq: 2, Kind: Checkpoint, State: Proposed}}},
		"kind":      {Entries: []Reconfiguration{{Seq: 1, Kind: "explode", State: Proposed}}},
		"state":     {Entries: []Reconfiguration{{Seq: 1, Kind: Checkpoint}}},
		"no target": {Entries: []Reconfiguration{{Seq: 1, Kind: Migrate, Ranks: []int{1}, State: Proposed}}},
		"neg rank":  {Entries: []Reconfiguration{{Seq: 1, Kind: Migrate, Ranks: []int{-1}, To: "n", State: Proposed}}},
		"no ranks":  {Entries: []Reconfiguration{{Seq: 1, Kind: Migrate, To: "n", State: Proposed}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, bad)
		}
	}
	var s State
	if err := s.UnmarshalText([]byte("exploded")); err == nil {
		t.Error("unknown state name decoded")
	}
}
