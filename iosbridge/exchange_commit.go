package iosbridge

import (
	"fmt"
	"slices"
	"time"
)

// Exchanges are all or nothing.
//
// The potential argument of exchange.go holds for a whole exchange: a swap, a pair swap or a
// rotation leaves every node's rank count alone and strictly cuts the traffic crossing
// nodes. Half of one is a single move that no rule approved (it may make a node denser and
// be undone later). Messages may be lost or come late and a steal or a relay's hold times
// out, so no node may move its rank on the strength of a message while another may still
// decline. Hence:
//
//   - Every node that gives a rank in an exchange other than Origin only promises it first:
//     the rank is booked as leaving (outgoing, so no other request gets it) but stays, and
//     the node records what it waits for (exchangeHold).
//   - Origin alone commits. Its steal accept comes last, once every other node holds its
//     part (for a rotation the relay confirms with KindRelayReady before the decider
//     answers Origin). Origin moves its offered rank(s) only if the steal is still
//     outstanding with that offer; a late or mismatched accept is refused with
//     KindExchangeCancel to the nodes holding ranks for it, and nothing moves.
//   - Origin's commit tells the nodes holding a promise (KindExchangeCommit), which then
//     send their ranks. Every node's migrations name the exchange (Migration.Parties), and
//     the job moves the parts of one exchange together once each node sent its own, all or
//     none (internal/supervisor's joint moves). If the commit message is lost, Origin's
//     part is refused alone and the holds expire: nothing moves. (A node that holds a
//     promise also sends its rank when what it waits for has arrived, as its Update lists
//     it; after a joint move its own rank has left by then, so nothing more is sent.)
//
//   - A node holds ranks for one exchange at a time (inExchange): an exchange is judged on
//     the placement of its two or three nodes, so it must be carried out on that one, not
//     on one where another promise was kept or not. Origin, which may answer others'
//     requests while its own is out, commits only if its ranks are still those it offered
//     with.
//
//   - An exchange is judged only on placements their nodes know. A plain steal's rank moves
//     as soon as it is given, before its accept reaches the stealer (which may come late, or
//     never), so a node with a steal of its own unanswered (neither accepted nor failed, and
//     sent less than PendingTimeout ago: the bound within which a given rank is booked at
//     all) may host a rank it does not list yet. Such a node is unsure: it neither offers,
//     relays nor decides an exchange, nor confirms a relay. Its own current steal counts
//     too: a rank given for it may come while it waits for an exchange's commit. A steal
//     sent to a neighbour after the last message heard from it, which is then found gone,
//     was lost with it and does not count (Node.peerGone).
//
//   - A rank counts as coming only while it may come: when PCM fails a migration, the giver
//     tells the receiver (KindMigrationFailed), which drops the booking and releases a hold
//     waiting for that rank, telling the other node holding one (as when a hold expires).
//
// So a lost or late message costs a hold (released by a cancel, or when it expires:
// StealTimeout before the relay confirmed, PendingTimeout after) and never moves a rank.
// An exchange stays half done only if a node dies, or PCM fails a migration, after the
// other parts were sent (Origin's commit, or the hold completed), or (commit message lost)
// a migration takes longer than the holds (PendingTimeout − StealTimeout): the same bound
// within which a given rank is booked at all. And it is judged on a rank whose migration
// failed only while the giver's KindMigrationFailed is on its way (or lost: then until
// PendingTimeout, as before it existed).

// exchangeHold is a promise this node made in an exchange of Origin's request ID: give goes
// to node to once every rank of want is hosted here.
type exchangeHold struct {
	origin string
	id     uint64
	give   []RankID // booked in outgoing
	to     string
	want   []RankID // booked in incoming
	// relay, for the decider of a rotation, is the relay node; confirmed once it sent
	// KindRelayReady (accept is then sent to Origin). Other holds are confirmed from the start.
	relay     string
	confirmed bool
	accept    Message
	// relayed: this node is the relay (stats and reasons).
	relayed bool
	mig     Migration // the migrations' record fields
	at      time.Time
}

// parties are the other nodes of the exchange, which may cancel it.
func (h *exchangeHold) party(node string) bool {
	return node == h.origin || node == h.to || (h.relay != "" && node == h.relay)
}

// holdFor is the hold of exchange (origin, id), nil if none.
func (n *Node) holdFor(origin string, id uint64) *exchangeHold {
	for _, h := range n.holds {
		if h.origin == origin && h.id == id {
			return h
		}
	}
	return nil
}

