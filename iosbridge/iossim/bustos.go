package iossim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mpios/mpios/iosbridge"
)

// Bustos' large-scale simulations (seed 001 §6.1): n×n desktop nodes whose processing
// capacities μ follow N(1, 1/9), an application of m = 100 active objects that each need λ
// of a node's capacity, all started on a small corner of the network, balanced by
// Robin-Hood + Nottingham Sheriff. His measures: ALOP, the nodes used over the OPT best
// nodes that could hold the application (eq. 6.3, 6.4), and the migrations per object.

// BustosObjects is m, the number of active objects of §6.1.4.
const BustosObjects = 100

// BustosLambda is λ, each object's load as a share of a node of capacity 1. 0.18 gives
// Bustos' optimal subsets on average: OPT = 13 nodes at 10×10 and 9 at 50×50.
const BustosLambda = 0.18

// BustosConfig is the scenario at n×n nodes under policy (normally "rhns"): node i has
// capacity μ_i drawn from N(1, 1/9) (clipped at 0.05) and μ_i/λ cores, so that one rank
// wanting a core is an object of load λ and a node is overloaded exactly when jλ ≥ μ; the
// 100 ranks form a 10×10 Jacobi mesh (each waits for its four neighbours: Lockstep) and
// start on the 3×3 corner of the network (Bustos' initial deployment subset). Nodes rank
// each other by their cores (μ/λ). Duration is 600 virtual seconds: the agents' one-minute
// cooldown allows at most ten moves per rank.
func BustosConfig(n int, policy string, seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0xb057))
	var nodes []NodeSpec
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			mu := math.Max(0.05, 1+r.NormFloat64()/3)
			nodes = append(nodes, NodeSpec{ID: fmt.Sprintf("n%d_%d", x, y), CPUs: mu / BustosLambda})
		}
	}
	corner := min(3, n)
	var start []string
	for y := 0; y < corner; y++ {
		for x := 0; x < corner; x++ {
			start = append(start, nodes[y*n+x].ID)
		}
	}
	const side = 10 // the objects' mesh: 10 × 10 = BustosObjects
	var ranks []RankSpec
	for i := 0; i < BustosObjects; i++ {
		x, y := i%side, i/side
		var peers []Edge
		for _, d := range [][2]int{{-1, 0}, {1, 0}, {0, -1}, {0, 1}} {
			if px, py := x+d[0], y+d[1]; px >= 0 && px < side && py >= 0 && py < side {
				peers = append(peers, Edge{Rank: py*side + px, Bytes: 8 << 10})
			}
		}
		ranks = append(ranks, RankSpec{Job: "jacobi", Rank: i, Node: start[i%len(start)], Work: 0.1, StateBytes: 1 << 20, Peers: peers})
	}
	agent := iosbridge.Config{StealThreshold: 0.3} // underloaded: load below T = 0.7 (§6.1.4)
	return Config{Seed: seed, Policy: policy, Agent: agent, Nodes: nodes, Ranks: ranks, Duration: 600 * time.Second, Lockstep: true}
}

// BustosSheriff is RHNS as Bustos describes it, without the gathering this package's
// agents add for large grids (iosbridge.RobinHoodConfig.Prefer and Bulk): the Sheriff steals
// one object at a time from an acquaintance; set it as Config.Tuned to compare.
func BustosSheriff() (iosbridge.Policy, error) {
	cfg := iosbridge.DefaultRobinHoodConfig()
	cfg.Prefer, cfg.Bulk = 0, false
	return iosbridge.NewBalancer(iosbridge.PolicyRHNS, cfg)
}

// BustosOPT is eq. 6.3: the size of the smallest set of best nodes whose capacities exceed
// the application's load, Σ_{i ≤ OPT} μ_i > m λ, i.e. whose cores exceed the ranks.
func BustosOPT(cfg Config) int {
	cpus := make([]float64, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		cpus[i] = n.CPUs
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(cpus)))
	sum := 0.0
	for i, c := range cpus {
		if sum += c; sum > float64(len(cfg.Ranks)) {
			return i + 1
		}
	}
	return len(cpus)
}

// BustosResult is a run's ALOP and migrations per object.
type BustosResult struct {
	// Nodes is n (n×n nodes); OPT eq. 6.3; Used the nodes hosting a rank at the end.
	Nodes, OPT, Used int
	// ALOP is eq. 6.4, Used / OPT.
	ALOP float64
	// MigrationsPerObject is the mean number of moves per rank; MaxMigrations the most any
	// rank made.
	MigrationsPerObject float64
	MaxMigrations       int
	// Overloaded counts nodes whose ranks want more cores than they have at the end.
	Overloaded int
	// Throughput is iterations per second over the last fifth of the run.
	Throughput float64
	// End is the virtual time the run ended (earlier than Duration with QuietStop);
	// LastMigration when the last migration landed (-1 if none did).
	End, LastMigration time.Duration
}

// Bustos runs BustosConfig(n, policy, seed) and measures it.
func Bustos(n int, policy string, seed uint64) (BustosResult, error) {
	return RunBustos(BustosConfig(n, policy, seed))
}

// RunBustos runs cfg, a BustosConfig whose Duration, QuietStop or OnSample the caller may
// have changed (a longer run, or one that ends once the agents settle), and measures it.
func RunBustos(cfg Config) (BustosResult, error) {
	n := int(math.Round(math.Sqrt(float64(len(cfg.Nodes)))))
	res, err := Run(cfg)
	if err != nil {
		return BustosResult{}, err
	}
	if res.StepErrors > 0 {
		return BustosResult{}, fmt.Errorf("iossim: bustos %d×%d: %d steps rejected, first: %w", n, n, res.StepErrors, res.FirstError)
	}
	out := BustosResult{Nodes: n, OPT: BustosOPT(cfg), Throughput: res.Throughput(res.End * 4 / 5), End: res.End, LastMigration: res.LastMigration}
	hosted := map[string]int{}
	for _, node := range res.Placement {
		hosted[node]++
	}
	out.Used = len(hosted)
	out.ALOP = float64(out.Used) / float64(out.OPT)
	for _, m := range res.MigrationsPerRank {
		out.MaxMigrations = max(out.MaxMigrations, m)
	}
	out.MigrationsPerObject = float64(res.Migrations) / float64(len(cfg.Ranks))
	for _, spec := range cfg.Nodes {
		if float64(hosted[spec.ID]) > spec.CPUs {
			out.Overloaded++
		}
	}
	return out, nil
}
