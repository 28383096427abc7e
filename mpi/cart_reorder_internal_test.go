package mpi

import (
	"slices"
	"testing"
)

// crossNodePairs counts the neighbour pairs of a non-periodic grid dims whose ranks run on
// different nodes, when grid position i holds the rank r with pos[r] = i.
func crossNodePairs(dims []int, nodes, pos []int) (cross, pairs int) {
	at := make([]int, len(pos)) // grid position -> rank
	for r, i := range pos {
		at[i] = r
	}
	t := &Cart{dims: dims, periods: make([]bool, len(dims))}
	for i := range at {
		coords := t.coordsOf(i)
		for d := range dims {
			if coords[d]+1 >= dims[d] {
				continue
			}
			next := slices.Clone(coords)
			next[d]++
			j, err := t.RankOf(next)
			if err != nil {
				panic(err)
			}
			pairs++
			if nodes[at[i]] != nodes[at[j]] {
				cross++
			}
		}
	}
	return cross, pairs
}

func identity(n int) []int {
	pos := make([]int, n)
	for i := range pos {
		pos[i] = i
	}
	return pos
}

// roundRobin is the node colors (lowest rank of the node) of n ranks dealt round-robin over k
// nodes, mpirun's --hosts placement.
func roundRobin(n, k int) []int {
	nodes := make([]int, n)
	for r := range nodes {
		nodes[r] = r % k
	}
	return nodes
}

// With 16 ranks dealt round-robin over two nodes, a 4x4 grid in rank order puts every
// horizontal neighbour on the other node (12 of the 24 pairs); CartCreate's reorder gives each
// node two whole rows, and only the 4 pairs between them cross.
func TestCartReorderGivesANodesRanksConsecutivePositions(t *testing.T) {
	dims := []int{4, 4}
	nodes := roundRobin(16, 2)
	if cross, pairs := crossNodePairs(dims, nodes, identity(16)); cross != 12 || pairs != 24 {
		t.Fatalf("rank order: %d of %d pairs cross nodes, want 12 of 24", cross, pairs)
	}
	pos := nodeOrder(nodes)
	if cross, _ := crossNodePairs(dims, nodes, pos); cross != 4 {
		t.Errorf("reordered: %d pairs cross nodes, want 4 (positions %v)", cross, pos)
	}

	for _, tc := range []struct {
		name  string
		nodes []int
	}{
		{"round-robin 3 nodes", roundRobin(12, 3)},
		{"blocks", []int{0, 0, 0, 3, 3, 3, 6, 6, 6}},
		{"uneven", []int{0, 1, 1, 0, 4, 1, 0}},
		{"one node", make([]int, 5)},
	} {
		pos := nodeOrder(tc.nodes)
		sorted := slices.Sorted(slices.Values(pos))
		if !slices.Equal(sorted, identity(len(pos))) {
			t.Fatalf("%s: positions %v are not a permutation", tc.name, pos)
		}
		// Each node's ranks hold consecutive positions, in rank order.
		for r := range pos {
			for s := r + 1; s < len(pos); s++ {
				if tc.nodes[r] == tc.nodes[s] && pos[r] > pos[s] {
					t.Errorf("%s: ranks %d and %d of one node at positions %d, %d", tc.name, r, s, pos[r], pos[s])
				}
			}
		}
		for _, node := range slices.Compact(slices.Sorted(slices.Values(tc.nodes))) {
			var at []int
			for r, n := range tc.nodes {
				if n == node {
					at = append(at, pos[r])
				}
			}
			slices.Sort(at)
			if at[len(at)-1]-at[0] != len(at)-1 {
				t.Errorf("%s: node %d's ranks at positions %v, not consecutive", tc.name, node, at)
			}
		}
		if (tc.name == "blocks" || tc.name == "one node") && !slices.Equal(pos, identity(len(pos))) {
			t.Errorf("%s: positions %v, want rank order kept", tc.name, pos)
		}
	}
}

// CartCreate with reorder on goroutine ranks (one node): the order is kept, and the ranks
// beyond the grid get nil.
func TestCartCreateReorderOnOneNodeKeepsRankOrder(t *testing.T) {
	worlds := goroutineWorld(t, 5)
	errs := runRanks(t, worlds, func(r int, w *Comm) error {
		cart, err := CartCreate(w, []int{2, 2}, []bool{false, true}, true)
		if err != nil {
			return err
		}
		if r == 4 {
			if cart != nil {
				t.Errorf("rank 4 got a place in a grid of 4")
			}
			return nil
		}
		if cart.Rank() != r {
			t.Errorf("rank %d is rank %d of the grid, want its own", r, cart.Rank())
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
