package iosbridge

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"
)

// Exchanges are all or nothing (exchange_commit.go): a late, lost or mismatched answer moves
// no rank, and a committed exchange is carried out whole.

// deliver steps m into its node (From set to the sender) and returns that node's Ready.
func (p *exchangePair) deliver(m Message) Ready {
	p.t.Helper()
	if err := p.nodes[m.To].Step(p.now, m); err != nil {
		p.t.Fatal(err)
	}
	return p.nodes[m.To].Ready()
}

// oneOf returns the single message of kind k in r, failing otherwise.
func oneOf(t *testing.T, r Ready, k Kind) Message {
	t.Helper()
	got := ofKind(r, k)
	if len(got) != 1 {
		t.Fatalf("want one %s, got messages %+v", k, r.Messages)
	}
	return got[0]
}

// settleQuiet updates every node from p.hosts (long after, so every booking could expire) and
// fails if any of them orders a migration.
func (p *exchangePair) settleQuiet(after time.Duration) {
	p.t.Helper()
	p.now = p.now.Add(after)
	p.update()
	for _, name := range p.names {
		p.nodes[name].Tick(p.now)
		if r := p.nodes[name].Ready(); len(r.Migrations) != 0 {
			p.t.Fatalf("%s moved %+v", name, r.Migrations)
		}
	}
}

// A swap answer that reaches the requester after its steal timed out is refused: it moves
// nothing, books nothing, and tells the giver, which releases the rank it had only promised.
// On time, the requester sends its offer and tells the giver, which sends its rank; if that
// message is lost, the giver's rank follows when the offer has arrived.
func TestLateSwapAnswerMovesNothing(t *testing.T) {
	for _, c := range []struct{ late, commitLost bool }{{true, false}, {false, false}, {false, true}} {
		late := c.late
		t.Run(fmt.Sprintf("late=%v,commit lost=%v", c.late, c.commitLost), func(t *testing.T) {
			p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
			p.nodes["L"].Tick(p.now)
			req := oneOf(t, p.nodes["L"].Ready(), KindStealRequest)
			req.From = "L"
			r := p.deliver(req)
			acc := oneOf(t, r, KindStealAccept)
			if len(r.Migrations) != 0 || acc.Swap != (RankID{"heat", 5}) || acc.Rank != (RankID{"heat", 3}) {
				t.Fatalf("R answered %+v and moved %+v: want a promise of slice 3 for 5, nothing moved", acc, r.Migrations)
			}
			for _, c := range p.nodes["R"].candidates() {
				if c.ID() == acc.Rank {
					t.Fatal("the promised rank can still be given to others")
				}
			}
			acc.From = "R"
			if late {
				p.now = p.now.Add(p.nodes["L"].cfg.StealTimeout)
				p.nodes["L"].Tick(p.now) // the steal times out (and L may ask again)
				p.nodes["L"].Ready()
				r = p.deliver(acc)
				cancel := oneOf(t, r, KindExchangeCancel)
				if len(r.Migrations) != 0 || p.nodes["L"].Local().Hosts(acc.Rank) || p.nodes["L"].Stats().ExchangesRefused != 1 {
					t.Fatalf("late accept: moved %+v, L lists %v", r.Migrations, p.nodes["L"].Local().Ranks)
				}
				cancel.From = "L"
				if r = p.deliver(cancel); len(r.Migrations) != 0 || p.nodes["R"].Stats().ExchangesCancelled != 1 {
					t.Fatalf("cancel: R moved %+v", r.Migrations)
				}
				if !slices.ContainsFunc(p.nodes["R"].candidates(), func(c RankProfile) bool { return c.ID() == acc.Rank }) {
					t.Fatal("the cancelled promise still holds the rank")
				}
				p.settleQuiet(time.Hour)
				return
			}
			r = p.deliver(acc)
			commit := oneOf(t, r, KindExchangeCommit)
			if len(r.Migrations) != 1 || r.Migrations[0].Rank != acc.Swap || r.Migrations[0].To != "R" || commit.To != "R" {
				t.Fatalf("accept on time: L moved %+v, sent %+v", r.Migrations, r.Messages)
			}
			if !c.commitLost {
				commit.From = "L"
				r = p.deliver(commit)
				if len(r.Migrations) != 1 || r.Migrations[0].Rank != acc.Rank || r.Migrations[0].To != "L" {
					t.Fatalf("commit: R moved %+v, want slice 3 to L", r.Migrations)
				}
				return
			}
			p.hosts["L"], p.hosts["R"] = remove(p.hosts["L"], 5), append(p.hosts["R"], 5)
			p.now = p.now.Add(30 * time.Second)
			p.update()
			r = p.nodes["R"].Ready()
			if len(r.Migrations) != 1 || r.Migrations[0].Rank != acc.Rank || r.Migrations[0].To != "L" || p.nodes["R"].Stats().RanksGiven != 1 {
				t.Fatalf("offer arrived: R moved %+v, want slice 3 to L", r.Migrations)
			}
		})
	}
}

