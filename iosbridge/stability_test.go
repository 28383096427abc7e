package iosbridge

import (
	"math"
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
