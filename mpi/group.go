package mpi

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
)

// Groups (MPI_Group) and the communicators made from them (MPI_Comm_create,
// MPI_Comm_split_type). A Group is an ordered set of processes, named by their world ranks;
// it is local to the process (no communication) until CommCreate turns it into a
// communicator.

// ErrGroup reports a group that does not fit the call: CommCreate with a group that is not a
// subset of the communicator, or different groups on different ranks.
var ErrGroup = errors.New("mpi: invalid group")

// Group is an ordered set of processes (MPI_Group). The zero value is the empty group.
type Group struct {
	world []int // group rank -> world rank
	me    int   // the calling process's world rank
}

// Comparison is the result of comparing two groups or communicators.
type Comparison int

const (
	// Ident: the same members in the same order (for communicators: the same communicator).
	Ident Comparison = iota
	// Congruent: communicators with the same members in the same order but distinct contexts.
	Congruent
	// Similar: the same members in another order.
	Similar
	// Unequal: different members.
	Unequal
)

func (c Comparison) String() string {
	switch c {
	case Ident:
		return "ident"
	case Congruent:
		return "congruent"
	case Similar:
		return "similar"
	}
	return "unequal"
}

// Group returns the group of c's ranks, in c's order (MPI_Comm_group).
func (c *Comm) Group() *Group {
	if c == nil || c.e == nil {
		return &Group{}
	}
	return &Group{world: slices.Clone(c.group), me: c.e.rank}
}

// Size returns the number of processes in g (MPI_Group_size).
func (g *Group) Size() int { return len(g.world) }

// Rank returns the calling process's rank in g, or Undefined if it is not a member
// (MPI_Group_rank).
func (g *Group) Rank() int {
	if i := slices.Index(g.world, g.me); i >= 0 {
		return i
	}
	return Undefined
}

// WorldRank returns the world rank of rank r of g.
func (g *Group) WorldRank(r int) int { return g.world[r] }

func (g *Group) derive(world []int) *Group { return &Group{world: world, me: g.me} }

// Incl returns the group of g's ranks listed in ranks, in that order (MPI_Group_incl). The
// ranks must be distinct members of g.
func (g *Group) Incl(ranks []int) (*Group, error) {
	if err := g.checkRanks("Incl", ranks); err != nil {
		return nil, err
	}
	world := make([]int, len(ranks))
	for i, r := range ranks {
		world[i] = g.world[r]
	}
	return g.derive(world), nil
}

// Excl returns g without the listed ranks, in g's order (MPI_Group_excl). The ranks must be
// distinct members of g.
func (g *Group) Excl(ranks []int) (*Group, error) {
	if err := g.checkRanks("Excl", ranks); err != nil {
		return nil, err
	}
	var world []int
	for r, w := range g.world {
		if !slices.Contains(ranks, r) {
			world = append(world, w)
		}
	}
	return g.derive(world), nil
}

func (g *Group) checkRanks(op string, ranks []int) error {
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if r < 0 || r >= len(g.world) {
			return fmt.Errorf("mpi: %s: %w: %d not in [0,%d)", op, ErrRank, r, len(g.world))
		}
		if seen[r] {
			return fmt.Errorf("mpi: %s: %w: %d listed twice", op, ErrRank, r)
		}
		seen[r] = true
	}
	return nil
}

// Union returns g's members followed by those of h that are not in g (MPI_Group_union).
func (g *Group) Union(h *Group) *Group {
	world := slices.Clone(g.world)
	for _, w := range h.world {
		if !slices.Contains(g.world, w) {
			world = append(world, w)
		}
	}
	return g.derive(world)
}

// Intersection returns g's members that are also in h, in g's order (MPI_Group_intersection).
func (g *Group) Intersection(h *Group) *Group {
	return g.derive(slices.DeleteFunc(slices.Clone(g.world), func(w int) bool { return !slices.Contains(h.world, w) }))
}

// Difference returns g's members that are not in h, in g's order (MPI_Group_difference).
func (g *Group) Difference(h *Group) *Group {
	return g.derive(slices.DeleteFunc(slices.Clone(g.world), func(w int) bool { return slices.Contains(h.world, w) }))
}

// TranslateRanks returns the ranks in h of the processes with the given ranks in g
// (MPI_Group_translate_ranks): Undefined for a process that is not in h, ProcNull for ProcNull.
func (g *Group) TranslateRanks(ranks []int, h *Group) ([]int, error) {
	out := make([]int, len(ranks))
	for i, r := range ranks {
		switch {
		case r == ProcNull:
			out[i] = ProcNull
		case r < 0 || r >= len(g.world):
			return nil, fmt.Errorf("mpi: TranslateRanks: %w: %d not in [0,%d)", ErrRank, r, len(g.world))
		default:
			out[i] = slices.Index(h.world, g.world[r])
			if out[i] < 0 {
				out[i] = Undefined
			}
		}
	}
	return out, nil
}

