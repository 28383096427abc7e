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
// (the one sending most to other nodes relative to its own) with that rank's worst-placed
// neighbour on the node (exchangePartner). A receiver that would not give
// a rank under the ordinary guard then considers, for ranks whose policy has Exchange:
//
//   - a single move, judged by the policy with the CPU a rank gets on a saturated node (its
//     fair share, rankShare) instead of the free CPU, allowed only when the target ends no
//     denser in ranks per CPU than the giver: (k_R+1)/C_R ≤ (k_L−1)/C_L;
//   - a swap with the offered rank, which leaves both nodes' rank counts alone, allowed when
//     it cuts the bytes crossing nodes by more than 1/exchangeDivisor of the pair's traffic
//     and leaves the free-CPU difference d within max(|d|, m) (m the guard's margin,
//     balanced);
//   - a three-way exchange with the offered rank and a relay added by a node that forwarded
//     the request (decideRotation, below);
//   - a pair swap: two of its ranks for the offered rank and its partner (decidePairSwap).
//
// An exchange needs no free slot (NodeProfile.Slots): every node gives as many ranks as it
// gets, and the job moves the ranks of one exchange as one joint move (Migration.Parties), in
// which pcmd admits an arriving rank in the slot of one that leaves at the same boundary. So
// the ranks of an exchange are of one job.
//
// No ping-pong: a single move strictly lowers Σ k²/C over the nodes (the reverse would need
// the target denser than the giver before the move), a swap, a three-way exchange or a pair
// swap leaves it alone and strictly lowers the traffic crossing nodes (its reverse would have
// the opposite, negative gain), so
// with steady traffic no sequence of exchanges can return to a placement it left. So an
// arrived rank waits only a sixth of the cooldown before its next exchange
// (exchangeCooldownDivisor), and the whole cooldown before an ordinary move.

// exchangeDivisor: a swap must cut more than 1/exchangeDivisor of the pair's traffic, so that
// sampling noise in the per-window byte counts (up to that share of a rank's traffic) cannot
// make a swap and its reverse both pay. An eighth kept an actor of the hypercube (five
// links) from trading a single link, a tenth of its traffic: the exchanges stopped with half
// the links crossing nodes instead of the least possible 40%.
const exchangeDivisor = 16

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

// policyName is the name of the policy that governs r (its job's, under PerRank): the
// policy an exchange of r is decided and reported for.
func (st stable) policyName(r RankProfile) string {
	if pr, ok := st.inner.(perRank); ok {
		return pr.nameOf(r)
	}
	return st.inner.Name()
}

// rankPolicy is the name of the policy that governs local rank id.
func (n *Node) rankPolicy(id RankID) string {
	st, ok := n.policy.(stable)
	if !ok {
		return n.policy.Name()
	}
	for _, r := range n.ranks {
		if r.ID() == id {
			return st.policyName(r)
		}
	}
	return st.inner.Name()
}

// exchangeCandidate reports whether r's policy takes part in exchanges.
func (st stable) exchangeCandidate(r RankProfile) bool {
	if ex, ok := st.inner.(interface{ exchanges(RankProfile) bool }); ok {
		return ex.exchanges(r)
	}
	return protocolOf(st.inner).Exchange
}

// decideExchange is the guard's answer to an Exchange request that the ordinary rules
// declined; cands are the ranks out of the exchanges' cooldown.
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
	case !b.LastMigration.IsZero() && in.Now.Sub(b.LastMigration) < st.s.exchangeCooldown():
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
		if !balanced(diff, after, margin) {
			continue
		}
		red := SwapReduction(a, *b, in.Local, in.Remote)
		if red <= best || exchangeDivisor*red <= totalBytes(a)+totalBytes(*b) {
			continue
		}
		best = red
		d.Migrate, d.Rank, d.Swap, d.Policy = true, a.ID(), b.ID(), st.policyName(a)
		d.Gain = float64(red)
		d.Reason = fmt.Sprintf("swap %s (here) with %s (at %s): %d bytes per window stop crossing nodes (of %d sent by the pair); free CPUs %s−here %.3f → %.3f",
			a.ID(), b.ID(), in.Remote.Node, red, totalBytes(a)+totalBytes(*b), in.Remote.Node, diff, after)
	}
	if d.Migrate && finite(d.Gain) && d.Gain > st.s.MinGain {
		return d
	}
	if d := st.decideRotation(in, mine); d.Migrate {
		return d
	}
	if d := st.decidePairSwap(in, mine, diff, margin); d.Migrate {
		return d
	}
	return no(fmt.Sprintf("no swap with %s cuts more than 1/%d of the pair's traffic within the CPU balance", b.ID(), exchangeDivisor))
}

