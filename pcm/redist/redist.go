// Package redist plans the redistribution of a distributed array when the number of its
// owners or their shares change: the data half of malleability (Desell's thesis, §2.1.2).
//
// Rows are numbered 0..total-1. A Range is the half-open interval of rows one worker holds.
// Shares splits the rows by weight (the thesis's eq. 2.4–2.8 with a linear iteration cost);
// Blocks turns shares into contiguous ranges in worker order.
//
// Two planners follow the thesis's two kinds of data:
//
//   - Plan is for spatially dependent data (Algorithms 2–4, shift-left and shift-right): the
//     rows keep their order, so a worker exchanges only with the workers whose old and new
//     ranges overlap its own, which in a block distribution are its neighbours, and the plan
//     has at most n+m-1 transfers for n old and m new owners.
//   - PlanCounts is for spatially independent data (Algorithm 1): only workers above their
//     desired amount send, only workers below it receive, paired greedily in worker order,
//     again O(n+m) transfers.
//
// Both move exactly the data that changes owner, the minimum any redistribution needs. The
// planners are pure and deterministic: every worker computes the same plan from the same
// input, so no plan has to be sent around.
package redist

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalid is matched by every error about bad input to this package.
var ErrInvalid = errors.New("redist: invalid distribution")

// Range is the half-open interval [Lo, Hi) of rows.
type Range struct {
	Lo, Hi int
}

// Len returns the number of rows in r.
func (r Range) Len() int { return max(r.Hi-r.Lo, 0) }

// Empty reports whether r holds no row.
func (r Range) Empty() bool { return r.Hi <= r.Lo }

// Intersect returns the rows r and o have in common (an empty Range if none).
func (r Range) Intersect(o Range) Range {
	lo, hi := max(r.Lo, o.Lo), min(r.Hi, o.Hi)
	if hi < lo {
		hi = lo
	}
	return Range{lo, hi}
}

// String formats r as "[lo,hi)".
func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Lo, r.Hi) }

// Shares splits total rows over len(weights) workers in proportion to their weights: worker
// i gets total*w_i/sum(w) rows (eq. 2.5–2.7 with f(d) = a*d), rounded by largest remainder:
// every worker first gets the floor of its quota, then the rows left over go one each to the
// largest fractional parts, ties to the lower index. If total >= len(weights) every worker
// gets at least one row (eq. 2.8): a worker whose quota rounds to zero takes a row from the
// largest share (the lowest index among equals). nil weights mean equal weights, which gives
// the usual block distribution (the first total%n workers one row more). Weights must be
// positive and finite.
func Shares(total int, weights []float64, n int) ([]int, error) {
	if n < 1 || total < 0 {
		return nil, fmt.Errorf("%w: %d rows over %d workers", ErrInvalid, total, n)
	}
	shares := make([]int, n)
	if weights == nil {
		base, rem := total/n, total%n
		for i := range shares {
			shares[i] = base
			if i < rem {
				shares[i]++
			}
		}
		return shares, nil
	}
	if len(weights) != n {
		return nil, fmt.Errorf("%w: %d weights for %d workers", ErrInvalid, len(weights), n)
	}
	sum := 0.0
	for i, w := range weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: weight %d is %v, want a positive finite number", ErrInvalid, i, w)
		}
		sum += w
	}
	if math.IsInf(sum, 0) {
		return nil, fmt.Errorf("%w: the weights' sum overflows", ErrInvalid)
	}
	frac := make([]float64, n)
	given := 0
	for i, w := range weights {
		q := float64(total) * (w / sum)
		f := math.Floor(q)
		shares[i], frac[i] = int(f), q-f
		given += shares[i]
	}
	// Rounding of q can make the floors overshoot by a row in extreme cases: take back from
	// the smallest fractions, then hand out the rest to the largest.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case frac[a] > frac[b]:
			return -1
		case frac[a] < frac[b]:
			return 1
		}
		return 0
	})
	for k := 0; given < total; k = (k + 1) % n {
		shares[order[k]]++
		given++
	}
	for k := n - 1; given > total; k = (k + n - 1) % n {
		if shares[order[k]] > 0 {
			shares[order[k]]--
			given--
		}
	}
	if total >= n {
		for i := range shares {
			if shares[i] == 0 {
				big := 0
				for j := range shares {
					if shares[j] > shares[big] {
						big = j
					}
				}
				shares[big]--
				shares[i]++
			}
		}
	}
	return shares, nil
}

// Blocks returns the contiguous ranges of Shares(total, weights, n), in worker order.
func Blocks(total int, weights []float64, n int) ([]Range, error) {
	shares, err := Shares(total, weights, n)
	if err != nil {
		return nil, err
	}
	return FromCounts(shares), nil
}

// FromCounts lays counts out as contiguous ranges in order, starting at row 0.
func FromCounts(counts []int) []Range {
	out := make([]Range, len(counts))
	lo := 0
	for i, c := range counts {
		out[i] = Range{lo, lo + c}
		lo += c
	}
	return out
}

// Transfer is one message of a plan: worker From gives worker To the rows Rows (Plan) or
// Count items (PlanCounts).
type Transfer struct {
	From, To int
	Rows     Range // Plan only
	Count    int   // the number of rows or items
}