// promiseExchange is the decider's answer to an exchange request when the decision swaps
// (d.Swap set): it books its rank(s) as leaving for Origin but sends nothing yet. A swap or
// pair swap tells Origin at once; a rotation asks the relay first (KindRelayAccept).
func (n *Node) promiseExchange(now time.Time, m Message, d Decision, in DecisionInput, relayed, paired bool) {
	h := &exchangeHold{origin: m.Origin, id: m.ID, to: m.Origin, at: now, confirmed: !relayed,
		mig: Migration{To: m.Origin, RequestID: m.ID, Gain: d.Gain, Policy: d.Policy, Reason: d.Reason}}
	cpuOf := func(id RankID) float64 {
		for _, r := range in.Ranks {
			if r.ID() == id {
				return r.cpuUse(in.Local)
			}
		}
		return 0
	}
	h.give = []RankID{d.Rank}
	if paired {
		h.give = append(h.give, d.Pair)
	}
	for _, id := range h.give {
		n.outgoing[id] = pending{peer: m.Origin, at: now, cpu: cpuOf(id), origin: m.Origin, id: m.ID}
	}
	offerCPU := m.Offer.cpuUse(*m.Profile)
	h.accept = Message{Kind: KindStealAccept, To: m.Origin, Origin: m.Origin, ID: m.ID, Rank: d.Rank, CPUUse: cpuOf(d.Rank),
		Gain: d.Gain, Reason: d.Reason, Swap: d.Swap, SwapTo: d.RelayNode, Pair: d.Pair, SwapPair: d.SwapPair}
	switch {
	case relayed:
		n.stats.RotationsDecided++
		h.relay, h.want = d.RelayNode, []RankID{d.Relay}
		n.incoming[d.Relay] = pending{peer: d.RelayNode, at: now, cpu: m.Relay.cpuUse(*m.RelayProfile), origin: m.Origin, id: m.ID}
		n.send(Message{Kind: KindRelayAccept, To: d.RelayNode, Origin: m.Origin, ID: m.ID, Rank: d.Relay, Swap: d.Swap,
			CPUUse: offerCPU, Gain: d.Gain, Reason: d.Reason})
	default:
		h.want = []RankID{d.Swap}
		n.incoming[d.Swap] = pending{peer: m.Origin, at: now, cpu: offerCPU, origin: m.Origin, id: m.ID}
		if paired {
			h.want = append(h.want, d.SwapPair)
			n.incoming[d.SwapPair] = pending{peer: m.Origin, at: now, cpu: m.OfferPartner.cpuUse(*m.Profile), origin: m.Origin, id: m.ID}
		}
		n.send(h.accept)
	}
	n.holds = append(n.holds, h)
}

// unsure says whether a steal of this node's may still bring a rank it does not know of
// (Node.unanswered): it then takes part in no exchange.
func (n *Node) unsure() bool { return len(n.unanswered) > 0 }

// inExchange says whether this node promised ranks for an exchange: it then neither offers,
// relays nor decides another, nor confirms a relay.
func (n *Node) inExchange() bool { return len(n.holds) > 0 }

// sameRanks says whether this node's ranks (corrected for migrations in flight) are those of
// ids.
func (n *Node) sameRanks(ids []RankID) bool {
	eff := n.effectiveLocal()
	if len(eff.Ranks) != len(ids) {
		return false
	}
	for _, id := range ids {
		if !eff.Hosts(id) {
			return false
		}
	}
	return true
}

