package iossim

import (
	"fmt"
	"time"
)

// ScaleConfig is the scaling scenario of docs/SIMULATIONS.md: n nodes of 2 CPUs in clusters
// of up to 100 (LAN inside, wide-area links between), 2n ranks in jobs of 8 talking along a
// chain, all started on the first quarter of the nodes (4 ranks per CPU there, the rest
// idle), balanced by the default policy for 300 virtual seconds.
func ScaleConfig(n int, seed uint64) Config {
	per := min(n, 100)
	nodes := Grid((n+per-1)/per, per, 2, 1)[:n]
	loaded := max(1, n/4)
	var ranks []RankSpec
	for j := 0; j < 2*n/8; j++ {
		job := fmt.Sprintf("job%d", j)
		edges, _ := Edges(Chain, 8, 4<<10, seed)
		for r := 0; r < 8; r++ {
			idx := j*8 + r
			ranks = append(ranks, RankSpec{Job: job, Rank: r, Node: nodes[(idx/8)%loaded].ID, Work: 0.1, StateBytes: 8 << 20, Peers: edges[r]})
		}
	}
	return Config{Seed: seed, Nodes: nodes, Ranks: ranks, Duration: 300 * time.Second}
}
