package iosbridge

import (
	"fmt"
	"time"
)

// Stability configures the guard NewNode puts around every policy. The thesis reports that
// S-RAS and ATS-RAS "did not stabilize" on some topologies and that mis-tuned FLC-RAS
// cutoffs leave actors migrating "between similar theaters" (§2.2.1.3, §3); migration of an
// MPI rank costs a checkpoint and a communicator rebuild, so mpios refuses such churn
// regardless of the policy.
type Stability struct {
	// Cooldown: a rank that arrived less than Cooldown ago is not moved again.
	Cooldown time.Duration `msgpack:"cooldown"`
	// Margin (in CPUs) is the hysteresis: a rank using u CPUs here moves only if
	// Remote.FreeCPUs − Local.FreeCPUs ≥ u + Margin. After such a move the reverse move
	// would need the difference to be ≥ u + Margin the other way, but it is now at most
	// u − Margin, so two nodes can never hand a rank back and forth. Margin also absorbs
	// sampling noise between "similar" nodes.
	Margin float64 `msgpack:"margin"`
	// MinGain: the policy's gain must exceed it ("no migration when nothing is gained").
	MinGain float64 `msgpack:"min_gain"`
}

// DefaultStability is a one-minute cooldown, a quarter-CPU margin and strictly positive gain.
func DefaultStability() Stability {
	return Stability{Cooldown: time.Minute, Margin: 0.25, MinGain: 0}
}

// Validate rejects negative or non-finite settings.
func (s Stability) Validate() error {
	if s.Cooldown < 0 || !finite(s.Margin) || s.Margin < 0 || !finite(s.MinGain) {
		return fmt.Errorf("iosbridge: stability %+v: want cooldown >= 0, finite margin >= 0, finite min gain", s)
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

// Decide filters candidates, delegates, then vetoes gainless or inconsistent decisions.
func (st stable) Decide(in DecisionInput) Decision {
	no := func(reason string) Decision { return Decision{Policy: st.inner.Name(), Reason: reason} }
	if err := in.Remote.Validate(); err != nil {
		return no(err.Error())
	}
	if in.Remote.Node == in.Local.Node {
		return no("steal request from this node itself")
	}
	var kept []RankProfile
	var cooling, flip int
	diff := in.Remote.FreeCPUs() - in.Local.FreeCPUs()
	for _, r := range in.Ranks {
		if !r.LastMigration.IsZero() && in.Now.Sub(r.LastMigration) < st.s.Cooldown {
			cooling++
			continue
		}
		if diff < r.cpuUse(in.Local)+st.s.Margin {
			flip++
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return no(fmt.Sprintf("stability: %d candidate(s): %d in cooldown, %d within hysteresis (free CPUs remote-local = %.3f)", len(in.Ranks), cooling, flip, diff))
	}
	in.Ranks = kept
	d := st.inner.Decide(in)
	if !d.Migrate {
		return d
	}
	if !finite(d.Gain) || d.Gain <= st.s.MinGain {
		return no(fmt.Sprintf("stability: gain %.4g not above %.4g (%s)", d.Gain, st.s.MinGain, d.Reason))
	}
	for _, r := range kept {
		if r.ID() == d.Rank {
			return d
		}
	}
	return no(fmt.Sprintf("stability: policy chose %s, which was not a candidate", d.Rank))
}