// A swap answer that is lost leaves the giver's promise to expire (PendingTimeout): the
// requester's steal times out, and neither side ever moves a rank for it.
func TestLostSwapAnswerMovesNothing(t *testing.T) {
	p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
	p.nodes["L"].Tick(p.now)
	req := oneOf(t, p.nodes["L"].Ready(), KindStealRequest)
	req.From = "L"
	oneOf(t, p.deliver(req), KindStealAccept) // lost
	p.now = p.now.Add(time.Minute)
	p.nodes["L"].Tick(p.now)
	p.nodes["L"].Ready()
	p.update()
	if r := p.nodes["R"].Ready(); len(r.Migrations) != 0 || len(p.nodes["R"].holds) != 1 {
		t.Fatalf("R moved %+v, holds %d", r.Migrations, len(p.nodes["R"].holds))
	}
	p.now = p.now.Add(p.nodes["R"].cfg.PendingTimeout)
	p.nodes["R"].Tick(p.now)
	if r := p.nodes["R"].Ready(); len(r.Migrations) != 0 || len(p.nodes["R"].holds) != 0 || p.nodes["R"].Stats().ExchangesCancelled != 1 {
		t.Fatalf("after PendingTimeout R moved %+v, holds %d", r.Migrations, len(p.nodes["R"].holds))
	}
}

// rotationGroup is the three busy theaters of TestThreeWayExchangeBringsHomeWhatNoSwapCan
// and the rotation's messages up to the decider's relay accept: C offers slice 0, B
// relays slice 4, A decides to give slice 8.
func rotationGroup(t *testing.T) (p *exchangePair, relayAccept Message) {
	p = newExchangeGroup(t, PolicyATSRAS, 12, []string{"A", "B", "C"}, []int{5, 6, 7, 8}, []int{1, 2, 3, 4}, []int{0, 9, 10, 11})
	p.nodes["B"].cfg.Rand = fixedRand{0} // forwards to A
	c := p.nodes["C"]
	c.cfg.Rand = fixedRand{1} // asks B
	c.Tick(p.now)
	req := oneOf(t, c.Ready(), KindStealRequest)
	if req.To != "B" || req.Offer == nil || req.Offer.ID() != (RankID{"heat", 0}) {
		t.Fatalf("C's request: %+v", req)
	}
	req.From = "C"
	fwd := oneOf(t, p.deliver(req), KindStealRequest)
	if fwd.To != "A" || fwd.Relay == nil || fwd.Relay.ID() != (RankID{"heat", 4}) {
		t.Fatalf("B's forward: %+v", fwd)
	}
	fwd.From = "B"
	r := p.deliver(fwd)
	relayAccept = oneOf(t, r, KindRelayAccept)
	if len(r.Migrations) != 0 || relayAccept.To != "B" || len(ofKind(r, KindStealAccept)) != 0 {
		t.Fatalf("A answered %+v and moved %+v: want only a relay accept to B", r.Messages, r.Migrations)
	}
	relayAccept.From = "A"
	return p, relayAccept
}

// A relay accept that reaches the relay after its hold expired is cancelled: the decider
// releases its rank and never answers the requester, whose steal times out; nothing moves.
func TestLateRelayAcceptMovesNothing(t *testing.T) {
	p, ra := rotationGroup(t)
	p.now = p.now.Add(p.nodes["B"].cfg.StealTimeout)
	p.nodes["B"].Tick(p.now)
	p.nodes["B"].Ready()
	r := p.deliver(ra)
	cancel := oneOf(t, r, KindExchangeCancel)
	if len(r.Migrations) != 0 || cancel.To != "A" {
		t.Fatalf("late relay accept: B moved %+v, answered %+v", r.Migrations, r.Messages)
	}
	cancel.From = "B"
	if r = p.deliver(cancel); len(r.Migrations) != 0 || len(r.Messages) != 0 || len(p.nodes["A"].holds) != 0 {
		t.Fatalf("cancel: A moved %+v, sent %+v", r.Migrations, r.Messages)
	}
	p.settleQuiet(time.Hour)
}