// swapOut is Origin's commit: it sends the offered rank(s) of the steal still outstanding to
// the node the accept names and reports true. Any other accept (late, of another request or
// offer, after this node's ranks changed, or forged) is refused: nothing moves, and the nodes holding ranks for it are told.
func (n *Node) swapOut(now time.Time, m Message) bool {
	ok := n.steal != nil && n.steal.id == m.ID && n.steal.offer == m.Swap && n.local.Hosts(m.Swap) && n.sameRanks(n.steal.ranks)
	if ok && m.SwapPair != (RankID{}) {
		ok = n.steal.partner == m.SwapPair && n.local.Hosts(m.SwapPair)
		if _, gone := n.outgoing[m.SwapPair]; gone {
			ok = false
		}
	}
	if _, gone := n.outgoing[m.Swap]; gone {
		ok = false
	}
	if !ok {
		n.stats.ExchangesRefused++
		n.send(Message{Kind: KindExchangeCancel, To: m.From, Origin: n.cfg.ID, ID: m.ID})
		if m.SwapTo != "" && m.SwapTo != n.cfg.ID {
			n.send(Message{Kind: KindExchangeCancel, To: m.SwapTo, Origin: n.cfg.ID, ID: m.ID})
		}
		return false
	}
	to := m.From
	n.send(Message{Kind: KindExchangeCommit, To: m.From, Origin: n.cfg.ID, ID: m.ID})
	if m.SwapTo != "" {
		to = m.SwapTo // a three-way exchange: the offer goes to the relay
		n.send(Message{Kind: KindExchangeCommit, To: m.SwapTo, Origin: n.cfg.ID, ID: m.ID})
	}
	n.outgoing[m.Swap] = pending{peer: to, at: now, cpu: n.rankCPU(m.Swap), origin: n.cfg.ID, id: m.ID}
	n.stats.RanksSwapped++
	parties := exchangeParties(n.cfg.ID, m.From, m.SwapTo)
	n.out.Migrations = append(n.out.Migrations, Migration{Rank: m.Swap, To: to, RequestID: m.ID, Gain: m.Gain,
		Policy: n.rankPolicy(m.Swap), Reason: fmt.Sprintf("swapped for %s: %s", m.Rank, m.Reason), At: now,
		Origin: n.cfg.ID, Parties: parties})
	if m.SwapPair != (RankID{}) {
		n.outgoing[m.SwapPair] = pending{peer: to, at: now, cpu: n.rankCPU(m.SwapPair), origin: n.cfg.ID, id: m.ID}
		n.stats.RanksSwapped++
		n.out.Migrations = append(n.out.Migrations, Migration{Rank: m.SwapPair, To: to, RequestID: m.ID, Gain: m.Gain,
			Policy: n.rankPolicy(m.SwapPair), Reason: fmt.Sprintf("swapped with %s for %s and %s: %s", m.Swap, m.Rank, m.Pair, m.Reason), At: now,
			Origin: n.cfg.ID, Parties: parties})
	}
	return true
}