// Compare compares two groups (MPI_Group_compare): Ident, Similar or Unequal.
func (g *Group) Compare(h *Group) Comparison {
	if slices.Equal(g.world, h.world) {
		return Ident
	}
	a, b := slices.Clone(g.world), slices.Clone(h.world)
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return Similar
	}
	return Unequal
}

// Compare compares two communicators (MPI_Comm_compare): Ident for the same communicator,
// Congruent for the same ranks in the same order, Similar, or Unequal.
func (c *Comm) Compare(d *Comm) Comparison {
	if c == d || (c != nil && d != nil && c.e == d.e && c.ctx == d.ctx) {
		return Ident
	}
	if cmp := c.Group().Compare(d.Group()); cmp != Ident {
		return cmp
	}
	return Congruent
}

// CommCreate makes a communicator of the members of g, a subset of c's ranks, in g's order
// (MPI_Comm_create). It is collective over c, and every rank must pass the same group:
// members get the new communicator, the other ranks nil. A group that is not a subset of c, or
// differs between ranks, fails with ErrGroup on every rank.
func CommCreate(c *Comm, g *Group) (nc *Comm, err error) {
	if t := observe("CommCreate"); t != nil {
		defer func() { t.done(c, -1, 0, err) }()
	}
	if err := c.valid("CommCreate"); err != nil {
		return nil, err
	}
	var lerr error
	for _, w := range g.world {
		if !c.has(w) {
			lerr = fmt.Errorf("mpi: CommCreate: %w: world rank %d is not in the communicator", ErrGroup, w)
			break
		}
	}
	// Agreeing on the context also checks that every rank passed the same group: a rank whose
	// group is invalid contributes a fingerprint no other rank has.
	h := fnv.New64a()
	for _, w := range g.world {
		h.Write([]byte{byte(w), byte(w >> 8), byte(w >> 16), byte(w >> 24)})
	}
	fp := int64(h.Sum64() >> 2)
	if lerr != nil {
		fp = -1 - int64(c.Rank())
	}
	ctx, same, err := c.agreeContextChecked(fp)
	switch {
	case err != nil:
		return nil, fmt.Errorf("mpi: CommCreate: %w", err)
	case lerr != nil:
		return nil, lerr
	case !same:
		return nil, fmt.Errorf("mpi: CommCreate: %w: the ranks passed different groups", ErrGroup)
	case !slices.Contains(g.world, c.e.rank):
		return nil, nil
	}
	return newComm(c.e, ctx, slices.Clone(g.world)), nil
}

// SplitType selects how CommSplitType groups ranks.
type SplitType int

const (
	// SplitShared groups the ranks that share a node, and so can share memory
	// (MPI_COMM_TYPE_SHARED).
	SplitShared SplitType = iota
)

// CommSplitType partitions c by node (MPI_Comm_split_type): with SplitShared, the ranks that
// run on one node form a communicator, ordered by key (ties by rank in c). Ranks are on the
// same node when they advertise the same host address in the job's address table (after a
// migration, the address of the process that now holds the rank); ranks run as goroutines of
// one process are on one node. It is collective over c.
func CommSplitType(c *Comm, kind SplitType, key int) (nc *Comm, err error) {
	if t := observe("CommSplitType"); t != nil {
		defer func() { t.done(c, -1, 0, err) }()
	}
	if err := c.valid("CommSplitType"); err != nil {
		return nil, err
	}
	if kind != SplitShared {
		return nil, fmt.Errorf("mpi: CommSplitType: %w: split type %d", ErrTopology, kind)
	}
	nodes, err := nodeColors(c)
	if err != nil {
		return nil, fmt.Errorf("mpi: CommSplitType: %w", err)
	}
	nc, err = c.Split(nodes[c.Rank()], key)
	if err != nil {
		return nil, fmt.Errorf("mpi: CommSplitType: %w", err)
	}
	return nc, nil
}

// nodeColors returns, for every rank of c, the lowest rank of c on the same node: equal for
// the ranks of one node, different across nodes. It is collective over c.
func nodeColors(c *Comm) ([]int, error) {
	h := fnv.New64a()
	h.Write([]byte(c.e.nodeName()))
	all := make([]uint64, c.Size())
	if err := Allgather(c, []uint64{h.Sum64()}, all); err != nil {
		return nil, err
	}
	colors := make([]int, len(all))
	for r, v := range all {
		colors[r] = slices.Index(all, v)
	}
	return colors, nil
}

// nodeName names the node this process runs on: the host part of its own address in the
// address table, or "" for endpoints without one (the in-process transport: one node).
func (e *engine) nodeName() string {
	a, ok := e.ep.(interface{ Addrs() []string })
	if !ok {
		return ""
	}
	addrs := a.Addrs()
	if e.rank >= len(addrs) {
		return ""
	}
	host, _, err := net.SplitHostPort(addrs[e.rank])
	if err != nil {
		return addrs[e.rank]
	}
	return host
}
