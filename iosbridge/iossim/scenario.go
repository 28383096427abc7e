package iossim

import (
	"fmt"
	"github.com/mpios/mpios/iosbridge"
	"time"
)

// The scenarios of docs/SIMULATIONS.md, shared by the tests and bench/iossim.

// SolarisLAN is the network of the thesis's benchmark runs as modelled here: a 100 Mbit/s
// LAN with the millisecond per message of its Java actor runtime.
func SolarisLAN() LinkModel {
	return LinkModel{SameNode: time.Microsecond, LocalLatency: time.Millisecond, WideLatency: 20 * time.Millisecond,
		LocalBandwidth: 12.5e6, WideBandwidth: 1.25e6}
}

// BenchmarkConfig is Figs. 3.4–3.7: the thesis's Solaris cluster (four dual-processor
// 0.8 GHz nodes) running 32 actors of the given topology that each compute 20 ms (on a 1 GHz
// core) and send 32 KB to every neighbour per iteration, placed by place, for 300 s.
func BenchmarkConfig(t Topology, policy string, place Placement, seed uint64) (Config, error) {
	nodes := Grid(1, 4, 2, 0.8)
	ranks, err := App("bench", t, 32, 0.02, 1<<20, 32<<10, seed, nodes, place)
	if err != nil {
		return Config{}, err
	}
	return Config{Seed: seed, Policy: policy, Nodes: nodes, Ranks: ranks, Links: SolarisLAN(), Duration: 300 * time.Second}, nil
}

// HeatConfig is Figs. 3.8–3.9: the heat application (a bulk-synchronous chain of 16 slices,
// 64 KB halos, 50 ms per iteration on a 1 GHz core) on the thesis's AIX cluster (four
// quad-processor 1.7 GHz nodes), placed by place, for 300 s.
func HeatConfig(policy string, place Placement, seed uint64) (Config, error) {
	nodes := Grid(1, 4, 4, 1.7)
	ranks, err := App("heat", Chain, 16, 0.05, 4<<20, 64<<10, seed, nodes, place)
	if err != nil {
		return Config{}, err
	}
	return Config{Seed: seed, Policy: policy, Nodes: nodes, Ranks: ranks, Links: SolarisLAN(), Duration: 300 * time.Second, Sync: true}, nil
}

// ScaleConfig is the scaling scenario: n nodes of 2 CPUs in clusters of up to 100 (LAN
// inside, wide-area links between), 2n ranks in jobs of 8 talking along a chain (100 ms per
// iteration, 4 KB halos, 8 MB of state), all started on the first quarter of the nodes (4
// ranks per CPU there, the rest idle), balanced by policy for 300 virtual seconds.
func ScaleConfig(n int, policy string, seed uint64) Config {
	per := min(n, 100)
	nodes := Grid((n+per-1)/per, per, 2, 1)[:n]
	loaded := max(1, n/4)
	edges, _ := Edges(Chain, 8, 4<<10, seed)
	var ranks []RankSpec
	for j := 0; j < 2*n/8; j++ {
		job := fmt.Sprintf("job%d", j)
		for r := 0; r < 8; r++ {
			ranks = append(ranks, RankSpec{Job: job, Rank: r, Node: nodes[j%loaded].ID, Work: 0.1, StateBytes: 8 << 20, Peers: edges[r]})
		}
	}
	return Config{Seed: seed, Policy: policy, Nodes: nodes, Ranks: ranks, Duration: 300 * time.Second}
}

// ScaleIdeal is ScaleConfig's balanced placement (each job on 4 neighbouring nodes, 2 ranks
// per node, policy none): the throughput the balancing should approach.
func ScaleIdeal(n int, seed uint64) Config {
	cfg := ScaleConfig(n, "none", seed)
	for i := range cfg.Ranks {
		cfg.Ranks[i].Node = cfg.Nodes[(i/2)%n].ID
	}
	return cfg
}

// HeatFLCRAS is FLC-RAS with its communication cutoffs tuned to the heat scenario, as the
// thesis's designer tunes them: ±32 MiB per profile window, about what one halo carries in
// a window at the optimal placement, so that co-location counts as much as free CPU.
func HeatFLCRAS() (iosbridge.Policy, error) {
	cfg := iosbridge.DefaultFLCRASConfig()
	cfg.Communication = iosbridge.FLCCutoffs{TBad: -32 << 20, TGood: 32 << 20}
	return iosbridge.NewFLCRAS(cfg)
}
