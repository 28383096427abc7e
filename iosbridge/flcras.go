package iosbridge

import (
	"fmt"
	"math"
)

// FLCCutoffs are the two cutoffs of one resource's membership functions (thesis table 2.3):
// at or below TBad the gain is definitely bad, at or above TGood definitely good.
type FLCCutoffs struct {
	TBad  float64 `msgpack:"t_bad"`
	TGood float64 `msgpack:"t_good"`
}

// Good is good(g_r) of table 2.3: 0 below t_bad, (g−t_bad)/(t_good−t_bad) between the
// cutoffs, 1 above t_good. The table leaves g exactly at a cutoff open; the linear piece is
// continuous there, so it is used (giving 0 and 1).
func (c FLCCutoffs) Good(g float64) float64 {
	switch {
	case g <= c.TBad:
		return 0
	case g >= c.TGood:
		return 1
	}
	return (g - c.TBad) / (c.TGood - c.TBad)
}

// Bad is bad(g_r) = 1 − good(g_r) (table 2.3).
func (c FLCCutoffs) Bad(g float64) float64 { return 1 - c.Good(g) }

func (c FLCCutoffs) validate(what string) error {
	if !finite(c.TBad) || !finite(c.TGood) || c.TGood <= c.TBad {
		return fmt.Errorf("iosbridge: flcras: %s cutoffs bad=%v good=%v: want finite bad < good", what, c.TBad, c.TGood)
	}
	return nil
}

// FLCRASConfig holds the designer-tuned cutoffs ("currently, these values are tuned by the
// application designer", §2.2.1.3) and the desirability threshold.
type FLCRASConfig struct {
	// Computation cutoffs are in percentage points of CPU (g_p of table 2.2).
	Computation FLCCutoffs `msgpack:"computation"`
	// Communication cutoffs are in bytes per profile window (g_c of table 2.2), or, with
	// RelativeCommunication, in shares of the bytes the rank sent in the window: g_c is then
	// divided by the rank's traffic, so that −1 means everything it sends starts crossing
	// nodes and +1 that everything becomes node-local, whatever the application's message
	// sizes and speed.
	Communication         FLCCutoffs `msgpack:"communication"`
	RelativeCommunication bool       `msgpack:"relative_communication,omitempty"`
	// Threshold is the minimum desirability to migrate; the thesis uses 0.5.
	Threshold float64 `msgpack:"threshold"`
}

// DefaultFLCRASConfig uses the cutoffs of figure 2.3 (bad −2.5, good 2.5) for computation,
// in percentage points, and relative communication cutoffs of ±2 (twice the rank's own
// traffic), threshold 0.5. Bytes per window are application-specific, as the thesis warns
// ("these values are tuned by the application designer"); as shares of the rank's traffic
// g_c lies in [−1, 1] for every application, and ±2 keeps it from being definitely bad on
// its own: a rank whose neighbours are all local (g_c = −1, good .25) still leaves for an
// idle node (rules 3, 4: (.25+1)/2 > .5), and between busy nodes, where g_p is about 0,
// rule 2 moves it exactly when g_c > 0. Absolute cutoffs in bytes (RelativeCommunication
// false) remain for designers who tune them.
func DefaultFLCRASConfig() FLCRASConfig {
	return FLCRASConfig{
		Computation:           FLCCutoffs{TBad: -2.5, TGood: 2.5},
		Communication:         FLCCutoffs{TBad: -2, TGood: 2},
		RelativeCommunication: true,
		Threshold:             0.5,
	}
}

// FLCRASRule identifies which Sugeno rule fired (1..4 in the thesis' order).
type FLCRASRule int

// FLCRASEvaluate applies the membership functions and the four Sugeno rules of §2.2.1.3 to
// one pair of gains and returns the desirability (0 = definitely do not move, 1 = definitely
// move) and the rule used:
//
//  1. if c_bad  and p_bad  then 0
//  2. if c_good and p_bad  then (c_good+p_good)/2
//  3. if c_bad  and p_good then (c_good+p_good)/2
//  4. if c_good and p_good then 1
//
// "and" is minimum; "whichever rule satisfies the conditional the most is used". Ties go to
// the earlier rule, i.e. the more conservative output (rules are listed least to most
// desirable), which favours stability.
func FLCRASEvaluate(cfg FLCRASConfig, gc, gp float64) (float64, FLCRASRule) {
	cg, pg := cfg.Communication.Good(gc), cfg.Computation.Good(gp)
	cb, pb := cfg.Communication.Bad(gc), cfg.Computation.Bad(gp)
	mid := (cg + pg) / 2
	strength := [4]float64{math.Min(cb, pb), math.Min(cg, pb), math.Min(cb, pg), math.Min(cg, pg)}
	output := [4]float64{0, mid, mid, 1}
	best := 0
	for i := 1; i < 4; i++ {
		if strength[i] > strength[best] {
			best = i
		}
	}
	return output[best], FLCRASRule(best + 1)
}

