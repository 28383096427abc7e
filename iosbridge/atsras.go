package iosbridge

import (
	"fmt"
	"math"
)

// ATSRASLocalRate is eq. 2.2 of Desell's thesis: M(L,A) = P(A)/T(A), the messages per second
// actor A processes at the local theater, with P(A) messages processed since the profile
// reset and T(A) seconds since that reset. ok is false when T(A) is 0 (undefined).
func ATSRASLocalRate(p, t float64) (m float64, ok bool) {
	if t <= 0 {
		return 0, false
	}
	return p / t, true
}

// ATSRASRemoteRate is eq. 2.3 exactly as printed in the thesis:
//
//	M(R,A) = F(A)/P(A) + T(A) / (F(A) * (S(A,L) − S(A,R)))
//
// with F(A) the average FLOPs per message, S(A,t) the messages A sent to theater t. The
// printed formula is kept verbatim (the seed is the specification); ok is false wherever it
// divides by zero: P(A)=0, F(A)=0 or S(A,L)=S(A,R).
func ATSRASRemoteRate(f, p, t, sl, sr float64) (m float64, ok bool) {
	den := f * (sl - sr)
	if p == 0 || den == 0 {
		return 0, false
	}
	return f/p + t/den, true
}

// ATSRASGain is eq. 2.1 as printed: G(L,R,A) = M(L,A) − M(R,A).
func ATSRASGain(ml, mr float64) float64 { return ml - mr }

// ATSRAS is Application Topology Sensitive RAS (thesis §2.2.1.2, eq. 2.1–2.3). For each
// candidate rank it evaluates the printed equations with:
//
//	P(A) = RankProfile.MessagesProcessed, T(A) = RankProfile.Window (seconds),
//	F(A) = RankProfile.FlopsPerMessage,
//	S(A,L), S(A,R) = messages the rank sent to peer ranks hosted on Local / Remote.
//
// Sign: eq. 2.1 as printed is local minus remote, while the prose says the module "chooses
// the actor with the best estimated increase in processed messages per second" and "if the
// actor will process messages faster remote, it is migrated". So the rank migrates when
// M(R,A) > M(L,A), i.e. G < 0; Decision.Gain is that increase, −G, so that "positive gain
// means move" holds for every policy. Ranks for which an equation is undefined are skipped.
type ATSRAS struct{}

// Name implements Policy.
func (ATSRAS) Name() string { return PolicyATSRAS }

// Decide implements Policy.
func (ATSRAS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: PolicyATSRAS, Reason: "no rank would process messages faster remotely"}
	best := math.Inf(-1)
	for _, r := range in.Ranks {
		_, sl := r.commTo(in.Local)
		_, sr := r.commTo(in.Remote)
		p, t, f := float64(r.MessagesProcessed), r.Window.Seconds(), r.FlopsPerMessage
		ml, ok1 := ATSRASLocalRate(p, t)
		mr, ok2 := ATSRASRemoteRate(f, p, t, float64(sl), float64(sr))
		if !ok1 || !ok2 {
			continue
		}
		g := ATSRASGain(ml, mr)
		inc := -g
		if !finite(inc) || inc <= 0 || inc <= best {
			continue
		}
		best = inc
		d.Migrate, d.Rank, d.Gain = true, r.ID(), inc
		d.Reason = fmt.Sprintf("eq.2.1 G=M(L)-M(R)=%.4g-%.4g=%.4g: %s processes %.4g msg/s more at %s", ml, mr, g, r.ID(), inc, in.Remote.Node)
	}
	return d
}