// Three-way exchanges. Pairwise swaps stop where a rank's neighbours sit on two other nodes:
// in a chain split as L: …a…, R: …b…, M: …c… no swap of two ranks cuts the halos, while the
// rotation a → R, b → M, c → L does. Such a rotation is "the gain for the group" of three
// theaters, and it keeps the potential: every node gives one rank and gets one, so Σ k²/C
// is unchanged, and it is carried out only if it strictly cuts the traffic crossing nodes
// (by more than 1/exchangeDivisor of the three ranks' traffic, as a swap), so the reverse
// rotation, which would add that traffic back, is refused like a reversed swap.
//
// The request needs no new round: L's exchange request (offering a) that R declines is
// forwarded by R with a relay, the rank b that R would give for a (relayFor), and R's
// profile; R holds b for StealTimeout. The node M that then finds a c for which the
// rotation pays asks R to send b to it (KindRelayAccept); once R confirms (KindRelayReady)
// M promises c to L in a steal accept naming R as where a goes (Message.SwapTo). Like every exchange it is all or nothing:
// R confirms its hold before M answers L, L alone commits, and the job moves the three ranks
// in one joint move (exchange_commit.go).

// RotationReduction is the bytes per window that stop crossing nodes when a (hosted on l)
// moves to r, b (on r) to m and c (on m) to l: the bytes the three ranks send that cross
// before and not after, minus those that cross after and not before, counting both
// directions of every changed link as its sender's count (the application's traffic is
// taken as symmetric, as for SwapReduction). Peers on other nodes than l, r and m cross
// before and after. For a swap (a rotation of two) it is twice SwapReduction.
func RotationReduction(a, b, c RankProfile, l, r, m NodeProfile) int64 {
	return cycleReduction([]RankProfile{a, b, c}, []NodeProfile{l, r, m})
}

// cycleReduction is RotationReduction for the cycle ranks[i]: nodes[i] → nodes[i+1].
func cycleReduction(ranks []RankProfile, nodes []NodeProfile) int64 {
	to := make([]NodeProfile, len(nodes))
	for i := range nodes {
		to[i] = nodes[(i+1)%len(nodes)]
	}
	return movesReduction(ranks, nodes, to)
}

// movesReduction is RotationReduction for any exchange that moves ranks[i] from from[i] to
// to[i] at once.
func movesReduction(ranks []RankProfile, from, to []NodeProfile) int64 {
	dest := map[RankID]string{}
	for i, x := range ranks {
		dest[x.ID()] = to[i].Node
	}
	hostBefore := func(id RankID) string {
		for _, p := range from {
			if p.Hosts(id) {
				return p.Node
			}
		}
		for _, p := range to {
			if p.Hosts(id) {
				return p.Node
			}
		}
		return "" // elsewhere: crosses from any of these nodes, before and after
	}
	var red int64
	for i, x := range ranks {
		for _, pc := range x.Peers {
			id := RankID{Job: x.Job, Rank: pc.Rank}
			if pc.Rank == x.Rank {
				continue
			}
			before := hostBefore(id)
			after, moved := dest[id]
			w := pc.Bytes
			if !moved {
				after = before
				w *= 2 // the peer's answer, which no moved rank's profile counts
			}
			if before == "" || before != from[i].Node {
				red += w
			}
			if after == "" || after != to[i].Node {
				red -= w
			}
		}
	}
	return red
}

// balanced says whether an exchange that changes the free-CPU difference between two nodes
// from before to after (m the guard's margin between them) keeps the ordinary rule quiet: a
// rank using u moves by that rule only across a difference of at least u + m, so a
// difference that stays below m, or does not grow, cannot call for a move it did not call
// for already.
func balanced(before, after, m float64) bool {
	return math.Abs(after) <= math.Max(math.Abs(before), m)
}

