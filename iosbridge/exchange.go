package iosbridge

import (
	"fmt"
	"math"
	"time"
)

// Exchanges: communication-driven moves between busy nodes.
//
// The RAS protocol steals only for idle CPUs, and the stability guard moves a rank only
// towards more free CPU. Once every node is busy nothing moves, so actors are never regrouped
// by communication, while in the thesis ATS-RAS and FLC-RAS decide by a gain that includes
// the communication with the actors at the target (eq. 2.3, table 2.2): an actor goes to the
// node it talks to most as long as the gain is positive. A node whose policy has
// Protocol.Exchange (atsras, flcras, ars) therefore also sends steal requests while busy if
// its ranks talk to ranks on other nodes, marked Exchange, and offers its worst-placed rank
// (the one sending most to other nodes relative to its own). A receiver that would not give
// a rank under the ordinary guard then considers, for ranks whose policy has Exchange:
//
//   - a single move, judged by the policy with the CPU a rank gets on a saturated node (its
//     fair share, rankShare) instead of the free CPU, allowed only when the target ends no
//     denser in ranks per CPU than the giver: (k_R+1)/C_R ≤ (k_L−1)/C_L;
//   - a swap with the offered rank, which leaves both nodes' rank counts alone, allowed when
//     it cuts the bytes crossing nodes by more than an eighth of the pair's traffic and does
//     not widen the free-CPU difference beyond max(|d|, m/2) (m the guard's margin).
//
// No ping-pong: a single move strictly lowers Σ k²/C over the nodes (the reverse would need
// the target denser than the giver before the move), a swap leaves it alone and strictly
// lowers the traffic crossing nodes (its reverse would have the opposite, negative gain), so
// with steady traffic no sequence of exchanges can return to a placement it left. Exchanged
// ranks are in cooldown like any migrated rank.

// exchangeDivisor: a swap must cut at least 1/exchangeDivisor of the pair's traffic, so that
// sampling noise in the per-window byte counts cannot make a swap and its reverse both pay.
const exchangeDivisor = 8

// rankShare is the CPUs a rank gets on node p among len(p.Ranks)+extra ranks sharing its
// CPUs fairly, at most one core: on a saturated node it is what an arriving rank would get,
// which the free CPUs (zero there) do not say.
func rankShare(p NodeProfile, extra int) float64 {
	k := len(p.Ranks) + extra
	if k <= 0 {
		k = 1
	}
	return math.Min(1, p.EffectiveCPUs/float64(k))
}

// notDenser says whether moving one rank from l to r leaves r with no more ranks per CPU
// than l: (k_R+1)/C_R ≤ (k_L−1)/C_L.
func notDenser(l, r NodeProfile) bool {
	if l.EffectiveCPUs <= 0 || r.EffectiveCPUs <= 0 {
		return false
	}
	return float64(len(r.Ranks)+1)/r.EffectiveCPUs <= float64(len(l.Ranks)-1)/l.EffectiveCPUs
}

// bytesTo is what r sent to the ranks of its job hosted on p, leaving out except.
func bytesTo(r RankProfile, p NodeProfile, except RankID) int64 {
	var b int64
	for _, pc := range r.Peers {
		id := RankID{Job: r.Job, Rank: pc.Rank}
		if pc.Rank != r.Rank && id != except && p.Hosts(id) {
			b += pc.Bytes
		}
	}
	return b
}

// totalBytes is all r sent to other ranks.
func totalBytes(r RankProfile) int64 {
	var b int64
	for _, pc := range r.Peers {
		if pc.Rank != r.Rank {
			b += pc.Bytes
		}
	}
	return b
}

// SwapReduction is the bytes per window that stop crossing nodes when rank a (hosted on
// local) and rank b (hosted on remote) trade places:
//
//	w(a, R∖b) + w(b, L∖a) − w(a, L∖a) − w(b, R∖b)
//
// with w(x, N) the bytes x sent to the ranks of its job on N; a and b talking to each other
// cross the network before and after.
func SwapReduction(a, b RankProfile, local, remote NodeProfile) int64 {
	return bytesTo(a, remote, b.ID()) + bytesTo(b, local, a.ID()) - bytesTo(a, local, b.ID()) - bytesTo(b, remote, a.ID())
}

// misplacement is how much more r sends off node p than on it (bytes per window).
func misplacement(r RankProfile, p NodeProfile) int64 {
	home := bytesTo(r, p, RankID{})
	return totalBytes(r) - 2*home
}

// exchangeCandidate reports whether r's policy takes part in exchanges.
func (st stable) exchangeCandidate(r RankProfile) bool {
	if ex, ok := st.inner.(interface{ exchanges(RankProfile) bool }); ok {
		return ex.exchanges(r)
	}
	return protocolOf(st.inner).Exchange
}

