package pcm

import (
	"fmt"
	"slices"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
)

// End says at which end of a process's items Give takes and Receive puts them.
type End int

const (
	// Front is the start of the items (the thesis's "left").
	Front End = iota
	// Back is the end of the items (the thesis's "right").
	Back
)

// Malleable is state an application keeps in structures of its own and wants redistributed
// when the job is resized or rebalanced: the data half of the thesis's MalleableActor
// (getDataSize, getData, receiveData). pcm counts the items of every process, computes the
// shares of the new configuration, and moves items with Give and Receive, in as few
// messages as the thesis's algorithms allow.
//
// For ordered items (RegisterMalleable with ordered true: rows of a grid, particles sorted
// along an axis) the items of rank r come before those of rank r+1, and pcm keeps that order
// (Algorithms 2–4): a process gives its first items to the ranks before it (Front) and its
// last ones to the ranks after it (Back), and receives likewise. For unordered items
// (Algorithm 1) only processes above their share give, always from the Back, and only
// processes below it receive, at the Back.
//
// Give is called for every message before any is sent and must remove the items it returns;
// pcm does not checkpoint a Malleable (register its structure with Register for that), and
// cannot undo a Give: a resize that fails while Malleable items are in transit leaves the
// job to restart from its last checkpoint.
type Malleable interface {
	// Len returns the number of items this process holds.
	Len() int
	// Give removes n items at end and returns them encoded.
	Give(n int, end End) ([]byte, error)
	// Receive adds items encoded by another process's Give at end.
	Receive(data []byte, end End) error
}

type malleableEntry struct {
	name    string
	m       Malleable
	ordered bool
}

// RegisterMalleable adds m, under name, to the state pcm redistributes on a resize or
// Rebalance (see Malleable). Every rank registers the same names in the same order, before
// Load.
func (p *Process) RegisterMalleable(name string, m Malleable, ordered bool) error {
	if p.loaded {
		return fmt.Errorf("pcm: register malleable %q after Load: %w", name, ErrCallOrder)
	}
	if m == nil {
		return fmt.Errorf("pcm: register malleable %q: nil: %w", name, ErrConfig)
	}
	for _, e := range p.dist.malleable {
		if e.name == name {
			return fmt.Errorf("pcm: register malleable %q twice: %w", name, ErrConfig)
		}
	}
	p.dist.malleable = append(p.dist.malleable, malleableEntry{name, m, ordered})
	return nil
}

// Tags of the malleable items' messages on resizeData's private communicator: after the
// blocks' (one tag per block).
const malleableTagBase = 1 << 20

// resizeMalleable moves the items of every Malleable over c (see resizeData for the
// arguments).
func (p *Process) resizeMalleable(c *mpi.Comm, oldSize int, newRank []int, newSize int, weights []float64) error {
	me, n := c.Rank(), c.Size()
	for k, e := range p.dist.malleable {
		have := 0
		if me < oldSize {
			have = e.m.Len()
		}
		counts := make([]int, n)
		if err := mpi.Allgather(c, []int{have}, counts); err != nil {
			return fmt.Errorf("pcm: resize %q: %w", e.name, err)
		}
		total := 0
		for _, h := range counts {
			total += h
		}
		shares, err := redist.Shares(total, weights, newSize)
		if err != nil {
			return fmt.Errorf("pcm: resize %q: %w", e.name, err)
		}
		want := make([]int, n)
		for w, r := range newRank {
			if r >= 0 {
				want[w] = shares[r]
			}
		}
		var plan redist.Plan
		var kept redist.Range
		if e.ordered {
			from := redist.FromCounts(counts[:oldSize])
			from = append(from, make([]redist.Range, n-oldSize)...)
			to := make([]redist.Range, n)
			newRanges := redist.FromCounts(shares)
			for w, r := range newRank {
				if r >= 0 {
					to[w] = newRanges[r]
				}
			}
			plan, err = redist.PlanRanges(from, to)
			kept = from[me].Intersect(to[me])
		} else {
			plan, err = redist.PlanCounts(counts, want)
		}
		if err != nil {
			return fmt.Errorf("pcm: resize %q: %w", e.name, err)
		}
		if err := p.moveItems(c, e, plan, kept, malleableTagBase+2*k); err != nil {
			return fmt.Errorf("pcm: resize %q: %w", e.name, err)
		}
	}
	return nil
}

// moveItems carries out this process's part of plan for one Malleable. kept is the part of
// its ordered items that stays (empty for unordered items).
func (p *Process) moveItems(c *mpi.Comm, e malleableEntry, plan redist.Plan, kept redist.Range, tag int) error {
	me := c.Rank()
	// Which end a transfer's items leave or arrive at: before the kept items, the Front.
	front := func(t redist.Transfer) bool {
		return e.ordered && (kept.Empty() || t.Rows.Hi <= kept.Lo)
	}
	sends, recvs := plan.Sends(me), plan.Receives(me)
	// Gives from the Front in row order, from the Back in reverse row order: each takes the
	// items at that end now. Receives the other way round: at the Front the nearest first.
	byEnd := func(sign int) func(a, b redist.Transfer) int {
		return func(a, b redist.Transfer) int {
			fa, fb := front(a), front(b)
			switch {
			case fa && !fb:
				return -1
			case !fa && fb:
				return 1
			case fa:
				return sign * (a.Rows.Lo - b.Rows.Lo)
			}
			return -sign * (a.Rows.Lo - b.Rows.Lo)
		}
	}
	slices.SortStableFunc(sends, byEnd(1))
	slices.SortStableFunc(recvs, byEnd(-1))
	var reqs []*mpi.Request
	for _, t := range sends {
		end := Back
		if front(t) {
			end = Front
		}
		data, err := e.m.Give(t.Count, end)
		if err != nil {
			return fmt.Errorf("give %d items to rank %d: %w", t.Count, t.To, err)
		}
		r1, err := mpi.Isend(c, []int64{int64(len(data))}, t.To, tag)
		if err != nil {
			return err
		}
		r2, err := mpi.Isend(c, data, t.To, tag+1)
		if err != nil {
			return err
		}
		reqs = append(reqs, r1, r2)
	}
	got := make([][]byte, len(recvs))
	for i, t := range recvs {
		size := []int64{0}
		if _, err := mpi.Recv(c, size, t.From, tag); err != nil {
			return err
		}
		got[i] = make([]byte, size[0])
		if _, err := mpi.Recv(c, got[i], t.From, tag+1); err != nil {
			return err
		}
	}
	if err := mpi.WaitAll(reqs...); err != nil {
		return err
	}
	for i := range recvs {
		end := Back
		if front(recvs[i]) {
			end = Front
		}
		if err := e.m.Receive(got[i], end); err != nil {
			return fmt.Errorf("receive %d items from rank %d: %w", recvs[i].Count, recvs[i].From, err)
		}
	}
	return nil
}