// FLCRASGains computes the gain measures of table 2.2 for moving r from local to remote:
//
//	g_p = p_f(A) − p_l(A)  with p_l = r's CPU use as a percentage of local capacity and
//	                       p_f = percentage of remote CPU available;
//	g_c = c_f(A) − c_l(A)  with c_t = bytes r sent to ranks at theater t.
//
// Table 2.2 prints g_c = c_l − c_f, but its own notation calls g_c "the benefit in
// communication gained by migrating", and the prose says weighting communication heavily
// makes "all the actors converge to a single processor": only c_f − c_l (traffic that
// becomes node-local minus traffic that becomes remote) behaves so. We implement that and
// record the deviation here.
func FLCRASGains(r RankProfile, local, remote NodeProfile) (gc, gp float64) {
	pl := 0.0
	if local.EffectiveCPUs > 0 {
		pl = 100 * r.cpuUse(local) / local.EffectiveCPUs
	}
	pf := 100 * remote.Availability
	cl, _ := r.commTo(local)
	cf, _ := r.commTo(remote)
	return float64(cf - cl), pf - pl
}

// FLCRAS is Fuzzy Logic Controlled RAS (thesis §2.2.1.3, tables 2.2 and 2.3): it rates every
// candidate and gives "the most desirable reconfiguration over a certain threshold".
type FLCRAS struct{ cfg FLCRASConfig }

// NewFLCRAS validates cfg and returns the policy.
func NewFLCRAS(cfg FLCRASConfig) (FLCRAS, error) {
	if err := cfg.Computation.validate("computation"); err != nil {
		return FLCRAS{}, err
	}
	if err := cfg.Communication.validate("communication"); err != nil {
		return FLCRAS{}, err
	}
	if !finite(cfg.Threshold) || cfg.Threshold < 0 || cfg.Threshold >= 1 {
		return FLCRAS{}, fmt.Errorf("iosbridge: flcras: threshold %v not in [0,1)", cfg.Threshold)
	}
	return FLCRAS{cfg: cfg}, nil
}

// Name implements Policy.
func (FLCRAS) Name() string { return PolicyFLCRAS }

// Protocol implements ProtocolPolicy: RAS stealing plus exchanges between busy nodes.
func (FLCRAS) Protocol() Protocol { return Protocol{Steal: ScopeAnywhere, Exchange: true} }

// Decide implements Policy. Decision.Gain is desirability − threshold, so it is positive
// exactly when the thesis would migrate ("output > 0.5").
func (f FLCRAS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: PolicyFLCRAS, Reason: fmt.Sprintf("no rank above desirability %.2f", f.cfg.Threshold)}
	best := f.cfg.Threshold
	for _, r := range in.Ranks {
		gc, gp := FLCRASGains(r, in.Local, in.Remote)
		if f.cfg.RelativeCommunication {
			gc = relativeGain(gc, r)
		}
		if in.Exchange && in.Remote.EffectiveCPUs > 0 && in.Local.EffectiveCPUs > 0 {
			// p_f on a busy remote: the share of its CPUs the rank would get there.
			gp = math.Max(gp, 100*rankShare(in.Remote, 1)/in.Remote.EffectiveCPUs-100*r.cpuUse(in.Local)/in.Local.EffectiveCPUs)
		}
		out, rule := FLCRASEvaluate(f.cfg, gc, gp)
		if out <= best {
			continue
		}
		best = out
		d.Migrate, d.Rank, d.Gain = true, r.ID(), out-f.cfg.Threshold
		d.Reason = fmt.Sprintf("g_c=%.4g g_p=%.4g: rule %d gives desirability %.3f > %.2f for %s to %s", gc, gp, rule, out, f.cfg.Threshold, r.ID(), in.Remote.Node)
	}
	return d
}

// relativeGain is g_c over the bytes r sent to other ranks in the window (0 if none).
func relativeGain(gc float64, r RankProfile) float64 {
	if t := totalBytes(r); t > 0 {
		return gc / float64(t)
	}
	return 0
}
