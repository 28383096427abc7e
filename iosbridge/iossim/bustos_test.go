package iossim

import (
	"testing"
	"time"
)

// Bustos §6.1.4, Fig. 6.9: Robin-Hood + Nottingham Sheriff uses less than twice the optimal
// number of nodes and "the curves remain under 6.5 migrations per active-object", with the
// deployed agents. 50×50 and 100×100 are in docs/SIMULATIONS.md (bench/iossim).
func TestBustosRHNSUsesUnderTwiceOPTWithUnder6_5MigrationsPerObject(t *testing.T) {
	sizes := []int{10, 20}
	if testing.Short() || raceDetector {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		r, err := Bustos(n, "rhns", 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.ALOP >= 2 || r.MigrationsPerObject >= 6.5 || r.Overloaded > 0 {
			t.Errorf("%d×%d: %+v", n, n, r)
		}
		// Bustos' own Sheriff (one object from one acquaintance per steal) gathers with more
		// moves than the agents' (hints, bulk steals, objects kept for the best nodes).
		cfg := BustosConfig(n, "rhns", 1)
		if cfg.Tuned, err = BustosSheriff(); err != nil {
			t.Fatal(err)
		}
		his, err := RunBustos(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if his.MigrationsPerObject <= r.MigrationsPerObject || his.Used < r.Used {
			t.Errorf("%d×%d: Bustos' own %+v, the agents' %+v", n, n, his, r)
		}
		// Robin-Hood alone stops at a local optimum: more nodes, fewer moves.
		rh, err := Bustos(n, "robinhood", 1)
		if err != nil {
			t.Fatal(err)
		}
		if rh.Used <= r.Used {
			t.Errorf("%d×%d: robin-hood alone used %d nodes, rhns %d", n, n, rh.Used, r.Used)
		}
	}
}

func TestBustosOPTIsEquation6_3(t *testing.T) {
	// Σ_{i≤OPT} μ_i > mλ with the nodes sorted by capacity: cores 5, 4, 3, 2 for 8 ranks:
	// 5 ≤ 8, 5+4 = 9 > 8: OPT = 2.
	cfg := Config{Nodes: []NodeSpec{{CPUs: 3}, {CPUs: 5}, {CPUs: 2}, {CPUs: 4}}, Ranks: make([]RankSpec, 8)}
	if got := BustosOPT(cfg); got != 2 {
		t.Fatalf("OPT = %d", got)
	}
}

// A Jacobi worker cannot run ahead of a neighbour: in lockstep a fast rank next to a slow
// one goes at the slow one's pace; its neighbour's other neighbours do not slow it.
func TestLockstepCapsARankAtItsNeighboursRate(t *testing.T) {
	nodes := []NodeSpec{{ID: "fast", CPUs: 4}, {ID: "slow", CPUs: 1}}
	chain := [][]Edge{{{Rank: 1}}, {{Rank: 0}, {Rank: 2}}, {{Rank: 1}}}
	ranks := []RankSpec{
		{Job: "j", Rank: 0, Node: "fast", Work: 0.1, Peers: chain[0]},
		{Job: "j", Rank: 1, Node: "fast", Work: 0.1, Peers: chain[1]},
		{Job: "j", Rank: 2, Node: "slow", Work: 0.4, Peers: chain[2]},
	}
	run := func(lock bool) float64 {
		res := mustRun(t, Config{Policy: "none", Nodes: nodes, Ranks: ranks, Duration: 2 * time.Second, Lockstep: lock})
		return res.Samples[len(res.Samples)-1].Throughput
	}
	free, locked := run(false), run(true)
	// Free: about 10 + 10 + 2.5 it/s; lockstep: rank 1 waits for rank 2 (2.5), rank 0 only
	// for rank 1's own pace (10): about 10 + 2.5 + 2.5.
	if !(free > 22 && free < 23) || !(locked > 14.9 && locked < 15.1) {
		t.Fatalf("throughput free %.2f, lockstep %.2f", free, locked)
	}
}

// Bustos measures ALOP "once the system has converged": with QuietStop a run ends at the
// first sample QuietStop after the last migration, and up to there it is the same run as
// one without QuietStop (the early end changes nothing before it).
func TestQuietStopEndsTheRunOnceNoMigrationForThePeriod(t *testing.T) {
	cfg := BustosConfig(10, "rhns", 1) // settles within 600 s (docs/SIMULATIONS.md)
	cfg.Duration, cfg.QuietStop = 30*time.Minute, 5*time.Minute
	var samples int
	cfg.OnSample = func(Sample) { samples++ }
	quiet, err := RunBustos(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if quiet.LastMigration < 0 || quiet.End < quiet.LastMigration+cfg.QuietStop || quiet.End > quiet.LastMigration+cfg.QuietStop+time.Second {
		t.Fatalf("last migration %v, ended %v, quiet %v", quiet.LastMigration, quiet.End, cfg.QuietStop)
	}
	if want := int(quiet.End/time.Second) + 1; samples != want {
		t.Errorf("OnSample called %d times, %d samples taken", samples, want)
	}
	cfg.Duration, cfg.QuietStop, cfg.OnSample = quiet.End, 0, nil
	full, err := RunBustos(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if full != quiet {
		t.Errorf("quiet stop %+v, fixed duration %+v", quiet, full)
	}
}
