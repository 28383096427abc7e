package iosbridge

import (
	"math"
	"strings"
	"testing"
	"time"
)

type stubPolicy struct{ d Decision }

func (s stubPolicy) Name() string                  { return "stub" }
func (s stubPolicy) Decide(DecisionInput) Decision { return s.d }

func TestCooldownPreventsImmediateRemigration(t *testing.T) {
	p := Stabilize(mpiiosCPUOnly(t), Stability{Cooldown: time.Minute, Margin: 0.25})
	r := rankProfile("j", 0, 0.5)
	r.LastMigration = t0.Add(-10 * time.Second) // arrived 10 s ago, cooldown 60 s
	in := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2, 3)...), Remote: node("R", 2, 1), Ranks: []RankProfile{r}, Now: t0}
	if d := p.Decide(in); d.Migrate {
		t.Fatalf("rank in cooldown moved: %+v", d)
	}
	in.Now = t0.Add(51 * time.Second) // 61 s after arrival
	if d := p.Decide(in); !d.Migrate {
		t.Fatalf("cooldown over, should move: %+v", d)
	}
}

func TestNoPingPongBetweenSimilarNodes(t *testing.T) {
	// Two 2-CPU nodes, one rank using a whole CPU on L, R idle. Bare FLC-RAS wants to move
	// it (g_p = 100−50 = 50, g_c = 0 → desirability .75) — and, once moved, to move it back:
	// the instability the thesis reports for mis-tuned cutoffs.
	bare := mustPolicy(t, PolicyFLCRAS)
	r := rankProfile("j", 0, 1)
	there := DecisionInput{Local: node("L", 2, 0.5, ids("j", 0)...), Remote: node("R", 2, 1), Ranks: []RankProfile{r}, Now: t0}
	back := DecisionInput{Local: node("R", 2, 0.5, ids("j", 0)...), Remote: node("L", 2, 1), Ranks: []RankProfile{r}, Now: t0}
	if !bare.Decide(there).Migrate || !bare.Decide(back).Migrate {
		t.Fatal("precondition: bare FLC-RAS ping-pongs")
	}
	// Hysteresis: free(R) − free(L) = 2 − 1 = 1 < u + margin = 1.25 → stay.
	st := Stabilize(bare, DefaultStability())
	if d := st.Decide(there); d.Migrate {
		t.Fatalf("similar nodes: %+v", d)
	}
}

func TestHysteresisNeverAllowsTheReverseMove(t *testing.T) {
	// Property: if the guard lets a rank using u go L→R, the state after the move never lets
	// it go back R→L (free difference drops from ≥ u+m to ≤ u−m).
	rng := newRand(7)
	st := Stabilize(stubPolicy{Decision{Migrate: true, Rank: RankID{"j", 0}, Gain: 1}}, Stability{Margin: 0.25})
	for i := 0; i < 2000; i++ {
		cpus := 1 + rng.IntN(8)
		u := math.Min(1, 0.1+rng.Float64())
		fl := rng.Float64() * float64(cpus)
		fr := rng.Float64() * float64(cpus)
		r := rankProfile("j", 0, u)
		in := DecisionInput{Local: node("L", cpus, fl/float64(cpus), ids("j", 0)...), Remote: node("R", cpus, fr/float64(cpus)), Ranks: []RankProfile{r}}
		if !st.Decide(in).Migrate {
			continue
		}
		// After the move R hosts the rank and loses u free CPUs; L regains u.
		fl2, fr2 := math.Min(float64(cpus), fl+u), math.Max(0, fr-u)
		rev := DecisionInput{Local: node("R", cpus, fr2/float64(cpus), ids("j", 0)...), Remote: node("L", cpus, fl2/float64(cpus)), Ranks: []RankProfile{r}}
		if d := st.Decide(rev); d.Migrate {
			t.Fatalf("ping-pong: cpus=%d u=%.3f free L=%.3f R=%.3f", cpus, u, fl, fr)
		}
	}
}