// The relay's confirmation that reaches the decider after StealTimeout is cancelled in
// turn (the requester's steal is over by then): the relay releases its rank.
func TestLateRelayReadyMovesNothing(t *testing.T) {
	p, ra := rotationGroup(t)
	ready := oneOf(t, p.deliver(ra), KindRelayReady)
	ready.From = "B"
	p.now = p.now.Add(p.nodes["A"].cfg.StealTimeout)
	r := p.deliver(ready)
	cancel := oneOf(t, r, KindExchangeCancel)
	if len(ofKind(r, KindStealAccept)) != 0 || cancel.To != "B" {
		t.Fatalf("late relay ready: A sent %+v", r.Messages)
	}
	cancel.From = "A"
	if r = p.deliver(cancel); len(r.Migrations) != 0 || len(p.nodes["B"].holds) != 0 {
		t.Fatalf("cancel: B moved %+v", r.Migrations)
	}
	p.settleQuiet(time.Hour)
}

// A rotation's accept that reaches the requester after its steal timed out is refused, and
// both nodes that hold a rank for it are told: nothing moves. On time, with C's commit
// messages lost, the three moves follow each other: C's offer to B, B's relay to A once
// the offer arrived, A's rank to C once the relay arrived.
func TestLateRotationAnswerMovesNothing(t *testing.T) {
	for _, late := range []bool{true, false} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			p, ra := rotationGroup(t)
			ready := oneOf(t, p.deliver(ra), KindRelayReady)
			ready.From = "B"
			acc := oneOf(t, p.deliver(ready), KindStealAccept)
			if acc.To != "C" || acc.SwapTo != "B" || acc.Swap != (RankID{"heat", 0}) || acc.Rank != (RankID{"heat", 8}) {
				t.Fatalf("A's accept: %+v", acc)
			}
			acc.From = "A"
			if late {
				p.now = p.now.Add(p.nodes["C"].cfg.StealTimeout)
				p.nodes["C"].Tick(p.now)
				p.nodes["C"].Ready()
				r := p.deliver(acc)
				if len(r.Migrations) != 0 || len(r.Messages) != 2 || r.Messages[0].To == r.Messages[1].To {
					t.Fatalf("late accept: C moved %+v, sent %+v: want cancels to A and B", r.Migrations, r.Messages)
				}
				for _, m := range r.Messages {
					m.From = "C"
					if m.Kind != KindExchangeCancel || p.deliver(m).Migrations != nil || len(p.nodes[m.To].holds) != 0 {
						t.Fatalf("%+v did not release %s's hold", m, m.To)
					}
				}
				p.settleQuiet(time.Hour)
				return
			}
			step := func(node string, rank int, to string) {
				t.Helper()
				var r Ready
				if node == "C" {
					r = p.deliver(acc)
				} else {
					p.now = p.now.Add(20 * time.Second)
					p.update()
					r = p.nodes[node].Ready()
				}
				if len(r.Migrations) != 1 || r.Migrations[0].Rank != (RankID{"heat", rank}) || r.Migrations[0].To != to {
					t.Fatalf("%s moved %+v, want slice %d to %s", node, r.Migrations, rank, to)
				}
				for _, o := range p.names {
					if o != node && p.nodes[o].HasReady() {
						t.Fatalf("%s moves before its turn: %+v", o, p.nodes[o].Ready())
					}
				}
				p.hosts[node], p.hosts[to] = remove(p.hosts[node], rank), append(p.hosts[to], rank)
			}
			step("C", 0, "B")
			step("B", 4, "A")
			step("A", 8, "C")
			p.settleQuiet(time.Hour)
			if cutEdges(p) != 2 {
				t.Fatalf("%d links cross: %v", cutEdges(p), p.hosts)
			}
		})
	}
}

// sameHosts says whether ids are the ranks of job g listed in hosts.
func sameHosts(ids []RankID, hosts []int) bool {
	var got []int
	for _, id := range ids {
		got = append(got, id.Rank)
	}
	return sameSet(got, hosts...)
}

// chaosMove is a migration in flight: the rank has left its node and lands by due.
type chaosMove struct {
	mg   Migration
	from string
	due  time.Time
}

