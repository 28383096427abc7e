package iossim

import (
	"reflect"
	"testing"
	"time"
)

func unconnected(t *testing.T, policy string, place Placement, seed uint64) Config {
	t.Helper()
	nodes := Grid(1, 4, 2, 1)
	ranks, err := App("bench", Unconnected, 16, 0.05, 1<<20, 0, seed, nodes, place)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Seed: seed, Policy: policy, Nodes: nodes, Ranks: ranks, Duration: 300 * time.Second}
}

func mustRun(t *testing.T, cfg Config) Result {
	t.Helper()
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.StepErrors != 0 {
		t.Fatalf("%d messages or updates rejected, first: %v", res.StepErrors, res.FirstError)
	}
	return res
}

// Thesis §3.3, Fig. 3.4: loaded onto a single processor, the unconnected benchmark is spread
// by every stealing policy to the throughput of round robin and then stops migrating.
func TestUnconnectedFromOneNodeReachesRoundRobinAndStabilizes(t *testing.T) {
	rr := mustRun(t, unconnected(t, "none", RoundRobin, 1)).Throughput(200 * time.Second)
	for _, pol := range []string{"sras", "atsras", "flcras", "mpiios"} {
		res := mustRun(t, unconnected(t, pol, OnFirstNode, 1))
		got := res.Throughput(200 * time.Second)
		if got < 0.96*rr {
			t.Errorf("%s: throughput %.1f, round robin %.1f", pol, got, rr)
		}
		if res.LastMigration < 0 || res.LastMigration > 100*time.Second {
			t.Errorf("%s: last migration at %v: not stable", pol, res.LastMigration)
		}
		if res.Refused != 0 {
			t.Errorf("%s: %d migrations refused", pol, res.Refused)
		}
	}
}

func TestRunIsAFunctionOfTheSeed(t *testing.T) {
	a := mustRun(t, unconnected(t, "sras", OnFirstNode, 7))
	b := mustRun(t, unconnected(t, "sras", OnFirstNode, 7))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if a.Migrations == 0 {
		t.Fatal("nothing happened")
	}
}

func TestStaticPolicyNeverMoves(t *testing.T) {
	res := mustRun(t, unconnected(t, "none", OnFirstNode, 3))
	if res.Migrations != 0 || res.ByKind["steal_request"] == 0 {
		t.Fatalf("policy none: %d migrations, %d steal requests", res.Migrations, res.ByKind["steal_request"])
	}
}

func TestInvalidConfigIsAnError(t *testing.T) {
	good := unconnected(t, "sras", OnFirstNode, 1)
	for name, mutate := range map[string]func(*Config){
		"no duration":    func(c *Config) { c.Duration = 0 },
		"unknown policy": func(c *Config) { c.Policy = "nope" },
		"unknown node":   func(c *Config) { c.Ranks[0].Node = "x" },
		"zero cpus":      func(c *Config) { c.Nodes[1].CPUs = 0 },
		"bad edge":       func(c *Config) { c.Ranks[0].Peers = []Edge{{Rank: 99}} },
	} {
		cfg := good
		cfg.Nodes = append([]NodeSpec(nil), good.Nodes...)
		cfg.Ranks = append([]RankSpec(nil), good.Ranks...)
		mutate(&cfg)
		if _, err := Run(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
