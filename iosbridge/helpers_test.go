package iosbridge

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x105)) }

// fixedRand always returns the same index (clamped), to make "random" choices explicit.
type fixedRand struct{ i int }

func (f fixedRand) IntN(n int) int   { return min(f.i, n-1) }
func (f fixedRand) Float64() float64 { return 0 }

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s = %.12g, want %.12g", what, got, want)
	}
}

func ids(job string, ranks ...int) []RankID {
	out := make([]RankID, len(ranks))
	for i, r := range ranks {
		out[i] = RankID{Job: job, Rank: r}
	}
	return out
}

func node(name string, cpus int, avail float64, ranks ...RankID) NodeProfile {
	return NodeProfile{
		Node: name, CPUs: cpus, EffectiveCPUs: float64(cpus), Availability: avail,
		MemFreeBytes: 8 << 30, MemTotalBytes: 16 << 30, Ranks: ranks,
	}
}

func rankProfile(job string, rank int, cpu float64) RankProfile {
	return RankProfile{
		Job: job, Rank: rank, CPUUse: cpu, IterationTime: time.Second, RemainingIterations: 1000,
		StateBytes: 1 << 20, Window: 10 * time.Second,
	}
}

func mustNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = newRand(1)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustPolicy(t *testing.T, name string) Policy {
	t.Helper()
	p, err := PolicyByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