func TestNoMigrationWhenNothingGained(t *testing.T) {
	in := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2, 3)...), Remote: node("R", 2, 1), Ranks: []RankProfile{rankProfile("j", 0, .5)}, Now: t0}
	for _, g := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		st := Stabilize(stubPolicy{Decision{Migrate: true, Rank: RankID{"j", 0}, Gain: g}}, DefaultStability())
		if d := st.Decide(in); d.Migrate {
			t.Errorf("gain %v: %+v", g, d)
		}
	}
	st := Stabilize(stubPolicy{Decision{Migrate: true, Rank: RankID{"j", 9}, Gain: 1}}, DefaultStability())
	if d := st.Decide(in); d.Migrate {
		t.Errorf("rank not offered was given: %+v", d)
	}
	in.Remote.Node = "L"
	st = Stabilize(stubPolicy{Decision{Migrate: true, Rank: RankID{"j", 0}, Gain: 1}}, DefaultStability())
	if d := st.Decide(in); d.Migrate {
		t.Errorf("gave a rank to itself: %+v", d)
	}
}

// MPI/IOS heat experiment: throughput rises as nodes join. A node with half a CPU joins
// while a half-CPU node runs two ranks (a quarter CPU each, measured a little above) at full
// use; moving one pays (each rank then has the half CPU of its node), and the guard lets it,
// as a fixed quarter-CPU margin did not.
func TestHalfCPUJoiningNodeAttractsWork(t *testing.T) {
	half := func(name string, avail float64, ranks ...RankID) NodeProfile {
		p := node(name, 1, avail, ranks...)
		p.EffectiveCPUs = 0.5
		return p
	}
	var ranks []RankProfile
	for r := 0; r < 2; r++ {
		rp := rankProfile("j", r, 0.26)
		rp.RemainingIterations = 2000 // a long job: the move pays
		ranks = append(ranks, rp)
	}
	// The joining node's own agent takes a little of its CPU: 0.475 of 0.5 free.
	in := DecisionInput{Local: half("L", 0.02, ids("j", 0, 1)...), Remote: half("R", 0.95), Ranks: ranks, Now: t0}
	d := Stabilize(mustPolicy(t, PolicyMPIIOS), DefaultStability()).Decide(in)
	if !d.Migrate {
		t.Fatalf("the joining half-CPU node attracts no work: %+v", d)
	}
	if d := Stabilize(mustPolicy(t, PolicyMPIIOS), Stability{Margin: 0.25}).Decide(in); d.Migrate || !strings.Contains(d.Reason, "within hysteresis") {
		t.Fatalf("precondition: a fixed quarter-CPU margin blocks it: %+v", d)
	}
	// Once it moved, neither node gives it back: L has one rank at 0.25 CPU (0.25 free),
	// R one (0.225 free).
	back := DecisionInput{Local: half("R", 0.45, ids("j", 0)...), Remote: half("L", 0.5, ids("j", 1)...), Ranks: ranks[:1], Now: t0}
	if d := Stabilize(mustPolicy(t, PolicyMPIIOS), DefaultStability()).Decide(back); d.Migrate {
		t.Fatalf("moved back: %+v", d)
	}
}

// The no-ping-pong property of TestHysteresisNeverAllowsTheReverseMove holds for the default
// margin, relative to node size, between nodes of different and fractional sizes.
func TestRelativeMarginNeverAllowsTheReverseMove(t *testing.T) {
	rng := newRand(11)
	st := Stabilize(stubPolicy{Decision{Migrate: true, Rank: RankID{"j", 0}, Gain: 1}}, DefaultStability())
	moves := 0
	for i := 0; i < 5000; i++ {
		capL, capR := 0.25+rng.Float64()*8, 0.25+rng.Float64()*8
		u := math.Min(1, 0.05+rng.Float64())
		fl, fr := rng.Float64()*capL, rng.Float64()*capR
		mk := func(name string, c, free float64, ranks ...RankID) NodeProfile {
			return NodeProfile{Node: name, CPUs: int(math.Ceil(c)), EffectiveCPUs: c, Availability: free / c, Ranks: ranks}
		}
		r := rankProfile("j", 0, u)
		in := DecisionInput{Local: mk("L", capL, fl, ids("j", 0)...), Remote: mk("R", capR, fr), Ranks: []RankProfile{r}}
		if !st.Decide(in).Migrate {
			continue
		}
		moves++
		fl2, fr2 := math.Min(capL, fl+u), math.Max(0, fr-u)
		rev := DecisionInput{Local: mk("R", capR, fr2, ids("j", 0)...), Remote: mk("L", capL, fl2), Ranks: []RankProfile{r}}
		if d := st.Decide(rev); d.Migrate {
			t.Fatalf("ping-pong: capacities %.3f/%.3f u=%.3f free L=%.3f R=%.3f", capL, capR, u, fl, fr)
		}
	}
	if moves == 0 {
		t.Fatal("no move allowed at all: the property was not exercised")
	}
}
