package rankreconf

import (
	"fmt"
	"slices"

	"github.com/mpios/mpios/internal/reconf"
)

// Resize is the split or merge of an agreement point (Desell's thesis §2.1.2): the world of
// OldSize ranks becomes one of NewSize. Every rank of the old world computes the same Resize.
//
// A grow keeps the old ranks' numbers and adds ranks OldSize..NewSize-1 (joiners the
// supervisor starts); a shrink removes the ranks the request names and numbers the others
// contiguously in their old order. A resize to the same size with weights is a rebalance in
// place: the ranks stay, their shares of the data change.
type Resize struct {
	Seq              uint64
	OldSize, NewSize int
	// NewRank[r] is old rank r's rank in the new world, -1 if it leaves.
	NewRank []int
	// Weights are the new ranks' shares of the distributed data, nil for equal shares.
	Weights []float64
}

// Grow reports whether the resize adds ranks.
func (r Resize) Grow() bool { return r.NewSize > r.OldSize }

// Rebalance reports whether the resize keeps the ranks and only re-weights their data.
func (r Resize) Rebalance() bool { return r.NewSize == r.OldSize }

// Leaves reports whether old rank leaves the world.
func (r Resize) Leaves(rank int) bool { return r.NewRank[rank] < 0 }

// resizeOf returns the first resize among entries that applies to a world of size, if any.
// An entry for another size (stale: the log went on without it) is skipped, and so is one
// that would remove every rank or names ranks outside the world.
func resizeOf(entries []reconf.Reconfiguration, size int) (*Resize, error) {
	for _, e := range entries {
		if e.Kind != reconf.Resize {
			continue
		}
		if e.OldNP != size || e.NP < 1 || (e.NP == size && e.Weights == nil) || (e.Weights != nil && len(e.Weights) != e.NP) {
			continue
		}
		r := &Resize{Seq: e.Seq, OldSize: size, NewSize: e.NP, NewRank: make([]int, size), Weights: e.Weights}
		leaving := slices.Clone(e.Ranks)
		slices.Sort(leaving)
		leaving = slices.Compact(leaving)
		if r.Rebalance() {
			leaving = nil
		}
		if !r.Grow() && len(leaving) != size-e.NP {
			return nil, fmt.Errorf("rankreconf: resize %d from %d to %d ranks names %d leaving ranks", e.Seq, size, e.NP, len(leaving))
		}
		next := 0
		for old := range size {
			if _, gone := slices.BinarySearch(leaving, old); gone && !r.Grow() {
				r.NewRank[old] = -1
				continue
			}
			r.NewRank[old] = next
			next++
		}
		if !r.Grow() && next != e.NP {
			return nil, fmt.Errorf("rankreconf: resize %d names ranks outside the world of %d", e.Seq, size)
		}
		return r, nil
	}
	return nil, nil
}

// ResizeOutcome is one rank's result of a resize's prepare phase, exchanged at its commit
// point: the new world is connected and the data moved.
type ResizeOutcome struct {
	OK    bool
	Bytes int64 // distributed data this rank sent
}

// JudgeResize is the commit rule of a resize: it commits only if every process of the
// exchange is ready; otherwise it is aborted and the old world goes on. It returns the
// verdict, the first failed rank (-1 if none) and the bytes moved.
func JudgeResize(all []ResizeOutcome) (commit bool, failed int, bytes int64) {
	failed = -1
	for r, o := range all {
		bytes += o.Bytes
		if !o.OK && failed < 0 {
			failed = r
		}
	}
	return failed < 0, failed, bytes
}
