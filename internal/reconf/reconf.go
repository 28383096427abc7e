// Package reconf is the typed reconfiguration log of a job, shared by the job's supervisor
// (mpirun), pcmd status and the ranks.
//
// Every change to a running job's configuration — a coordinated checkpoint, a migration, and
// later a resize, a node drain or a recovery — is one Reconfiguration. The supervisor numbers
// accepted requests (Seq 1, 2, ...); the ranks act on them at an agreement point, all at the
// same iteration boundary (MPI/IOS paper, seed 004: "every rank enters reconfiguration at the
// same boundary"). A Reconfiguration moves through the states of a two-phase commit:
//
//	Proposed ──► Prepared ──► Committed
//	    │            │
//	    └────────────┴──────► Aborted
//
// Proposed: accepted by the supervisor and published to the ranks. Prepared: the ranks reached
// the agreement point and the new processes (successors) hold the state, nothing committed yet.
// Committed: the ranks agreed and switched over; the change is permanent. Aborted: something
// failed before the commit; the job goes on in its old configuration.
package reconf

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Kind is what a Reconfiguration changes. Its values are the wire names of control requests.
type Kind string

// Kinds of Reconfiguration.
const (
	Checkpoint Kind = "checkpoint" // take a coordinated checkpoint
	Migrate    Kind = "migrate"    // move Ranks to node To
	Resize     Kind = "resize"     // change the number of ranks (split or merge)
	Drain      Kind = "drain"      // move every rank off a node that leaves
	Recover    Kind = "recover"    // restart failed ranks from the newest checkpoint
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case Checkpoint, Migrate, Resize, Drain, Recover:
		return true
	}
	return false
}

// State is where a Reconfiguration is in its two-phase commit. The zero value is not a
// state: a Reconfiguration starts Proposed.
type State uint8

// States of a Reconfiguration.
const (
	Proposed  State = iota + 1 // accepted and published; the ranks have not acted yet
	Prepared                   // the ranks are at the agreement point; successors hold the state
	Committed                  // agreed and switched over: permanent
	Aborted                    // failed before the commit: the old configuration goes on
)

var stateNames = [...]string{"", "proposed", "prepared", "committed", "aborted"}

// String returns the state's lower-case name ("proposed", ...), or "state(N)" for an unknown one.
func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Valid reports whether s is one of the four states.
func (s State) Valid() bool { return s >= Proposed && s <= Aborted }

// Final reports whether s is Committed or Aborted: nothing changes a final state.
func (s State) Final() bool { return s == Committed || s == Aborted }

// CanMoveTo reports whether the two-phase commit allows going from s to next: forward along
// Proposed → Prepared → Committed, or to Aborted from any state that is not final.
func (s State) CanMoveTo(next State) bool {
	switch {
	case !s.Valid() || !next.Valid() || s.Final():
		return false
	case next == Aborted:
		return true
	case s == Proposed:
		return next == Prepared || next == Committed // a checkpoint has no prepare phase
	case s == Prepared:
		return next == Committed
	}
	return false
}