// Plan is the transfers that turn a distribution into another.
type Plan struct {
	Transfers []Transfer
	// Moved is the number of rows (items) that change owner: the sum of the transfers'
	// counts, and the minimum any redistribution between the two distributions moves.
	Moved int
}

// Sends returns the transfers worker w makes, in plan order.
func (p Plan) Sends(w int) []Transfer { return p.filter(func(t Transfer) bool { return t.From == w }) }

// Receives returns the transfers worker w receives, in plan order.
func (p Plan) Receives(w int) []Transfer { return p.filter(func(t Transfer) bool { return t.To == w }) }

func (p Plan) filter(keep func(Transfer) bool) []Transfer {
	var out []Transfer
	for _, t := range p.Transfers {
		if keep(t) {
			out = append(out, t)
		}
	}
	return out
}

// checkTiling verifies that the non-empty ranges cover 0..total-1 exactly once, and returns
// the indices of the non-empty ones in row order.
func checkTiling(what string, rs []Range) (order []int, total int, err error) {
	for i, r := range rs {
		if r.Hi < r.Lo || r.Lo < 0 {
			return nil, 0, fmt.Errorf("%w: %s range %d is %v", ErrInvalid, what, i, r)
		}
		if !r.Empty() {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return rs[a].Lo - rs[b].Lo })
	next := 0
	for _, i := range order {
		if rs[i].Lo != next {
			return nil, 0, fmt.Errorf("%w: %s ranges leave a gap or overlap at row %d (range %d is %v)", ErrInvalid, what, next, i, rs[i])
		}
		next = rs[i].Hi
	}
	return order, next, nil
}

// PlanRanges plans the redistribution of spatially dependent data (Algorithms 2–4): worker
// w holds the rows from[w] before and to[w] after; both must tile the same rows (empty
// ranges allowed, e.g. for workers that join or leave). Every row that changes owner travels
// once, straight from its old owner to its new one, in one transfer per pair of overlapping
// ranges; rows whose owner stays are not in the plan. The transfers are in row order.
func PlanRanges(from, to []Range) (Plan, error) {
	if len(from) != len(to) {
		return Plan{}, fmt.Errorf("%w: %d old ranges, %d new ones", ErrInvalid, len(from), len(to))
	}
	olds, totalOld, err := checkTiling("old", from)
	if err != nil {
		return Plan{}, err
	}
	news, totalNew, err := checkTiling("new", to)
	if err != nil {
		return Plan{}, err
	}
	if totalOld != totalNew {
		return Plan{}, fmt.Errorf("%w: %d rows before, %d after", ErrInvalid, totalOld, totalNew)
	}
	// A merge of the two sorted lists of ranges: O(n+m).
	var p Plan
	i, j := 0, 0
	for i < len(olds) && j < len(news) {
		a, b := olds[i], news[j]
		ov := from[a].Intersect(to[b])
		if !ov.Empty() && a != b {
			p.Transfers = append(p.Transfers, Transfer{From: a, To: b, Rows: ov, Count: ov.Len()})
			p.Moved += ov.Len()
		}
		if from[a].Hi <= to[b].Hi {
			i++
		} else {
			j++
		}
	}
	return p, nil
}

// PlanCounts plans the redistribution of spatially independent data (Algorithm 1): worker w
// holds have[w] items and must end with want[w]. Workers above their want (the thesis's
// workersToShrink) give their surplus, workers below it (workersToExpand) receive, paired in
// worker order; a worker never both gives and receives.
func PlanCounts(have, want []int) (Plan, error) {
	if len(have) != len(want) {
		return Plan{}, fmt.Errorf("%w: %d current amounts, %d desired ones", ErrInvalid, len(have), len(want))
	}
	sh, sw := 0, 0
	for i := range have {
		if have[i] < 0 || want[i] < 0 {
			return Plan{}, fmt.Errorf("%w: worker %d has %d, wants %d", ErrInvalid, i, have[i], want[i])
		}
		sh += have[i]
		sw += want[i]
	}
	if sh != sw {
		return Plan{}, fmt.Errorf("%w: %d items held, %d wanted", ErrInvalid, sh, sw)
	}
	var shrink, expand []int
	for i := range have {
		switch {
		case have[i] > want[i]:
			shrink = append(shrink, i)
		case have[i] < want[i]:
			expand = append(expand, i)
		}
	}
	var p Plan
	s, e := 0, 0
	surplus, need := 0, 0
	if len(shrink) > 0 {
		surplus, need = have[shrink[0]]-want[shrink[0]], want[expand[0]]-have[expand[0]]
	}
	for s < len(shrink) && e < len(expand) {
		n := min(surplus, need)
		p.Transfers = append(p.Transfers, Transfer{From: shrink[s], To: expand[e], Count: n})
		p.Moved += n
		surplus -= n
		need -= n
		if surplus == 0 {
			if s++; s < len(shrink) {
				surplus = have[shrink[s]] - want[shrink[s]]
			}
		}
		if need == 0 {
			if e++; e < len(expand) {
				need = want[expand[e]] - have[expand[e]]
			}
		}
	}
	return p, nil
}