// exchangeOf is what an exchange decision moves: rank → destination, and its origin.
type exchangeOf struct {
	origin, decider string
	id              uint64
	at              time.Time
	want            map[RankID]string
	done            map[RankID]string
	before          [2]float64 // (Σk²/C, crossing links) where the decider decided
	after           [2]float64 // the same with every move of the exchange made
	why             string
	// misled: a node of it counted a rank whose migration had failed where it was to go,
	// its giver's KindMigrationFailed not delivered yet (on its way, or lost)
	misled bool
	// moving: decided while ranks were in flight
	moving bool
	failed bool // one of its migrations failed
}

// Every exchange is all or nothing whatever the network does: random graphs on four busy
// nodes whose protocol messages (steal requests, accepts and fails, relay accepts and
// readies, cancels) are delivered in any order, after any delay, or lost, and migrations
// land after up to a minute (the bound under which a given rank is booked at all, see
// exchange_commit.go). Every decided exchange ends with all of its moves made or none, and
// every one made whole lowers (Σ k²/C, links crossing nodes) of the placement it was
// decided on: where every rank is heading, those in flight landed, even a plain steal's
// rank whose accept has not reached its stealer yet (which judges no exchange meanwhile).
// Only where a migration itself fails (PCM refuses, a node dies: the last seeds fail one in
// ten) may an exchange stay half done; and be judged on a rank that stays where it was
// only while its giver's KindMigrationFailed has not reached the node that counted it (on
// its way, or lost as one message in eight is: that node then counts the rank until
// PendingTimeout). No protocol closes that window: the giver learns of the failure first.
func TestExchangesUnderLossAndDelayAreNeverHalfDone(t *testing.T) {
	var completed, moving0, misled, empty, refused, cancelled, rotations, pairs, halfByFailure, told int
	for seed := uint64(1); seed <= 52; seed++ {
		failing := seed > 40 // one migration in ten fails (PCM, or a node died)
		rng := newRand(100 + seed)
		n := 12 + rng.IntN(8)
		g := newRandomGraph(rng, n)
		switch seed % 3 {
		case 1: // a chain (heat's slices), where rotations pay
			g = randomGraph{}
			for i := 0; i+1 < n; i++ {
				g[i], g[i+1] = append(g[i], i+1), append(g[i+1], i)
			}
		case 2: // the 4-cube, where pair swaps pay
			n, g = 16, hypercube(4)
		}
		names := []string{"n0", "n1", "n2", "n3"}
		hosts := make([][]int, len(names))
		// Dealt out (every node busy, so only exchanges move ranks) or, one seed in four,
		// at random (idle nodes steal meanwhile).
		for k, i := range rng.Perm(n) {
			if seed%4 == 0 {
				k = rng.IntN(len(names))
			}
			hosts[k%len(names)] = append(hosts[k%len(names)], i)
		}
		pol := []string{PolicyATSRAS, PolicyFLCRAS}[seed%2]
		p := newExchangeGroup(t, pol, n, names, hosts...)
		p.graph = g
		for i, name := range names {
			p.nodes[name].seq = uint64(i+1) << 32 // request IDs unique across the nodes
		}
		p.update()
		var inFlight []Message
		var moving []chaosMove
		exchanges := map[uint64]*exchangeOf{}
		cpus := []int{2, 2, 2, 2}
		// untold: ranks whose migration PCM failed, by the giver's KindMigrationFailed not
		// delivered yet (in flight, or lost: its receiver counts the rank until PendingTimeout)
		untold := map[RankID]int{}
		// heading is the placement every node is heading for: ranks in flight where they
		// land, the rest of every exchange committed (some of its moves made) made too.
		heading := func() map[int]string {
			at := map[int]string{}
			for _, name := range names {
				for _, r := range p.hosts[name] {
					at[r] = name
				}
			}
			for _, mv := range moving {
				at[mv.mg.Rank.Rank] = mv.mg.To
			}
			for _, x := range exchanges {
				if len(x.done) > 0 && !x.failed {
					for r, to := range x.want {
						at[r.Rank] = to
					}
				}
			}
			return at
		}
		// potential is (Σk²/C, crossing links) of the heading placement with moves made.
		potential := func(moves map[RankID]string) [2]float64 {
			at := heading()
			for r, to := range moves {
				at[r.Rank] = to
			}
			hs := make([][]int, len(names))
			for r := 0; r < n; r++ {
				k := slices.Index(names, at[r])
				hs[k] = append(hs[k], r)
			}
			return [2]float64{density(cpus, hs...), float64(g.cut(hs...))}
		}
		var collect func(name string)
		collect = func(name string) {
			r := p.nodes[name].Ready()
			for _, m := range r.Messages {
				m.From = name
				switch m.Kind {
				case KindStealRequest, KindStealAccept, KindStealFail, KindRelayAccept, KindRelayReady, KindExchangeCancel, KindExchangeCommit, KindMigrationFailed:
					inFlight = append(inFlight, m)
				default: // membership: on time
					if err := p.nodes[m.To].Step(p.now, m); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, d := range r.Decisions {
				if !d.Decision.Migrate || d.Decision.Swap == (RankID{}) {
					continue
				}
				dc := d.Decision
				x := &exchangeOf{origin: d.Origin, decider: name, id: d.RequestID, at: p.now, want: map[RankID]string{}, done: map[RankID]string{}}
				x.want[dc.Rank] = d.Origin
				switch {
				case dc.Relay != (RankID{}):
					rotations++
					x.want[dc.Swap], x.want[dc.Relay] = dc.RelayNode, name
				case dc.Pair != (RankID{}):
					pairs++
					x.want[dc.Pair], x.want[dc.Swap], x.want[dc.SwapPair] = d.Origin, name, name
				default:
					x.want[dc.Swap] = name
				}
				x.before, x.after = potential(nil), potential(x.want)
				x.why = dc.Reason
				x.moving = len(moving) > 0
				// What the deciding nodes counted, against where ranks are heading.
				at := heading()
				for _, o := range []string{d.Origin, name, dc.RelayNode} {
					if o == "" {
						continue
					}
					view := p.nodes[o].effectiveLocal()
					for r, on := range at {
						if id := (RankID{"g", r}); (on == o) != view.Hosts(id) && untold[id] > 0 {
							x.misled = true
						}
					}
				}
				if exchanges[d.RequestID] != nil {
					t.Fatalf("request %d decided twice", d.RequestID)
				}
				exchanges[d.RequestID] = x
			}
			for _, mg := range r.Migrations {
				x := exchanges[mg.RequestID]
				if failing && rng.IntN(10) == 0 {
					// PCM fails it (the job refused, or a node died): the rank stays.
					p.nodes[name].MigrationFailed(mg.Rank)
					untold[mg.Rank]++
					if x != nil {
						x.failed = true
					}
					continue
				}
				if !slices.Contains(p.hosts[name], mg.Rank.Rank) {
					p.nodes[name].MigrationFailed(mg.Rank)
					continue
				}
				p.hosts[name] = remove(p.hosts[name], mg.Rank.Rank)
				moving = append(moving, chaosMove{mg: mg, from: name, due: p.now.Add(time.Duration(rng.IntN(60)) * time.Second)})
				if x != nil {
					if x.want[mg.Rank] != mg.To {
						t.Fatalf("seed %d: exchange %+v moves %s to %s", seed, x, mg.Rank, mg.To)
					}
					x.done[mg.Rank] = mg.To
				}
			}
			if p.nodes[name].HasReady() {
				collect(name) // a failed migration makes its giver tell the receiver
			}
		}
		land := func(i int) {
			mv := moving[i]
			moving = append(moving[:i], moving[i+1:]...)
			p.hosts[mv.mg.To] = append(p.hosts[mv.mg.To], mv.mg.Rank.Rank)
			p.moved[mv.mg.Rank] = p.now
		}
		end := p.now.Add(4 * time.Hour)
		for p.now.Before(end) {
			p.now = p.now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			for i := 0; i < len(moving); {
				if !p.now.Before(moving[i].due) {
					land(i)
					continue
				}
				i++
			}
			switch k := rng.IntN(10); {
			case k < 3:
				name := names[rng.IntN(len(names))]
				p.nodes[name].Tick(p.now)
				collect(name)
			case k < 4:
				p.update()
				for _, name := range names {
					collect(name)
				}
			case k < 9 && len(inFlight) > 0:
				// Any message in flight, not the oldest: NATS may delay one for long. One in
				// eight is lost.
				i := rng.IntN(len(inFlight))
				m := inFlight[i]
				inFlight = append(inFlight[:i], inFlight[i+1:]...)
				if rng.IntN(8) == 0 {
					continue
				}
				if err := p.nodes[m.To].Step(p.now, m); err != nil {
					t.Fatal(err)
				}
				if m.Kind == KindMigrationFailed {
					untold[m.Rank]--
					told++
				}
				collect(m.To)
			}
		}
		// Quiet: every message lost or delivered, every migration landed, holds expired.
		for len(moving) > 0 {
			land(0)
		}
		inFlight = nil
		p.now = p.now.Add(time.Hour)
		p.update()
		for _, name := range names {
			p.nodes[name].Tick(p.now)
			collect(name)
		}
		for len(moving) > 0 {
			land(0)
		}
		p.update()
		for _, name := range names {
			collect(name)
			st := p.nodes[name].Stats()
			refused += int(st.ExchangesRefused)
			cancelled += int(st.ExchangesCancelled)
		}
		ids := make([]uint64, 0, len(exchanges))
		for id := range exchanges {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			x := exchanges[id]
			switch len(x.done) {
			case 0:
				empty++
			case len(x.want):
				completed++
				if x.moving {
					moving0++
				}
				if x.misled {
					misled++ // judged on a failed migration's rank before its receiver was told
					continue
				}
				if !(x.after[0] < x.before[0]-1e-9 || x.after[0] < x.before[0]+1e-9 && x.after[1] < x.before[1]) {
					t.Errorf("seed %d: exchange %+v made whole does not lower (Σk²/C, cut): %v → %v", seed, x, x.before, x.after)
				}
			default:
				if x.failed {
					halfByFailure++ // a migration of it failed after the commit: no protocol can help
					continue
				}
				t.Fatalf("seed %d: exchange of %s's request %d decided by %s at +%v is half done: %v of %v",
					seed, x.origin, x.id, x.decider, x.at.Sub(t0), x.done, x.want)
			}
		}
	}
	t.Logf("%d exchanges made whole (%d rotations, %d pair swaps decided; %d decided while ranks were in flight, %d on a failed migration's rank before its receiver was told), %d moved nothing, %d half done by a failed migration; %d answers refused, %d holds released; %d failed migrations told",
		completed, rotations, pairs, moving0, misled, empty, halfByFailure, refused, cancelled, told)
	if completed-misled < 10 || moving0 < 10 || empty < 10 || refused == 0 || cancelled == 0 || told == 0 {
		t.Fatal("the property was hardly exercised")
	}
}

// askExchange makes from send an exchange request at once, which must go to to with an
// offer, delivers it, ends from's steal if to fails it, and returns to's answer.
func (p *exchangePair) askExchange(from, to string) Ready {
	p.t.Helper()
	r := p.nodes[from]
	r.steal, r.nextSteal = nil, p.now // asks again at once
	r.Tick(p.now)
	req := oneOf(p.t, r.Ready(), KindStealRequest)
	if req.Offer == nil || req.To != to {
		p.t.Fatalf("%s's request %+v: want an exchange offer to %s", from, req, to)
	}
	req.From = from
	ans := p.deliver(req)
	for _, m := range ans.Messages {
		if m.Kind == KindStealFail {
			m.From = to
			p.deliver(m) // from's steal ended
		}
	}
	return ans
}

// A node with a steal of its own unanswered may host a rank it does not list yet (a plain
// steal's rank moves before its accept arrives, which may be late or lost), so it judges no
// exchange on its placement (exchange_commit.go): L's exchange request reaches R while R's
// own request is lost and, later, timed out; R neither offers nor promises anything until
// the PendingTimeout within which a rank given for it would have arrived is over, and once
// its next request is answered it swaps.
func TestStealerWithAnUnansweredStealJudgesNoExchange(t *testing.T) {
	p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
	p.nodes["R"].cfg.PendingTimeout = 8 * time.Second // within PeerTimeout: no heartbeats needed
	p.nodes["R"].Tick(p.now)
	oneOf(t, p.nodes["R"].Ready(), KindStealRequest) // lost, or answered by a rank given at once
	askR := func() Ready { t.Helper(); return p.askExchange("L", "R") }
	for _, after := range []time.Duration{0, p.nodes["R"].cfg.StealTimeout, p.nodes["R"].cfg.PendingTimeout - time.Second} {
		p.now = t0.Add(after)
		p.nodes["R"].Tick(p.now)
		if r := p.nodes["R"].Ready(); slices.ContainsFunc(r.Messages, func(m Message) bool { return m.Kind == KindStealRequest && m.Offer != nil }) {
			t.Fatalf("+%v: R offers a swap with a steal unanswered: %+v", after, r.Messages)
		}
		r := askR()
		if len(r.Migrations) != 0 || len(ofKind(r, KindStealAccept)) != 0 || p.nodes["R"].inExchange() {
			t.Fatalf("+%v: R judged an exchange with its steal unanswered: sent %+v, moved %+v", after, r.Messages, r.Migrations)
		}
	}
	p.now = t0.Add(p.nodes["R"].cfg.PendingTimeout + time.Second)
	p.nodes["R"].Tick(p.now)
	req := oneOf(t, p.nodes["R"].Ready(), KindStealRequest) // settled: R asks again, and L says no
	req.From = "R"
	fail := oneOf(t, p.deliver(req), KindStealFail)
	fail.From = "L"
	p.deliver(fail)
	if acc := oneOf(t, askR(), KindStealAccept); acc.Swap == (RankID{}) {
		t.Fatalf("after PendingTimeout R answered %+v: want a swap", acc)
	}
}

// A steal lost to a neighbour that died does not keep its sender out of exchanges for
// PendingTimeout: R's request goes to X, from which nothing is heard after; while X may
// still be alive R judges no exchange, and as soon as its silence makes X gone (PeerTimeout,
// or X's leave) R swaps with L. A request sent to X before X's last message was received by
// a live node, which may have passed it on to one that gives a rank: that one keeps R out
// until PendingTimeout, as any other.
func TestStealLostToADeadNeighbourEndsWhenItIsFoundGone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heardLast time.Duration // X's last message, from the steal
		leaves    bool          // X says it leaves instead of falling silent
		swaps     bool
	}{
		{name: "silent since before the steal", heardLast: -time.Second, swaps: true},
		{name: "leaves after the steal", leaves: true, swaps: true},
		{name: "heard after the steal", heardLast: time.Second, swaps: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
			r := p.nodes["R"]
			sent := t0.Add(2 * time.Second)
			r.dropPeer("L") // R knows only X when it steals
			connect(t, sent.Add(min(tc.heardLast, 0)), r, "X")
			p.now = sent
			r.Tick(p.now)
			if req := oneOf(t, r.Ready(), KindStealRequest); req.To != "X" {
				t.Fatalf("R's steal %+v: want it sent to X", req)
			}
			if tc.heardLast > 0 {
				connect(t, sent.Add(tc.heardLast), r, "X")
			}
			p.now = sent.Add(3 * time.Second)
			connect(t, p.now, r, "L")
			a := p.askExchange("L", "R")
			if len(ofKind(a, KindStealAccept)) != 0 || r.inExchange() {
				t.Fatalf("R judged an exchange while X may still answer: sent %+v", a.Messages)
			}
			for _, m := range a.Messages {
				if m.Kind == KindStealRequest {
					delete(p.nodes["L"].unanswered, m.ID) // passed on to X and lost: not what is tested here
				}
			}
			if tc.leaves {
				if err := r.Step(p.now, Message{Kind: KindLeave, From: "X", To: "R"}); err != nil {
					t.Fatal(err)
				}
			} else {
				p.now = sent.Add(max(tc.heardLast, 0) + r.cfg.PeerTimeout + time.Second) // well before PendingTimeout
				// L and R keep hearing from each other.
				connect(t, p.now, r, "L")
				connect(t, p.now, p.nodes["L"], "R")
				r.Tick(p.now)
				if slices.Contains(r.Peers(), "X") {
					t.Fatalf("X still a neighbour of R at +%v", p.now.Sub(sent))
				}
			}
			// R's next steal goes to L, which has nothing to give.
			r.Tick(p.now)
			for _, m := range r.Ready().Messages {
				if m.Kind == KindStealRequest {
					m.From = "R"
					fail := oneOf(t, p.deliver(m), KindStealFail)
					fail.From = "L"
					p.deliver(fail)
				}
			}
			acc := ofKind(p.askExchange("L", "R"), KindStealAccept)
			if swapped := len(acc) == 1 && acc[0].Swap != (RankID{}); swapped != tc.swaps {
				t.Fatalf("X gone at +%v: R answered L's exchange request with %+v; want a swap: %v", p.now.Sub(sent), acc, tc.swaps)
			}
		})
	}
}