// MarshalText encodes the state by name, so logs, JSON records and msgpack carry words.
func (s State) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("reconf: cannot encode invalid %v", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a state name written by MarshalText.
func (s *State) UnmarshalText(b []byte) error {
	for i := Proposed; i <= Aborted; i++ {
		if string(b) == stateNames[i] {
			*s = i
			return nil
		}
	}
	return fmt.Errorf("reconf: unknown state %q", b)
}

// ErrTransition reports a state change the two-phase commit does not allow.
var ErrTransition = errors.New("reconf: state change not allowed")

// Reconfiguration is one accepted change of a job's configuration and what became of it.
type Reconfiguration struct {
	Seq   uint64 `msgpack:"seq" json:"seq"` // 1, 2, ... in order of acceptance
	Kind  Kind   `msgpack:"kind" json:"kind"`
	Ranks []int  `msgpack:"ranks,omitempty" json:"ranks,omitempty"` // migrate: the ranks that move
	To    string `msgpack:"to,omitempty" json:"to,omitempty"`       // migrate: the target node
	From  string `msgpack:"from,omitempty" json:"from,omitempty"`   // migrate: where the ranks ran
	// Targets, if set, is a migration's target node of each of Ranks (To is then ""): a
	// joint move, such as an exchange of ranks between nodes.
	Targets []string `msgpack:"targets,omitempty" json:"targets,omitempty"`
	// Joint: every rank of the migration moves or none does, at the same boundary; so a
	// node may take a rank in the slot of one leaving it in the same entry.
	Joint  bool   `msgpack:"joint,omitempty" json:"joint,omitempty"`
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	// NP and OldNP are a resize's new and old numbers of ranks; for a shrink Ranks are the
	// ranks that leave, for a grow Nodes are where the new ranks start (index NP-OldNP).
	NP    int      `msgpack:"np,omitempty" json:"np,omitempty"`
	OldNP int      `msgpack:"old_np,omitempty" json:"old_np,omitempty"`
	Nodes []string `msgpack:"nodes,omitempty" json:"nodes,omitempty"`
	// Weights are a resize's shares of the distributed data per new rank (nil: equal). A
	// resize with NP == OldNP and weights rebalances the ranks in place.
	Weights []float64 `msgpack:"weights,omitempty" json:"weights,omitempty"`

	State     State         `msgpack:"state" json:"state"`
	Error     string        `msgpack:"error,omitempty" json:"error,omitempty"`         // Aborted: why
	Iteration int           `msgpack:"iteration,omitempty" json:"iteration,omitempty"` // the boundary it happened at
	Pause     time.Duration `msgpack:"pause,omitempty" json:"pause,omitempty"`         // the job's pause for it
	Bytes     int64         `msgpack:"bytes,omitempty" json:"bytes,omitempty"`         // state bytes moved
	At        time.Time     `msgpack:"at" json:"at"`                                   // when it was proposed
}

// TargetOf is where a migration moves its i-th rank (Ranks[i]).
func (r *Reconfiguration) TargetOf(i int) string {
	if i >= 0 && i < len(r.Targets) {
		return r.Targets[i]
	}
	return r.To
}

// Advance moves r to next, recording err's text when next is Aborted.
func (r *Reconfiguration) Advance(next State, err error) error {
	if !r.State.CanMoveTo(next) {
		return fmt.Errorf("%w: request %d (%s) from %v to %v", ErrTransition, r.Seq, r.Kind, r.State, next)
	}
	r.State = next
	if next == Aborted && err != nil {
		r.Error = err.Error()
	}
	return nil
}

// Log is a job's reconfigurations in order of acceptance. The zero value is an empty log.
type Log struct {
	Entries []Reconfiguration `msgpack:"entries" json:"entries"`
}

// Propose appends r as the next entry, numbered and Proposed, and returns a copy of it.
func (l *Log) Propose(r Reconfiguration, at time.Time) Reconfiguration {
	r.Seq = uint64(len(l.Entries)) + 1
	r.State = Proposed
	r.At = at
	l.Entries = append(l.Entries, r)
	return r
}

// Get returns a pointer to entry seq, or nil if the log has none.
func (l *Log) Get(seq uint64) *Reconfiguration {
	if seq == 0 || seq > uint64(len(l.Entries)) {
		return nil
	}
	return &l.Entries[seq-1]
}

// Advance moves entry seq to next (see Reconfiguration.Advance).
func (l *Log) Advance(seq uint64, next State, err error) error {
	e := l.Get(seq)
	if e == nil {
		return fmt.Errorf("reconf: no request %d in a log of %d", seq, len(l.Entries))
	}
	return e.Advance(next, err)
}

// Pending returns the entries that are not final, in order.
func (l *Log) Pending() []Reconfiguration {
	var out []Reconfiguration
	for _, e := range l.Entries {
		if !e.State.Final() {
			out = append(out, e)
		}
	}
	return out
}

// MaxRanks bounds the ranks one entry may name, against hostile logs.
const MaxRanks = 1 << 16

// Validate checks a log received from the network: consecutive numbers from 1, known kinds
// and states, migrations with ranks and a target.
func (l Log) Validate() error {
	for i, e := range l.Entries {
		if e.Seq != uint64(i+1) {
			return fmt.Errorf("reconf: log entry %d has number %d", i+1, e.Seq)
		}
		if !e.Kind.Valid() {
			return fmt.Errorf("reconf: log entry %d: unknown kind %q", e.Seq, e.Kind)
		}
		if !e.State.Valid() {
			return fmt.Errorf("reconf: log entry %d: invalid %v", e.Seq, e.State)
		}
		if len(e.Ranks) > MaxRanks {
			return fmt.Errorf("reconf: log entry %d names %d ranks, at most %d", e.Seq, len(e.Ranks), MaxRanks)
		}
		for _, r := range e.Ranks {
			if r < 0 {
				return fmt.Errorf("reconf: log entry %d: rank %d", e.Seq, r)
			}
		}
		if e.Kind == Resize && (e.NP < 1 || e.OldNP < 1 || e.NP > MaxRanks || e.OldNP > MaxRanks || len(e.Nodes) > MaxRanks) {
			return fmt.Errorf("reconf: log entry %d: resize from %d to %d ranks", e.Seq, e.OldNP, e.NP)
		}
		if e.Kind == Migrate && (len(e.Ranks) == 0 || e.To == "" && len(e.Targets) == 0) {
			return fmt.Errorf("reconf: log entry %d: migration without ranks or target node", e.Seq)
		}
		if len(e.Targets) > 0 && (len(e.Targets) != len(e.Ranks) || slices.Contains(e.Targets, "")) {
			return fmt.Errorf("reconf: log entry %d: %d targets for %d ranks", e.Seq, len(e.Targets), len(e.Ranks))
		}
	}
	return nil
}

// ByteSize formats n bytes for people ("6.1 KiB"), as logs and pcmd status show Bytes.
func ByteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
