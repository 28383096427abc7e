package iosbridge

import (
	"fmt"
	"math"
	"time"
)

// Stability configures the guard NewNode puts around every policy. The thesis reports that
// S-RAS and ATS-RAS "did not stabilize" on some topologies and that mis-tuned FLC-RAS
// cutoffs leave actors migrating "between similar theaters" (§2.2.1.3, §3); migration of an
// MPI rank costs a checkpoint and a communicator rebuild, so mpios refuses such churn
// regardless of the policy.
type Stability struct {
	// Cooldown: a rank that arrived (migrated) less than Cooldown ago is not moved again,
	// except by an exchange after a sixth of it (exchangeCooldownDivisor). A rank that
	// started fresh on its node has no arrival (RankProfile.LastMigration zero) and may move
	// at once.
	Cooldown time.Duration `msgpack:"cooldown"`
	// The hysteresis: a rank using u CPUs here moves only if
	//
	//	Remote.FreeCPUs − Local.FreeCPUs ≥ u + m,  m = Margin + RelativeMargin × min(C_L, C_R)
	//
	// with C_L, C_R the nodes' EffectiveCPUs. After such a move the reverse move would need
	// the difference to be ≥ u + m the other way, but it is now at most u − m, so two nodes
	// can never hand a rank back and forth (m is the same both ways). m also absorbs sampling
	// noise between "similar" nodes; that noise is a share of a node's CPUs, so the margin
	// scales with the smaller node: a fixed quarter CPU, right for 2-CPU nodes, would keep a
	// joining half-CPU node (at most 0.5 free) from ever attracting a rank of 0.25 CPU or
	// more from a fully used half-CPU node.
	Margin         float64 `msgpack:"margin"`          // CPUs
	RelativeMargin float64 `msgpack:"relative_margin"` // share of the smaller node's CPUs
	// MinGain: the policy's gain must exceed it ("no migration when nothing is gained").
	MinGain float64 `msgpack:"min_gain"`
}

// DefaultRelativeMargin is an eighth of the smaller node's CPUs: a quarter CPU between
// 2-CPU nodes, 1/16 CPU between half-CPU ones.
const DefaultRelativeMargin = 0.125

// DefaultStability is a one-minute cooldown, a margin of DefaultRelativeMargin and strictly
// positive gain.
func DefaultStability() Stability {
	return Stability{Cooldown: time.Minute, RelativeMargin: DefaultRelativeMargin, MinGain: 0}
}

// exchangeCooldownDivisor: an arrived rank takes part in exchanges again after
// Cooldown/exchangeCooldownDivisor (10 s of the default minute). An exchange needs no
// cooldown against ping-pong: every one lowers the potential (exchange.go), so no sequence
// of them comes back, and the ordinary rules still wait the whole Cooldown. It needs the
// rank's profile to show where it is now (its CPU use changes with its neighbours' places),
// which takes a profile window, about 10 s. With the whole minute every exchange that
// involved a rank moved in the first spreading waited a minute for it, and each further one
// a minute more: on the sparse, tree and hypercube benchmarks of docs/SIMULATIONS.md
// ATS-RAS and FLC-RAS were still exchanging after 150 s of 300 in 15, 15 and 12 of 24 runs
// (seeds 1–12); with a sixth, in none, at about the same throughput.
const exchangeCooldownDivisor = 6

// exchangeCooldown is how long an arrived rank is kept out of exchanges.
func (s Stability) exchangeCooldown() time.Duration { return s.Cooldown / exchangeCooldownDivisor }

// margin is m of the hysteresis between nodes a and b.
func (s Stability) margin(a, b NodeProfile) float64 {
	return s.Margin + s.RelativeMargin*math.Min(a.EffectiveCPUs, b.EffectiveCPUs)
}

