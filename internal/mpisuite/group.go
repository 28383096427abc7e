package mpisuite

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mpios/mpios/mpi"
)

// Groups and communicator creation (MPICH comm/group: grouptest, groupcreate, commcreate1,
// cmsplit_type).
func init() {
	register(
		Case{"grouptest", 2, groupOperations},
		Case{"commcreate", 2, commCreate},
		Case{"cmsplit_type", 2, commSplitType},
	)
}

func worldRanks(g *mpi.Group) []int {
	out := make([]int, g.Size())
	for i := range out {
		out[i] = g.WorldRank(i)
	}
	return out
}

// groupOperations: set operations keep the documented order; translation and comparison agree
// with the membership.
func groupOperations(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	world := c.Group()
	if err := check(world.Size() == p && world.Rank() == r, "world group: size %d rank %d", world.Size(), world.Rank()); err != nil {
		return err
	}
	var evens, odds, reversed []int
	for i := 0; i < p; i++ {
		if i%2 == 0 {
			evens = append(evens, i)
		} else {
			odds = append(odds, i)
		}
		reversed = append(reversed, p-1-i)
	}
	ev, err := world.Incl(evens)
	if err != nil {
		return err
	}
	od, err := world.Excl(evens)
	if err != nil {
		return err
	}
	if err := check(slices.Equal(worldRanks(od), odds), "Excl(evens) = %v", worldRanks(od)); err != nil {
		return err
	}
	wantRank := mpi.Undefined
	if r%2 == 0 {
		wantRank = r / 2
	}
	if err := check(ev.Rank() == wantRank, "rank in evens %d, want %d", ev.Rank(), wantRank); err != nil {
		return err
	}
	rev, err := world.Incl(reversed)
	if err != nil {
		return err
	}
	if cmp := rev.Compare(world); cmp != mpi.Similar || world.Compare(world.Union(ev)) != mpi.Ident {
		return fmt.Errorf("compare reversed: %v; world with union: %v", cmp, world.Compare(world.Union(ev)))
	}
	if cmp := ev.Compare(od); cmp != mpi.Unequal {
		return fmt.Errorf("evens vs odds: %v", cmp)
	}
	u := od.Union(rev)
	if err := check(slices.Equal(worldRanks(u)[:len(odds)], odds) && u.Size() == p, "union %v", worldRanks(u)); err != nil {
		return err
	}
	if err := check(rev.Intersection(ev).Size() == len(evens) && rev.Intersection(od).Compare(od) != mpi.Unequal, "intersection"); err != nil {
		return err
	}
	// Intersection keeps the first group's order: the reversed evens.
	inter := worldRanks(rev.Intersection(ev))
	if err := check(slices.IsSortedFunc(inter, func(a, b int) int { return b - a }), "intersection order %v", inter); err != nil {
		return err
	}
	if err := check(world.Difference(ev).Compare(od) == mpi.Ident && ev.Difference(world).Size() == 0, "difference"); err != nil {
		return err
	}
	tr, err := rev.TranslateRanks([]int{0, p - 1, mpi.ProcNull}, world)
	if err != nil || !slices.Equal(tr, []int{p - 1, 0, mpi.ProcNull}) {
		return fmt.Errorf("translate reversed to world: %v %v", tr, err)
	}
	tr, err = world.TranslateRanks([]int{0, 1}, od)
	if err != nil || !slices.Equal(tr, []int{mpi.Undefined, 0}) {
		return fmt.Errorf("translate world to odds: %v %v", tr, err)
	}
	for _, bad := range [][]int{{p}, {0, 0}, {-1}} {
		if _, err := world.Incl(bad); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("Incl(%v): %v, want ErrRank", bad, err)
		}
	}
	var empty mpi.Group
	return check(empty.Size() == 0 && empty.Rank() == mpi.Undefined && world.Intersection(&empty).Size() == 0, "empty group")
}

