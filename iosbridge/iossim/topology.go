package iossim

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Topology names an application communication graph of the thesis's benchmarks (§3.3):
// who sends a message to whom every iteration.
type Topology string

// The benchmark topologies of Figs. 3.4–3.7, plus the heat application's chain (Figs. 3.8,
// 3.9: every slice talks to its left and right neighbour).
const (
	Unconnected Topology = "unconnected"
	Sparse      Topology = "sparse"
	Tree        Topology = "tree"
	Hypercube   Topology = "hypercube"
	Chain       Topology = "chain"
)

// Edges returns, for each of n ranks, its peers under topology t, every message of bytes.
// Sparse draws a random graph of average degree 3 from seed; Hypercube needs a power of two.
// Every graph is symmetric: an actor answers the neighbours it heard from.
func Edges(t Topology, n int, bytes int64, seed uint64) ([][]Edge, error) {
	adj := make([]map[int]bool, n)
	for i := range adj {
		adj[i] = map[int]bool{}
	}
	link := func(a, b int) {
		if a != b {
			adj[a][b], adj[b][a] = true, true
		}
	}
	switch t {
	case Unconnected:
	case Chain:
		for i := 1; i < n; i++ {
			link(i-1, i)
		}
	case Tree:
		for i := 1; i < n; i++ {
			link((i-1)/2, i)
		}
	case Hypercube:
		if n&(n-1) != 0 {
			return nil, fmt.Errorf("iossim: hypercube needs a power of two ranks, got %d", n)
		}
		for i := 0; i < n; i++ {
			for b := 0; b < bits.Len(uint(n))-1; b++ {
				link(i, i^(1<<b))
			}
		}
	case Sparse:
		r := rand.New(rand.NewPCG(seed, 0x5ba75e))
		for i := 0; i < n && n > 1; i++ {
			for len(adj[i]) < 3 && len(adj[i]) < n-1 {
				link(i, r.IntN(n))
			}
		}
	default:
		return nil, fmt.Errorf("iossim: unknown topology %q", t)
	}
	out := make([][]Edge, n)
	for i := range adj {
		for j := 0; j < n; j++ {
			if adj[i][j] {
				out[i] = append(out[i], Edge{Rank: j, Bytes: bytes})
			}
		}
	}
	return out, nil
}

// Placement puts rank i of n on a node; the helpers below are the thesis's starting points.
type Placement func(rank, ranks int, nodes []NodeSpec) string

// OnFirstNode loads every rank onto the first node ("the application was loaded onto a
// single initial processor").
func OnFirstNode(_, _ int, nodes []NodeSpec) string { return nodes[0].ID }

// RoundRobin deals ranks to nodes in turn: the thesis's static baseline.
func RoundRobin(rank, _ int, nodes []NodeSpec) string { return nodes[rank%len(nodes)].ID }

// Blocks gives each node a contiguous block of ranks: the optimal placement of a chain on
// equal nodes (one cut per node boundary).
func Blocks(rank, ranks int, nodes []NodeSpec) string {
	per := (ranks + len(nodes) - 1) / len(nodes)
	return nodes[rank/per].ID
}

// Random places ranks uniformly at random from seed.
func Random(seed uint64) Placement {
	r := rand.New(rand.NewPCG(seed, 0x7a4d))
	var cache []int
	return func(rank, ranks int, nodes []NodeSpec) string {
		for len(cache) < ranks {
			cache = append(cache, r.IntN(len(nodes)))
		}
		return nodes[cache[rank]].ID
	}
}

// App builds the ranks of one job: n ranks of work CPU-seconds per iteration and state
// bytes, talking along topology t with messages of msgBytes, placed by place.
func App(job string, t Topology, n int, work float64, state, msgBytes int64, seed uint64, nodes []NodeSpec, place Placement) ([]RankSpec, error) {
	edges, err := Edges(t, n, msgBytes, seed)
	if err != nil {
		return nil, err
	}
	out := make([]RankSpec, n)
	for i := range out {
		out[i] = RankSpec{Job: job, Rank: i, Node: place(i, n, nodes), Work: work, StateBytes: state, Peers: edges[i]}
	}
	return out, nil
}

// Grid builds clusters × perCluster equal nodes named c<i>n<j>.
func Grid(clusters, perCluster int, cpus, speed float64) []NodeSpec {
	var out []NodeSpec
	for c := 0; c < clusters; c++ {
		for j := 0; j < perCluster; j++ {
			out = append(out, NodeSpec{ID: fmt.Sprintf("c%dn%d", c, j), CPUs: cpus, Speed: speed, Cluster: fmt.Sprintf("c%d", c)})
		}
	}
	return out
}