// A rank whose migration PCM failed is not counted as coming for PendingTimeout: its giver
// tells the receiver (KindMigrationFailed), which drops the booking (only the giver's word
// counts), and an accept the news overtook books nothing. The stealer is then no longer
// unsure either: no rank comes for its steal, so it may take part in exchanges at once.
func TestReceiverOfAFailedMigrationNoLongerCountsTheRank(t *testing.T) {
	for _, overtaken := range []bool{false, true} {
		a, b := idleNode(t, "A", "B"), busyNode(t, "B", "A")
		a.Tick(t0)
		req := oneOf(t, a.Ready(), KindStealRequest)
		req.From = "A"
		if err := b.Step(t0, req); err != nil {
			t.Fatal(err)
		}
		r := b.Ready()
		acc := oneOf(t, r, KindStealAccept)
		acc.From = "B"
		rank := r.Migrations[0].Rank
		b.MigrationFailed(rank)
		failed := oneOf(t, b.Ready(), KindMigrationFailed)
		failed.From = "B"
		if failed.To != "A" || failed.Rank != rank || failed.Origin != "A" || failed.ID != req.ID {
			t.Fatalf("B tells %+v: want A told that %s of its request %d does not come", failed, rank, req.ID)
		}
		var msgs []Message
		if overtaken {
			msgs = []Message{failed, acc}
		} else {
			forged := failed
			forged.From = "C" // a node that gave nothing
			msgs = []Message{acc, forged}
		}
		for _, m := range msgs {
			if err := a.Step(t0.Add(time.Second), m); err != nil {
				t.Fatal(err)
			}
		}
		if !overtaken {
			if !a.Local().Hosts(rank) {
				t.Fatalf("C's word made A forget %s, which B gives it", rank)
			}
			if err := a.Step(t0.Add(time.Second), failed); err != nil {
				t.Fatal(err)
			}
		}
		if l := a.Local(); l.Hosts(rank) || l.Availability != 1 || a.unsure() {
			t.Fatalf("overtaken %v: A still counts %s, whose migration failed: %+v (unsure %v)", overtaken, rank, l, a.unsure())
		}
	}
}