// Validate rejects negative or non-finite settings.
func (s Stability) Validate() error {
	if s.Cooldown < 0 || !finite(s.Margin) || s.Margin < 0 || !finite(s.RelativeMargin) || s.RelativeMargin < 0 || !finite(s.MinGain) {
		return fmt.Errorf("iosbridge: stability %+v: want cooldown >= 0, finite margins >= 0, finite min gain", s)
	}
	return nil
}

// Stabilize wraps p with the stability rules: it removes candidates in cooldown or failing
// the hysteresis test before p sees them, and vetoes decisions whose gain is not above
// MinGain or that name a rank p was not offered.
func Stabilize(p Policy, s Stability) Policy { return stable{inner: p, s: s} }

type stable struct {
	inner Policy
	s     Stability
}

// Name is the wrapped policy's name: stability is not a policy of its own.
func (st stable) Name() string { return st.inner.Name() }

// Protocol is the wrapped policy's.
func (st stable) Protocol() Protocol { return protocolOf(st.inner) }

// Decide filters candidates, delegates, then vetoes gainless or inconsistent decisions. An
// exchange request the ordinary rules decline goes to the exchange rules (exchange.go).
func (st stable) Decide(in DecisionInput) Decision {
	no := func(reason string) Decision { return Decision{Policy: st.inner.Name(), Reason: reason} }
	if err := in.Remote.Validate(); err != nil {
		return no(err.Error())
	}
	if in.Remote.Node == in.Local.Node {
		return no("steal request from this node itself")
	}
	exchange := in.Exchange
	in.Exchange = false // the ordinary rules price the free CPUs, as for any steal
	d, cands := st.decideOrdinary(in)
	if d.Migrate || !exchange {
		return d
	}
	in.Exchange = true
	return st.decideExchange(in, cands, d.Reason)
}

// decideOrdinary is the guard of a plain steal; cands are the ranks out of the exchanges'
// cooldown (exchangeCooldownDivisor).
func (st stable) decideOrdinary(in DecisionInput) (Decision, []RankProfile) {
	no := func(reason string) Decision { return Decision{Policy: st.inner.Name(), Reason: reason} }
	var kept, cands []RankProfile
	var cooling, flip int
	diff := in.Remote.FreeCPUs() - in.Local.FreeCPUs()
	margin := st.s.margin(in.Local, in.Remote)
	ro, _ := st.inner.(rankOrderedPolicy)
	ordered := ro != nil && ro.rankOrdered(in) // moves up a strict order cannot flip back
	for _, r := range in.Ranks {
		if r.LastMigration.IsZero() || in.Now.Sub(r.LastMigration) >= st.s.exchangeCooldown() {
			cands = append(cands, r)
		}
		if !r.LastMigration.IsZero() && in.Now.Sub(r.LastMigration) < st.s.Cooldown {
			cooling++
			continue
		}
		if !ordered && diff < r.cpuUse(in.Local)+margin {
			flip++
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return no(fmt.Sprintf("stability: %d candidate(s): %d in cooldown, %d within hysteresis (free CPUs remote-local = %.3f, margin %.3f)", len(in.Ranks), cooling, flip, diff, margin)), cands
	}
	if in.Remote.full() {
		return no(fmt.Sprintf("stability: no free slot at %s (%d ranks, %d slots)", in.Remote.Node, len(in.Remote.Ranks), in.Remote.Slots)), cands
	}
	in.Ranks = kept
	d := st.inner.Decide(in)
	if !d.Migrate {
		return d, cands
	}
	if !finite(d.Gain) || d.Gain <= st.s.MinGain {
		return no(fmt.Sprintf("stability: gain %.4g not above %.4g (%s)", d.Gain, st.s.MinGain, d.Reason)), cands
	}
	for _, r := range kept {
		if r.ID() == d.Rank {
			d.Swap = RankID{} // a swap is the exchange rules' to decide
			return d, cands
		}
	}
	return no(fmt.Sprintf("stability: policy chose %s, which was not a candidate", d.Rank)), cands
}
