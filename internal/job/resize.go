package job

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Resizing a running job (split and merge, Desell's thesis §2.1.2): a ControlRequest of kind
// ControlResize asks for NP ranks. The launcher publishes it in the reconfiguration log; at
// the agreed iteration boundary every process of the new world (old ranks that stay, and for
// a grow the joiners the launcher starts) sends a ResizeHello and gets the new world's
// address table, as at the first rendezvous; the ranks move the data and rank 0 of the new
// world reports the outcome with a ResizeReport.

// EnvJoin is set by the launcher for a process that joins a running job at a resize (a
// joiner): the number of the resize request (reconf.Reconfiguration.Seq) it joins at.
const EnvJoin = "MPIOS_RESIZE_JOIN"

// MaxNP bounds a resize's number of ranks.
const MaxNP = 1 << 16

// NodeSlots names a node and how many ranks a resize puts on it or takes off it (0: as many
// as the request needs, for a grow; every rank there, for a shrink).
type NodeSlots struct {
	Node  string `msgpack:"node" json:"node"`
	Slots int    `msgpack:"slots,omitempty" json:"slots,omitempty"`
}

// String returns "NODE" or "NODE:K".
func (n NodeSlots) String() string {
	if n.Slots == 0 {
		return n.Node
	}
	return n.Node + ":" + strconv.Itoa(n.Slots)
}

// ParseNodeSlots parses "NODE[:K],..." (pcmd resize --on).
func ParseNodeSlots(s string) ([]NodeSlots, error) {
	var out []NodeSlots
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		node, k, hasK := strings.Cut(f, ":")
		ns := NodeSlots{Node: node}
		if hasK {
			n, err := strconv.Atoi(k)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("job: %q: want NODE or NODE:K with K >= 1", f)
			}
			ns.Slots = n
		}
		if err := ValidateNode(node); err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, nil
}

func (c ControlRequest) validateResize() error {
	switch {
	case c.NP < 1:
		return fmt.Errorf("job: resize: %d ranks, want at least 1", c.NP)
	case c.NP > MaxNP:
		return fmt.Errorf("job: resize: %d ranks, want at most %d", c.NP, MaxNP)
	case len(c.On) > MaxSlots:
		return fmt.Errorf("job: resize: %d nodes, want at most %d", len(c.On), MaxSlots)
	case len(c.Reason) > 1024:
		return errors.New("job: resize: reason longer than 1024 bytes")
	case c.Weights != nil && len(c.Weights) != c.NP:
		return fmt.Errorf("job: resize: %d weights for %d ranks, want one per rank", len(c.Weights), c.NP)
	}
	for r, w := range c.Weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("job: resize: weight %v of rank %d, want a positive finite number", w, r)
		}
	}
	for _, n := range c.On {
		if err := ValidateNode(n.Node); err != nil {
			return err
		}
		if n.Slots < 0 || n.Slots > MaxSlots {
			return fmt.Errorf("job: resize: %d slots on %s", n.Slots, n.Node)
		}
	}
	return nil
}

// ParseWeights parses "W1,W2,..." (pcmd resize --weights): one positive weight per rank.
func ParseWeights(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		w, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("job: weight %q: want a positive number", f)
		}
		out = append(out, w)
	}
	return out, nil
}

// ResizeSubject: request ResizeHello, the launcher replies with the new world's Table.
func ResizeSubject(jobID string) string { return subject(jobID, "resize") }

// ResizedSubject carries ResizeReports, published by rank 0 of the new world (or of the
// old one, when the resize aborts).
func ResizedSubject(jobID string) string { return subject(jobID, "resized") }

// ResizeHello is one process of a resize's new world at the boundary: its new rank and its
// address in the new world's data plane. OldRank is -1 for a joiner.
type ResizeHello struct {
	Seq       uint64 `msgpack:"seq"`
	Rank      int    `msgpack:"rank"`
	OldRank   int    `msgpack:"old_rank"`
	Addr      string `msgpack:"addr"`
	PID       int    `msgpack:"pid"`
	Iteration int    `msgpack:"iteration"`
}

// Validate checks a ResizeHello for a new world of np ranks and an old one of old.
func (h ResizeHello) Validate(np, old int) error {
	switch {
	case h.Seq == 0:
		return errors.New("job: resize hello without a request number")
	case h.Rank < 0 || h.Rank >= np:
		return fmt.Errorf("job: resize hello from rank %d, outside [0,%d)", h.Rank, np)
	case h.OldRank < -1 || h.OldRank >= old:
		return fmt.Errorf("job: resize hello from old rank %d, outside [0,%d)", h.OldRank, old)
	case h.Addr == "" || len(h.Addr) > 255:
		return fmt.Errorf("job: resize hello from rank %d without a valid address", h.Rank)
	}
	return nil
}

// ResizeReport is how a resize ended, from rank 0 of the world that goes on.
type ResizeReport struct {
	Seq       uint64        `msgpack:"seq"`
	OK        bool          `msgpack:"ok"`
	Error     string        `msgpack:"error,omitempty"`
	Iteration int           `msgpack:"iteration"`
	Pause     time.Duration `msgpack:"pause"`
	Bytes     int64         `msgpack:"bytes"` // distributed data moved, summed over the ranks
}

// ResizeGoneSubject carries ResizeGones, published by the launcher.
func ResizeGoneSubject(jobID string) string { return subject(jobID, "resize.gone") }

// ResizeGone tells the processes of a resize's new world that one of them ended before the
// commit: whatever they wait for in the new world will not come.
type ResizeGone struct {
	Seq    uint64 `msgpack:"seq"`
	Reason string `msgpack:"reason"`
}

// MalleableSubject carries a Malleable, published by rank 0 once the ranks registered their
// state (pcm's Load).
func MalleableSubject(jobID string) string { return subject(jobID, "malleable") }

// Malleable says whether the job's ranks registered distributed data, which a resize
// redistributes: the launcher refuses resizes of a job without any.
type Malleable struct {
	Distributed bool `msgpack:"distributed"`
}