// commCreate: a communicator of the even ranks works for point-to-point and collectives and
// leaves the odd ranks out; made from a reversed group it numbers ranks in the group's order;
// different groups on different ranks fail everywhere.
func commCreate(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	world := c.Group()
	var evens []int
	for i := 0; i < p; i += 2 {
		evens = append(evens, i)
	}
	ev, _ := world.Incl(evens)
	ec, err := mpi.CommCreate(c, ev)
	if err != nil {
		return err
	}
	if r%2 == 1 {
		if ec != nil {
			return fmt.Errorf("odd rank got a communicator of the evens")
		}
	} else {
		sum := []int{0}
		if err := mpi.Allreduce(ec, []int{r}, sum, mpi.Sum); err != nil {
			return err
		}
		want := 0
		for _, e := range evens {
			want += e
		}
		if err := check(ec.Size() == len(evens) && ec.Rank() == r/2 && sum[0] == want && ec.Compare(c) == mpi.Unequal, "evens: size %d rank %d sum %d", ec.Size(), ec.Rank(), sum[0]); err != nil {
			return err
		}
	}
	rev, _ := world.Incl(func() []int {
		s := make([]int, p)
		for i := range s {
			s[i] = p - 1 - i
		}
		return s
	}())
	rc, err := mpi.CommCreate(c, rev)
	if err != nil {
		return err
	}
	if err := check(rc.Rank() == p-1-r && rc.Compare(c) == mpi.Similar, "reversed: rank %d", rc.Rank()); err != nil {
		return err
	}
	whole, err := mpi.CommCreate(c, world)
	if err != nil {
		return err
	}
	if err := check(whole.Compare(c) == mpi.Congruent && c.Compare(c) == mpi.Ident, "whole: %v", whole.Compare(c)); err != nil {
		return err
	}
	// Rank 0 passes another group than the others: everybody fails, nobody hangs.
	g := world
	if r == 0 {
		g = ev
	}
	if _, err := mpi.CommCreate(c, g); !errors.Is(err, mpi.ErrGroup) {
		return fmt.Errorf("different groups: %v, want ErrGroup", err)
	}
	return nil
}

// commSplitType: the node communicators partition the ranks consistently (every member of
// one agrees on who is in it), ordered by key; a sub-communicator splits by node as well.
func commSplitType(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	node, err := mpi.CommSplitType(c, mpi.SplitShared, p-r)
	if err != nil {
		return err
	}
	if err := sameNodeView(c, node); err != nil {
		return err
	}
	// Ordered by key p-r: decreasing rank of c.
	next := node.Rank() + 1
	if next < node.Size() {
		w, _ := node.Group().TranslateRanks([]int{node.Rank(), next}, c.Group())
		if err := check(w[0] > w[1], "node ranks %d, %d are ranks %v of c: want decreasing", node.Rank(), next, w); err != nil {
			return err
		}
	}
	half, err := c.Split(r%2, r)
	if err != nil {
		return err
	}
	hn, err := mpi.CommSplitType(half, mpi.SplitShared, 0)
	if err != nil {
		return err
	}
	if err := sameNodeView(half, hn); err != nil {
		return err
	}
	// The node communicator of a half is the half's part of this rank's node.
	inter := node.Group().Intersection(half.Group())
	return check(inter.Compare(hn.Group()) != mpi.Unequal, "node of a half: %d ranks, %d of the node are in the half", hn.Size(), inter.Size())
}

// sameNodeView checks that the node communicators partition c: every rank names its node by
// its lowest member, and exactly the members name the same.
func sameNodeView(c, node *mpi.Comm) error {
	g := node.Group()
	members := make([]int, g.Size())
	for i := range members {
		members[i] = i
	}
	inC, err := g.TranslateRanks(members, c.Group())
	if err != nil {
		return err
	}
	leader := slices.Min(inC)
	all := make([]int, c.Size())
	if err := mpi.Allgather(c, []int{leader}, all); err != nil {
		return err
	}
	for q, l := range all {
		if (l == leader) != slices.Contains(inC, q) {
			return fmt.Errorf("rank %d names node %d; the node of rank %d is %v", q, l, c.Rank(), inC)
		}
	}
	return nil
}