// A node holding a promise for an exchange whose other part failed releases it at once:
// L committed (its commit to R is late) but PCM failed L's migration, and L says so; R
// drops its hold, tells no one it gives anything, and the late commit moves nothing. Before,
// R counted L's rank and kept its own promised until PendingTimeout, and the late commit
// sent R's rank alone.
func TestHoldWaitingForAFailedMigrationIsReleased(t *testing.T) {
	p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
	acc := oneOf(t, p.askExchange("L", "R"), KindStealAccept)
	if acc.Swap == (RankID{}) || !p.nodes["R"].inExchange() {
		t.Fatalf("R answered %+v: want a swap promised", acc)
	}
	acc.From = "R"
	r := p.deliver(acc)
	commit := oneOf(t, r, KindExchangeCommit)
	commit.From = "L"
	if len(r.Migrations) != 1 || r.Migrations[0].Rank != acc.Swap {
		t.Fatalf("L moves %+v: want %s", r.Migrations, acc.Swap)
	}
	p.nodes["L"].MigrationFailed(acc.Swap)
	failed := oneOf(t, p.nodes["L"].Ready(), KindMigrationFailed)
	failed.From = "L"
	p.deliver(failed)
	rn := p.nodes["R"]
	if rn.inExchange() || rn.Local().Hosts(acc.Swap) || !rn.Local().Hosts(acc.Rank) {
		t.Fatalf("R after L's migration failed: in an exchange %v, counts %v", rn.inExchange(), rn.Local().Ranks)
	}
	if late := p.deliver(commit); len(late.Migrations) != 0 {
		t.Fatalf("the late commit moved %+v", late.Migrations)
	}
}

// Ranks said not to come for a steal are remembered only up to a bound: a peer cannot grow
// a node by naming ranks without end for a bulk steal (the Sheriff's), which stays
// unanswered while more ranks may follow.
func TestMigrationFailuresForABulkStealAreRememberedUpToABound(t *testing.T) {
	a := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicySheriff)})
	if err := a.Update(t0, node("A", 2, 1), nil); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, a, "B")
	a.Tick(t0)
	req := oneOf(t, a.Ready(), KindStealRequest)
	for i := 0; i < 10*maxNotComing; i++ {
		m := Message{Kind: KindMigrationFailed, From: "B", To: "A", Origin: "A", ID: req.ID, Rank: RankID{"j", i}}
		if err := a.Step(t0, m); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.notComing) != maxNotComing {
		t.Fatalf("%d ranks remembered as not coming, want the bound %d", len(a.notComing), maxNotComing)
	}
}
