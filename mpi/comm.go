package mpi

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// Comm is a communicator: a group of ranks and a private context, so that traffic on one
// communicator never matches receives on another. Point-to-point operations use the context;
// collectives use a second, hidden context, so they never match application messages either.
//
// Concurrency: every operation may be called from several goroutines of one rank at once.
// Point-to-point calls are matched in the order they are posted. Collectives (and Split/Dup) on
// one communicator must be called in the same order by every rank, so goroutines that run
// collectives concurrently must each use their own communicator (see Dup).
type Comm struct {
	e     *engine
	ctx   uint32
	rank  int
	group []int // comm rank -> world rank
	inv   []int // world rank -> comm rank, or -1
	freed atomic.Bool
	// lastNonblocking is the done channel of the nonblocking collective started last on c (see
	// icoll.go); collectives run in the order they are started.
	lastNonblocking atomic.Pointer[chan struct{}]
}

func newComm(e *engine, ctx uint32, group []int) *Comm {
	c := &Comm{e: e, ctx: ctx, group: group, inv: make([]int, e.size), rank: -1}
	for i := range c.inv {
		c.inv[i] = -1
	}
	for r, w := range group {
		c.inv[w] = r
		if w == e.rank {
			c.rank = r
		}
	}
	return c
}

// Rank returns the calling process's rank in c.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in c.
func (c *Comm) Size() int { return len(c.group) }

// WorldRank returns the rank in the world communicator of rank r of c.
func (c *Comm) WorldRank(r int) int { return c.group[r] }

func (c *Comm) has(world int) bool { return c != nil && c.inv[world] >= 0 }

// commRank translates a world rank to c's rank (the source reported in a Status).
func (c *Comm) commRank(world int) int {
	if c == nil {
		return world
	}
	return c.inv[world]
}

func (c *Comm) valid(op string) error {
	if c == nil || c.e == nil {
		return fmt.Errorf("mpi: %s: %w: nil", op, ErrComm)
	}
	if c.freed.Load() {
		return fmt.Errorf("mpi: %s: %w: freed", op, ErrComm)
	}
	if c.e.revoked.Load() {
		// Checked here, not only when a message is sent: a communicator of one rank sends
		// none, and its calls must fail after a resize all the same.
		return &StaleCommError{Op: op}
	}
	return nil
}

// Free releases c. Its context is never reused; later calls on c fail with ErrComm.
func (c *Comm) Free() error {
	if err := c.valid("Free"); err != nil {
		return err
	}
	c.freed.Store(true)
	return nil
}

// Dup returns a new communicator with the same group and a new context. It is collective.
func (c *Comm) Dup() (*Comm, error) {
	if err := c.valid("Dup"); err != nil {
		return nil, err
	}
	ctx, err := c.agreeContext()
	if err != nil {
		return nil, fmt.Errorf("mpi: Dup: %w", err)
	}
	return newComm(c.e, ctx, slices.Clone(c.group)), nil
}

// Split partitions c: ranks that pass the same color form a new communicator, ordered by key
// (ties by rank in c). A rank passing Undefined gets nil. It is collective over c.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.valid("Split"); err != nil {
		return nil, err
	}
	if color < 0 && color != Undefined {
		return nil, fmt.Errorf("mpi: Split: color %d: want >= 0 or Undefined", color)
	}
	c.e.mu.Lock()
	proposal := c.e.nextCtx
	c.e.mu.Unlock()
	mine := []int64{int64(color), int64(key), int64(proposal)}
	all := make([]int64, 3*c.Size())
	if err := Allgather(c, mine, all); err != nil {
		return nil, fmt.Errorf("mpi: Split: %w", err)
	}
	var agreed uint32
	for r := 0; r < c.Size(); r++ {
		agreed = max(agreed, uint32(all[3*r+2]))
	}
	c.e.mu.Lock()
	c.e.nextCtx = max(c.e.nextCtx, agreed+2)
	c.e.mu.Unlock()
	if color == Undefined {
		return nil, nil
	}
	type member struct{ key, rank int }
	var members []member
	for r := 0; r < c.Size(); r++ {
		if int(all[3*r]) == color {
			members = append(members, member{int(all[3*r+1]), r})
		}
	}
	slices.SortStableFunc(members, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	group := make([]int, len(members))
	for i, m := range members {
		group[i] = c.group[m.rank]
	}
	return newComm(c.e, agreed, group), nil
}

// agreeContext picks a context that is free on every member: the largest of their next free
// contexts. Communicator creation must not run concurrently on one process.
func (c *Comm) agreeContext() (uint32, error) {
	ctx, _, err := c.agreeContextChecked(0)
	return ctx, err
}

// agreeContextChecked is agreeContext that also tells whether every member passed the same
// fingerprint (the largest and the smallest agree), in the same reduction.
func (c *Comm) agreeContextChecked(fingerprint int64) (uint32, bool, error) {
	c.e.mu.Lock()
	proposal := []int64{int64(c.e.nextCtx), fingerprint, -fingerprint}
	c.e.mu.Unlock()
	agreed := make([]int64, 3)
	if err := Allreduce(c, proposal, agreed, Max); err != nil {
		return 0, false, err
	}
	ctx := uint32(agreed[0])
	c.e.mu.Lock()
	c.e.nextCtx = max(c.e.nextCtx, ctx+2)
	c.e.mu.Unlock()
	return ctx, agreed[1] == -agreed[2], nil
}

// worldRankOf validates a destination/source rank of c and translates it to a world rank.
// ProcNull passes through; AnySource passes through when allowed.
func (c *Comm) worldRankOf(op string, r int, anyOK bool) (int, error) {
	switch {
	case r == ProcNull:
		return ProcNull, nil
	case r == AnySource && anyOK:
		return AnySource, nil
	case r < 0 || r >= len(c.group):
		return 0, fmt.Errorf("mpi: %s: %w: %d not in [0,%d)", op, ErrRank, r, len(c.group))
	}
	return c.group[r], nil
}

func checkTag(op string, tag int, anyOK bool) error {
	if (tag == AnyTag && anyOK) || (tag >= 0 && tag <= MaxTag) {
		return nil
	}
	return fmt.Errorf("mpi: %s: %w: %d not in [0,%d]", op, ErrTag, tag, MaxTag)
}