// decideExchange is the guard's answer to an Exchange request that the ordinary rules
// declined; cands are the ranks out of cooldown.
func (st stable) decideExchange(in DecisionInput, cands []RankProfile, why string) Decision {
	no := func(reason string) Decision {
		return Decision{Policy: st.inner.Name(), Reason: why + "; exchange: " + reason}
	}
	diff := in.Remote.FreeCPUs() - in.Local.FreeCPUs()
	margin := st.s.margin(in.Local, in.Remote)
	var mine []RankProfile
	for _, r := range cands {
		if st.exchangeCandidate(r) {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return no("no candidate whose policy exchanges")
	}
	var singles []RankProfile
	if notDenser(in.Local, in.Remote) && !in.Remote.full() {
		// A node fully used that keeps at least a rank per CPU stays fully used after giving
		// one: no free CPU appears here that could call the rank back.
		crowded := in.Local.Availability <= DefaultSRASConfig().FullyUsedAvailability && float64(len(in.Local.Ranks)-1) >= in.Local.EffectiveCPUs
		for _, r := range mine {
			// Otherwise the relaxed hysteresis: after the move the free-CPU difference cannot
			// ask for the same rank back by the ordinary rule (it needs ≥ u + m the other way).
			if crowded || diff > r.cpuUse(in.Local)-margin {
				singles = append(singles, r)
			}
		}
	}
	if len(singles) > 0 {
		sub := in
		sub.Ranks = singles
		d := st.inner.Decide(sub)
		if d.Migrate && finite(d.Gain) && d.Gain > st.s.MinGain {
			for _, r := range singles {
				if r.ID() == d.Rank {
					d.Reason = fmt.Sprintf("exchange to a node no denser (%d ranks on %.3g CPUs here, %d on %.3g there): %s",
						len(in.Local.Ranks), in.Local.EffectiveCPUs, len(in.Remote.Ranks), in.Remote.EffectiveCPUs, d.Reason)
					return d
				}
			}
		}
	}
	b := in.Offer
	switch {
	case b == nil:
		return no("no single move pays and no rank offered for a swap")
	case !in.Remote.Hosts(b.ID()) || in.Local.Hosts(b.ID()):
		return no(fmt.Sprintf("offered %s is not on %s", b.ID(), in.Remote.Node))
	case !b.LastMigration.IsZero() && in.Now.Sub(b.LastMigration) < st.s.Cooldown:
		return no(fmt.Sprintf("offered %s is in cooldown", b.ID()))
	}
	ub := b.cpuUse(in.Remote)
	best := int64(0)
	d := Decision{Policy: st.inner.Name()}
	for _, a := range mine {
		if a.Job != b.Job {
			continue // only ranks of one job talk to each other
		}
		after := diff - 2*(a.cpuUse(in.Local)-ub)
		if math.Abs(after) > math.Max(math.Abs(diff), margin/2) {
			continue
		}
		red := SwapReduction(a, *b, in.Local, in.Remote)
		if red <= best || exchangeDivisor*red <= totalBytes(a)+totalBytes(*b) {
			continue
		}
		best = red
		d.Migrate, d.Rank, d.Swap = true, a.ID(), b.ID()
		d.Gain = float64(red)
		d.Reason = fmt.Sprintf("swap %s (here) with %s (at %s): %d bytes per window stop crossing nodes (of %d sent by the pair); free CPUs %s−here %.3f → %.3f",
			a.ID(), b.ID(), in.Remote.Node, red, totalBytes(a)+totalBytes(*b), in.Remote.Node, diff, after)
	}
	if !d.Migrate || !finite(d.Gain) || d.Gain <= st.s.MinGain {
		return no(fmt.Sprintf("no swap with %s cuts more than 1/%d of the pair's traffic within the CPU balance", b.ID(), exchangeDivisor))
	}
	return d
}

// exchangeOffer is the rank this node offers in an exchange request: out of cooldown, of a
// policy that exchanges, not given away, sending more off the node than on it; the most
// misplaced one. nil if none.
func (n *Node) exchangeOffer(now time.Time, eff NodeProfile) *RankProfile {
	var best *RankProfile
	var worst int64
	for _, r := range n.candidates() {
		if !r.LastMigration.IsZero() && now.Sub(r.LastMigration) < n.cfg.Stability.Cooldown {
			continue
		}
		if st, ok := n.policy.(stable); ok && !st.exchangeCandidate(r) {
			continue
		}
		if m := misplacement(r, eff); m > worst {
			worst = m
			c := r
			c.Node = n.cfg.ID
			best = &c
		}
	}
	return best
}

// crossTraffic says whether any local rank sends to ranks on other nodes.
func (n *Node) crossTraffic(eff NodeProfile) bool {
	for _, r := range n.ranks {
		if totalBytes(r) > bytesTo(r, eff, RankID{}) {
			return true
		}
	}
	return false
}