// decideRotation completes a three-way exchange: the request's Offer a (at Remote, L) goes
// to the relay node (R), its Relay b comes here (M), and one of mine, c, goes to L.
func (st stable) decideRotation(in DecisionInput, mine []RankProfile) Decision {
	a, b, rn := in.Offer, in.Relay, in.RelayNode
	d := Decision{Policy: st.inner.Name()}
	if a == nil || b == nil || rn == nil || rn.Node == in.Local.Node || rn.Node == in.Remote.Node ||
		!rn.Hosts(b.ID()) || in.Local.Hosts(b.ID()) || in.Remote.Hosts(b.ID()) || b.ID() == a.ID() {
		return d
	}
	if !b.LastMigration.IsZero() && in.Now.Sub(b.LastMigration) < st.s.exchangeCooldown() {
		return d
	}
	ua, ub := a.cpuUse(in.Remote), b.cpuUse(*rn)
	nodes := [3]NodeProfile{in.Remote, *rn, in.Local} // L, R, M
	var best int64
	for _, c := range mine {
		// Each node gives one rank and gets one; the free CPUs between every two of them must
		// stay balanced as for a swap.
		if c.Job != a.Job || b.Job != a.Job {
			continue // one joint move of one job
		}
		uc := c.cpuUse(in.Local)
		change := [3]float64{ua - uc, ub - ua, uc - ub}
		ok := true
		for i := 0; i < 3; i++ {
			x, y := nodes[i], nodes[(i+1)%3]
			before := y.FreeCPUs() - x.FreeCPUs()
			ok = ok && balanced(before, before+change[(i+1)%3]-change[i], st.s.margin(x, y))
		}
		if !ok {
			continue
		}
		red := RotationReduction(*a, *b, c, in.Remote, *rn, in.Local)
		traffic := totalBytes(*a) + totalBytes(*b) + totalBytes(c)
		// red counts both directions: compare it with twice the ranks' (sent) traffic.
		if red <= best || exchangeDivisor*red <= 2*traffic {
			continue
		}
		best = red
		d.Migrate, d.Rank, d.Swap, d.Relay, d.RelayNode, d.Policy = true, c.ID(), a.ID(), b.ID(), rn.Node, st.policyName(c)
		d.Gain = float64(red) / 2
		d.Reason = fmt.Sprintf("three-way exchange: %s (here) → %s, %s (at %s) → %s, %s (at %s) → here: %d bytes per window stop crossing nodes, both ways (the three send %d)",
			c.ID(), in.Remote.Node, a.ID(), in.Remote.Node, rn.Node, b.ID(), rn.Node, red, traffic)
	}
	if !d.Migrate || !finite(d.Gain) || d.Gain <= st.s.MinGain {
		return Decision{Policy: st.inner.Name()}
	}
	return d
}

// Pair swaps. Swaps of one rank and rotations of three stop at a local optimum where two
// linked ranks are misplaced together: moving either alone breaks their link, moving both
// keeps it. On the hypercube the exchanges above end with half the links crossing nodes
// while four 3-subcubes cut 40%, and swapping two linked actors for two others reaches it.
// So an exchange request offers, with its most misplaced rank, that rank's most misplaced
// neighbour on the same node (exchangePartner), and the receiver may give two of its ranks
// for the two: rank counts stay, and it must cut the bytes crossing nodes by more than an
// eighth of the four ranks' traffic, so like every exchange it lowers the potential and is
// never undone.

// PairSwapReduction is the bytes per window that stop crossing nodes, both ways (as
// RotationReduction), when a1 and a2 (on local) trade places with b1 and b2 (on remote).
func PairSwapReduction(a1, a2, b1, b2 RankProfile, local, remote NodeProfile) int64 {
	return movesReduction([]RankProfile{a1, a2, b1, b2}, []NodeProfile{local, local, remote, remote}, []NodeProfile{remote, remote, local, local})
}

// decidePairSwap is the guard's answer to an exchange request with an offered pair: two of
// mine for the two offered ranks.
func (st stable) decidePairSwap(in DecisionInput, mine []RankProfile, diff, margin float64) Decision {
	d := Decision{Policy: st.inner.Name()}
	b1, b2 := in.Offer, in.OfferPartner
	if b1 == nil || b2 == nil || b1.ID() == b2.ID() || b1.Job != b2.Job || !in.Remote.Hosts(b2.ID()) || in.Local.Hosts(b2.ID()) {
		return d
	}
	if !b2.LastMigration.IsZero() && in.Now.Sub(b2.LastMigration) < st.s.exchangeCooldown() {
		return d
	}
	ub := b1.cpuUse(in.Remote) + b2.cpuUse(in.Remote)
	var best int64
	for i, a1 := range mine {
		for _, a2 := range mine[i+1:] {
			if a1.Job != b1.Job || a2.Job != b1.Job {
				continue
			}
			after := diff - 2*(a1.cpuUse(in.Local)+a2.cpuUse(in.Local)-ub)
			if !balanced(diff, after, margin) {
				continue
			}
			red := PairSwapReduction(a1, a2, *b1, *b2, in.Local, in.Remote)
			traffic := totalBytes(a1) + totalBytes(a2) + totalBytes(*b1) + totalBytes(*b2)
			if red <= best || exchangeDivisor*red <= 2*traffic {
				continue
			}
			best = red
			d.Migrate, d.Rank, d.Pair, d.Swap, d.SwapPair, d.Policy = true, a1.ID(), a2.ID(), b1.ID(), b2.ID(), st.policyName(a1)
			d.Gain = float64(red) / 2
			d.Reason = fmt.Sprintf("pair swap %s and %s (here) with %s and %s (at %s): %d bytes per window stop crossing nodes, both ways (the four send %d); free CPUs %s−here %.3f → %.3f",
				a1.ID(), a2.ID(), b1.ID(), b2.ID(), in.Remote.Node, red, traffic, in.Remote.Node, diff, after)
		}
	}
	if !d.Migrate || !finite(d.Gain) || d.Gain <= st.s.MinGain {
		return Decision{Policy: st.inner.Name()}
	}
	return d
}