// exchangeParties are the nodes named, without "" and repeats, sorted (Migration.Parties).
func exchangeParties(nodes ...string) []string {
	var out []string
	for _, x := range nodes {
		if x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// onRelayAccept is the relay's part of a three-way exchange: if it still holds the rank for
// that very request, rank and offer, and promised nothing else meanwhile, it promises it to the decider (m.From) until the offer
// arrives from Origin and confirms (KindRelayReady); otherwise it cancels, and the decider
// releases its rank.
func (n *Node) onRelayAccept(now time.Time, m Message) {
	h := n.relay
	ok := h != nil && h.origin == m.Origin && h.id == m.ID && h.rank == m.Rank && h.offer == m.Swap &&
		now.Sub(h.at) < n.cfg.StealTimeout && n.local.Hosts(m.Rank) && !n.inExchange() && !n.unsure()
	if ok {
		_, gone := n.outgoing[m.Rank]
		ok = !gone
	}
	if !ok {
		n.stats.ExchangesRefused++
		n.send(Message{Kind: KindExchangeCancel, To: m.From, Origin: m.Origin, ID: m.ID})
		return
	}
	n.relay = nil
	n.outgoing[m.Rank] = pending{peer: m.From, at: now, cpu: n.rankCPU(m.Rank), origin: m.Origin, id: m.ID}
	n.incoming[m.Swap] = pending{peer: m.Origin, at: now, cpu: m.CPUUse, origin: m.Origin, id: m.ID}
	n.holds = append(n.holds, &exchangeHold{origin: m.Origin, id: m.ID, give: []RankID{m.Rank}, to: m.From, want: []RankID{m.Swap},
		confirmed: true, relayed: true, at: now,
		mig: Migration{To: m.From, RequestID: m.ID, Gain: m.Gain, Policy: n.rankPolicy(m.Rank),
			Reason: fmt.Sprintf("relayed for %s from %s: %s", m.Swap, m.Origin, m.Reason)}})
	n.send(Message{Kind: KindRelayReady, To: m.From, Origin: m.Origin, ID: m.ID, Rank: m.Rank, Swap: m.Swap})
}

// onRelayReady is the decider's: the relay holds its rank, so Origin may now commit. A ready
// that matches no unconfirmed hold of this rotation (late: the hold expired) is cancelled.
func (n *Node) onRelayReady(now time.Time, m Message) {
	h := n.holdFor(m.Origin, m.ID)
	if h == nil || h.confirmed || h.relay != m.From || h.want[0] != m.Rank || h.accept.Swap != m.Swap ||
		now.Sub(h.at) >= n.cfg.StealTimeout {
		n.stats.ExchangesRefused++
		n.send(Message{Kind: KindExchangeCancel, To: m.From, Origin: m.Origin, ID: m.ID})
		return
	}
	h.confirmed, h.at = true, now
	for _, id := range h.give {
		if p, ok := n.outgoing[id]; ok {
			p.at = now
			n.outgoing[id] = p
		}
	}
	for _, id := range h.want {
		if p, ok := n.incoming[id]; ok {
			p.at = now
			n.incoming[id] = p
		}
	}
	n.send(h.accept)
}

// onExchangeCancel releases the hold of the cancelled exchange, if a party to it sent the
// cancel; Origin may also drop a relay hold it no longer needs.
func (n *Node) onExchangeCancel(m Message) {
	if h := n.relay; h != nil && h.origin == m.Origin && h.id == m.ID && m.From == m.Origin {
		n.relay = nil
	}
	if h := n.holdFor(m.Origin, m.ID); h != nil && h.party(m.From) {
		n.release(h)
	}
}

// release drops hold h and its bookings: nothing moves for it.
func (n *Node) release(h *exchangeHold) {
	for _, id := range h.give {
		if p, ok := n.outgoing[id]; ok && p.peer == h.to {
			delete(n.outgoing, id)
		}
	}
	for _, id := range h.want {
		if !n.local.Hosts(id) {
			delete(n.incoming, id)
		}
	}
	n.stats.ExchangesCancelled++
	n.dropHold(h)
}

func (n *Node) dropHold(h *exchangeHold) {
	for i, x := range n.holds {
		if x == h {
			n.holds = append(n.holds[:i], n.holds[i+1:]...)
			return
		}
	}
}

// settleHolds, after an Update, sends the promised ranks of every hold whose wanted ranks
// have all arrived (Origin's commit message was lost).
func (n *Node) settleHolds(now time.Time) {
	for _, h := range append([]*exchangeHold(nil), n.holds...) {
		if n.hostsAll(h.want) {
			n.complete(now, h)
		}
	}
}

// onExchangeCommit: Origin committed, so the promise is kept now.
func (n *Node) onExchangeCommit(now time.Time, m Message) {
	if h := n.holdFor(m.Origin, m.ID); h != nil && m.From == h.origin && h.confirmed {
		n.complete(now, h)
	}
}

// complete sends the ranks of hold h.
func (n *Node) complete(now time.Time, h *exchangeHold) {
	n.dropHold(h)
	for _, id := range h.give {
		p, ok := n.outgoing[id]
		if !ok || p.peer != h.to || !n.local.Hosts(id) {
			continue // gone meanwhile (not through this protocol): nothing to send
		}
		p.at = now
		n.outgoing[id] = p
		if h.relayed {
			n.stats.RanksRelayed++
		} else {
			n.stats.RanksGiven++
		}
		mg := h.mig
		mg.Rank, mg.At = id, now
		mg.Origin, mg.Parties = h.origin, exchangeParties(h.origin, h.to, h.relay, n.cfg.ID)
		n.out.Migrations = append(n.out.Migrations, mg)
	}
}

// hostsAll says whether every rank of ids is listed here.
func (n *Node) hostsAll(ids []RankID) bool {
	for _, id := range ids {
		if !n.local.Hosts(id) {
			return false
		}
	}
	return true
}

// expireHolds releases the holds that outlived their bound (StealTimeout before the relay
// confirmed, PendingTimeout after) and tells the other node holding a rank for the exchange.
func (n *Node) expireHolds(now time.Time) {
	for _, h := range append([]*exchangeHold(nil), n.holds...) {
		limit := n.cfg.PendingTimeout
		if !h.confirmed {
			limit = n.cfg.StealTimeout
		}
		if now.Sub(h.at) < limit {
			continue
		}
		n.abandon(h)
	}
}

// abandon releases hold h and tells the other node holding a rank for its exchange.
func (n *Node) abandon(h *exchangeHold) {
	for _, p := range []string{h.to, h.relay} {
		if p != "" && p != h.origin {
			n.send(Message{Kind: KindExchangeCancel, To: p, Origin: h.origin, ID: h.id})
		}
	}
	n.release(h)
}