// exchangePartner is the rank offered with offer: its neighbour on this node, out of
// cooldown, of a policy that exchanges, with the largest misplacement (ties to the first
// listed); nil if offer has none.
func (n *Node) exchangePartner(now time.Time, eff NodeProfile, offer *RankProfile) *RankProfile {
	if offer == nil {
		return nil
	}
	linked := map[int]bool{}
	for _, pc := range offer.Peers {
		if pc.Bytes > 0 {
			linked[pc.Rank] = true
		}
	}
	var best *RankProfile
	var worst int64
	for _, r := range n.candidates() {
		if r.Job != offer.Job || r.Rank == offer.Rank || !linked[r.Rank] ||
			(!r.LastMigration.IsZero() && now.Sub(r.LastMigration) < n.cfg.Stability.exchangeCooldown()) {
			continue
		}
		if st, ok := n.policy.(stable); ok && !st.exchangeCandidate(r) {
			continue
		}
		if m := misplacement(r, eff); best == nil || m > worst {
			worst = m
			c := r
			c.Node = n.cfg.ID
			best = &c
		}
	}
	return best
}

// relayFor is the rank this node would give if it got the offer of exchange request m that
// it declined and forwards: the start of a three-way exchange (see RotationReduction). It
// picks, among its ranks out of cooldown whose policy exchanges, of the offer's job and
// CPU use, the one for which what this node can judge of the rotation is best: the offer's
// traffic that becomes node-local here, minus the offer's traffic with its own node and the
// candidate's with this node that start crossing, plus the candidate's traffic with third
// nodes (what the node completing the rotation may bring home). nil if none could pay.
func (n *Node) relayFor(now time.Time, m Message, eff NodeProfile) *RankProfile {
	a := m.Offer
	if a == nil || m.Relay != nil || m.Origin == n.cfg.ID || !n.exchanges() || m.Profile == nil || eff.Hosts(a.ID()) {
		return nil
	}
	if n.inExchange() || n.unsure() || (n.relay != nil && now.Sub(n.relay.at) < n.cfg.StealTimeout) {
		return nil // one hold at a time (exchange_commit.go)
	}
	st, _ := n.policy.(stable)
	var best *RankProfile
	var score int64
	for _, b := range n.candidates() {
		if b.Job != a.Job || (!b.LastMigration.IsZero() && now.Sub(b.LastMigration) < n.cfg.Stability.exchangeCooldown()) ||
			(st.inner != nil && !st.exchangeCandidate(b)) {
			continue
		}
		home := bytesTo(b, eff, RankID{})
		third := totalBytes(b) - home - bytesTo(b, *m.Profile, RankID{})
		s := bytesTo(*a, eff, b.ID()) - bytesTo(*a, *m.Profile, RankID{}) - home + third
		if s > score {
			score = s
			c := b
			c.Node = n.cfg.ID
			best = &c
		}
	}
	return best
}

// exchangeOffer is the rank this node offers in an exchange request: out of cooldown, of a
// policy that exchanges, not given away, sending more off the node than on it; the most
// misplaced one. nil if none.
func (n *Node) exchangeOffer(now time.Time, eff NodeProfile) *RankProfile {
	var best *RankProfile
	var worst int64
	for _, r := range n.candidates() {
		if !r.LastMigration.IsZero() && now.Sub(r.LastMigration) < n.cfg.Stability.exchangeCooldown() {
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

// exchanges says whether this node takes part in exchanges: its policy's protocol has
// Exchange, or a rank here belongs to a job that chose such a policy (mpirun --policy
// atsras on nodes running pcmd's default, mpiios). The protocol belongs to the node, but
// whether a rank is exchanged is its job's choice (PerRank), so a node whose own policy
// does not exchange still sends exchange requests, offers and relays for those ranks.
func (n *Node) exchanges() bool {
	if n.proto.Exchange {
		return true
	}
	for _, r := range n.ranks {
		if n.exchangeable(r) {
			return true
		}
	}
	return false
}

// exchangeable says whether rank r's policy (its job's, or the node's) takes part in
// exchanges.
func (n *Node) exchangeable(r RankProfile) bool {
	if st, ok := n.policy.(stable); ok {
		return st.exchangeCandidate(r)
	}
	return n.proto.Exchange
}

// crossTraffic says whether any local rank that takes part in exchanges sends to ranks on
// other nodes.
func (n *Node) crossTraffic(eff NodeProfile) bool {
	for _, r := range n.ranks {
		if n.exchangeable(r) && totalBytes(r) > bytesTo(r, eff, RankID{}) {
			return true
		}
	}
	return false
}
