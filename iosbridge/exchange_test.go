package iosbridge

import (
	"math"
	"sort"
	"testing"
	"time"
)

// Exchanges between busy nodes (exchange.go): ATS-RAS co-locates tightly coupled actors
// (thesis §2.2.1.2) even when every theater is busy, and the guard keeps them from moving
// back.

const exMsgs, exHalo = 100, 64 << 10 // per window: 100 iterations of 64 KB halos

// chainRank is rank i of an n-rank chain (a heat slice): it sends a halo to i−1 and i+1
// every iteration, uses cpu CPUs and computes 10 ms per message.
func chainRank(i, n int, cpu float64) RankProfile {
	r := rankProfile("heat", i, cpu)
	for _, p := range []int{i - 1, i + 1} {
		if p >= 0 && p < n {
			r.Peers = append(r.Peers, PeerComm{Rank: p, Messages: exMsgs, Bytes: exMsgs * exHalo})
		}
	}
	r.MessagesProcessed = exMsgs * int64(len(r.Peers))
	r.ComputePerMessage = 10 * time.Millisecond
	return r
}

// placed lists rank profiles and the busy node profile of a node hosting ranks of a chain
// of n on cpus CPUs (each rank gets its fair share; availability 0).
func placed(name string, cpus, n int, ranks ...int) (NodeProfile, []RankProfile) {
	sort.Ints(ranks)
	share := math.Min(1, float64(cpus)/float64(len(ranks)))
	var rs []RankProfile
	for _, i := range ranks {
		r := chainRank(i, n, share)
		r.Node = name
		rs = append(rs, r)
	}
	return node(name, cpus, 0, ids("heat", ranks...)...), rs
}

// exchangePair is two agents of policy on busy 2-CPU nodes that know each other.
type exchangePair struct {
	t     *testing.T
	now   time.Time
	nodes map[string]*Node
	hosts map[string][]int
	n     int
	moved map[RankID]time.Time
	log   []Migration
}

func newExchangePair(t *testing.T, policy string, n int, l, r []int) *exchangePair {
	p := &exchangePair{t: t, now: t0, nodes: map[string]*Node{}, hosts: map[string][]int{"L": l, "R": r}, n: n, moved: map[RankID]time.Time{}}
	for i, name := range []string{"L", "R"} {
		p.nodes[name] = mustNode(t, Config{ID: name, Policy: mustPolicy(t, policy), Rand: newRand(uint64(i + 1))})
	}
	p.update()
	connect(t, t0, p.nodes["L"], "R")
	connect(t, t0, p.nodes["R"], "L")
	return p
}

// update feeds both agents their profiles (what pcmd's sampler would report).
func (p *exchangePair) update() {
	for name, nd := range p.nodes {
		prof, rs := placed(name, 2, p.n, p.hosts[name]...)
		for i := range rs {
			rs[i].LastMigration = p.moved[rs[i].ID()]
		}
		if err := nd.Update(p.now, prof, rs); err != nil {
			p.t.Fatal(err)
		}
	}
}

// round ticks both agents, delivers every message until none is left, carries out the
// migrations they order (instantly) and returns them.
func (p *exchangePair) round() []Migration {
	p.t.Helper()
	for _, name := range []string{"L", "R"} {
		p.nodes[name].Tick(p.now)
	}
	var done []Migration
	for busy := true; busy; {
		busy = false
		for _, name := range []string{"L", "R"} {
			rd := p.nodes[name].Ready()
			for _, m := range rd.Messages {
				busy = true
				m.From = name
				if err := p.nodes[m.To].Step(p.now, m); err != nil {
					p.t.Fatal(err)
				}
			}
			for _, mg := range rd.Migrations {
				to := mg.To
				from := map[string]string{"L": "R", "R": "L"}[to]
				p.hosts[from] = remove(p.hosts[from], mg.Rank.Rank)
				p.hosts[to] = append(p.hosts[to], mg.Rank.Rank)
				p.moved[mg.Rank] = p.now
				done = append(done, mg)
			}
		}
	}
	p.log = append(p.log, done...)
	p.update()
	return done
}

func remove(xs []int, x int) []int {
	var out []int
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

func sameSet(a []int, b ...int) bool {
	a = append([]int(nil), a...)
	sort.Ints(a)
	sort.Ints(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Thesis §2.2.1.2: ATS-RAS "will co-locate tightly coupled actors ... within the same
// theater". Two busy theaters (4 slices of an 8-slice chain each on 2 CPUs, no CPU free):
// slice 5 on L talks only to slices on R (4, 6), slice 3 on R half to each. RAS alone never
// moves anything here (no theater is idle); the exchange swaps them, each theater ends with
// a contiguous block, and — even long after the cooldown — neither moves back.
func TestATSRASCoLocatesNeighboursBetweenBusyTheatersAndNeverMovesThemBack(t *testing.T) {
	p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 5}, []int{3, 4, 6, 7})
	var moved []Migration
	for i := 0; i < 10 && len(moved) == 0; i++ {
		moved = p.round()
		p.now = p.now.Add(time.Second)
	}
	if len(moved) != 2 || !sameSet(p.hosts["L"], 0, 1, 2, 3) || !sameSet(p.hosts["R"], 4, 5, 6, 7) {
		t.Fatalf("no swap to contiguous blocks: moved %+v, L %v R %v", moved, p.hosts["L"], p.hosts["R"])
	}
	// Both stay busy (4 ranks on 2 CPUs); for an hour of rounds, cooldowns long over,
	// nothing moves again.
	for i := 0; i < 3600; i += 10 {
		p.now = p.now.Add(10 * time.Second)
		if again := p.round(); len(again) != 0 {
			t.Fatalf("moved again at +%v: %+v (L %v R %v)", p.now.Sub(t0), again, p.hosts["L"], p.hosts["R"])
		}
	}
	if p.nodes["R"].Stats().ExchangesSent+p.nodes["L"].Stats().ExchangesSent == 0 {
		t.Fatal("no exchange request: the property was not exercised")
	}
}

// Actors on a crowded busy theater go to their neighbours on a less crowded busy one (single
// moves while the target ends no denser than the giver, then a swap), until each theater
// holds a contiguous block; then nothing moves any more.
func TestATSRASRegroupsActorsOfACrowdedBusyTheaterWithTheirNeighbours(t *testing.T) {
	// L: slices 0–4 and 7 (6 on 2 CPUs), R: 5, 6 (2 on 2 CPUs, both cores busy). Slice 4
	// talks to 3 (L) and 5 (R), slice 7 only to 6 (R).
	p := newExchangePair(t, PolicyATSRAS, 8, []int{0, 1, 2, 3, 4, 7}, []int{5, 6})
	for i := 0; i < 300; i++ { // five cooldowns
		p.round()
		p.now = p.now.Add(time.Second)
	}
	if !sameSet(p.hosts["R"], 4, 5, 6, 7) {
		t.Fatalf("R ends with %v, not the block 4–7, after %+v", p.hosts["R"], p.log)
	}
	n := len(p.log)
	for i := 0; i < 3600; i += 10 {
		p.now = p.now.Add(10 * time.Second)
		p.round()
	}
	if len(p.log) != n {
		t.Fatalf("moved again: %+v", p.log[n:])
	}
}

// The property behind the two tests above, on random placements of random graphs: every
// exchange the guard allows lowers (Σ k²/C, bytes crossing nodes) lexicographically, so the
// reverse exchange is always refused and no sequence of them comes back.
func TestExchangesNeverAllowTheReverseExchange(t *testing.T) {
	rng := newRand(17)
	for _, pol := range []string{PolicyATSRAS, PolicyFLCRAS, PolicyARS} {
		st := Stabilize(mustPolicy(t, pol), DefaultStability())
		moves, swaps := 0, 0
		for it := 0; it < 1500; it++ {
			n := 4 + rng.IntN(12)
			adj := map[int][]int{}
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					if rng.Float64() < 0.3 {
						adj[i], adj[j] = append(adj[i], j), append(adj[j], i)
					}
				}
			}
			cl, cr := 1+rng.IntN(4), 1+rng.IntN(4)
			var l, r []int
			for i := 0; i < n; i++ {
				if rng.IntN(2) == 0 {
					l = append(l, i)
				} else {
					r = append(r, i)
				}
			}
			if len(l) == 0 || len(r) == 0 {
				continue
			}
			side := func(name string, cpus int, ranks []int) (NodeProfile, []RankProfile) {
				share := math.Min(1, float64(cpus)/float64(len(ranks)))
				prof := node(name, cpus, math.Max(0, 1-share*float64(len(ranks))/float64(cpus)), ids("g", ranks...)...)
				var rs []RankProfile
				for _, i := range ranks {
					rp := rankProfile("g", i, share)
					rp.Node = name
					for _, j := range adj[i] {
						rp.Peers = append(rp.Peers, PeerComm{Rank: j, Messages: exMsgs, Bytes: exMsgs * exHalo})
					}
					rp.MessagesProcessed = exMsgs * int64(len(adj[i]))
					rp.ComputePerMessage = 10 * time.Millisecond
					rs = append(rs, rp)
				}
				return prof, rs
			}
			lp, lr := side("L", cl, l)
			rp, rr := side("R", cr, r)
			var offer *RankProfile
			if k := rng.IntN(len(rr) + 1); k < len(rr) {
				offer = &rr[k]
			}
			in := DecisionInput{Local: lp, Remote: rp, Ranks: lr, Now: t0, Exchange: true, Offer: offer}
			d := st.Decide(in)
			if !d.Migrate {
				continue
			}
			cut := func(l []int) int {
				on := map[int]bool{}
				for _, i := range l {
					on[i] = true
				}
				c := 0
				for i, js := range adj {
					for _, j := range js {
						if i < j && on[i] != on[j] {
							c++
						}
					}
				}
				return c
			}
			density := func(l, r []int) float64 {
				return float64(len(l)*len(l))/float64(cl) + float64(len(r)*len(r))/float64(cr)
			}
			l2, r2 := remove(l, d.Rank.Rank), append(append([]int(nil), r...), d.Rank.Rank)
			if d.Swap != (RankID{}) {
				swaps++
				r2, l2 = remove(r2, d.Swap.Rank), append(l2, d.Swap.Rank)
			} else {
				moves++
			}
			before, after := density(l, r), density(l2, r2)
			if after > before+1e-9 || (after > before-1e-9 && cut(l2) >= cut(l)) {
				t.Fatalf("%s: exchange %+v does not lower (Σk²/C, cut): %.3f,%d → %.3f,%d", pol, d, before, cut(l), after, cut(l2))
			}
			// The reverse: R gives the rank back (offering the swapped one, if any).
			lp2, lr2 := side("L", cl, l2)
			rp2, rr2 := side("R", cr, r2)
			var back *RankProfile
			for i := range lr2 {
				if d.Swap != (RankID{}) && lr2[i].ID() == d.Swap {
					back = &lr2[i]
				}
			}
			rev := DecisionInput{Local: rp2, Remote: lp2, Ranks: rr2, Now: t0, Exchange: true, Offer: back}
			if d2 := st.Decide(rev); d2.Migrate && d2.Rank == d.Rank && (d.Swap == (RankID{}) || d2.Swap == d.Swap) {
				t.Fatalf("%s: reverse of %+v allowed: %+v", pol, d, d2)
			}
		}
		if moves == 0 || swaps == 0 {
			t.Fatalf("%s: %d single moves, %d swaps: the property was not exercised", pol, moves, swaps)
		}
	}
}

// An exchange request from a busy node is answered only under the exchange rules: the
// ordinary guard still refuses a move towards a node with no free CPU.
func TestBusyRequesterGetsNothingWithoutExchange(t *testing.T) {
	lp, lr := placed("L", 2, 8, 0, 1, 2, 5)
	rp, rr := placed("R", 2, 8, 3, 4, 6, 7)
	st := Stabilize(mustPolicy(t, PolicyATSRAS), DefaultStability())
	if d := st.Decide(DecisionInput{Local: lp, Remote: rp, Ranks: lr, Now: t0}); d.Migrate {
		t.Fatalf("plain steal from a busy node moved a rank: %+v", d)
	}
	d := st.Decide(DecisionInput{Local: lp, Remote: rp, Ranks: lr, Now: t0, Exchange: true, Offer: &rr[0]})
	if !d.Migrate || d.Rank != (RankID{"heat", 5}) || d.Swap != (RankID{"heat", 3}) {
		t.Fatalf("want slice 5 swapped for slice 3: %+v", d)
	}
	// Policies without exchanges (mpiios, the default) and jobs that chose one are left alone.
	for _, pol := range []string{PolicyMPIIOS, PolicySRAS, PolicyNone} {
		if d := Stabilize(mustPolicy(t, pol), DefaultStability()).Decide(DecisionInput{Local: lp, Remote: rp, Ranks: lr, Now: t0, Exchange: true, Offer: &rr[0]}); d.Migrate {
			t.Fatalf("%s exchanged: %+v", pol, d)
		}
	}
	for i := range lr {
		lr[i].Policy = PolicyMPIIOS
	}
	if d := Stabilize(PerRank(mustPolicy(t, PolicyATSRAS)), DefaultStability()).Decide(DecisionInput{Local: lp, Remote: rp, Ranks: lr, Now: t0, Exchange: true, Offer: &rr[0]}); d.Migrate {
		t.Fatalf("a job with policy mpiios was exchanged: %+v", d)
	}
}

// A busy agent offers its worst-placed rank with its exchange request and keeps it out of
// other requests' reach until the answer; only an accept of that very request and offer
// sends it away.
func TestExchangeOfferIsHeldAndOnlyItsAcceptMovesIt(t *testing.T) {
	nd := mustNode(t, Config{ID: "L", Policy: mustPolicy(t, PolicyFLCRAS)})
	prof, rs := placed("L", 2, 8, 0, 1, 2, 5)
	if err := nd.Update(t0, prof, rs); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, nd, "R")
	nd.Tick(t0)
	reqs := stealsIn(nd.Ready())
	if len(reqs) != 1 {
		t.Fatalf("busy node sent %d requests", len(reqs))
	}
	req := reqs[0]
	if !req.Exchange || req.Offer == nil || req.Offer.ID() != (RankID{"heat", 5}) || req.Offer.Node != "L" || nd.Stats().ExchangesSent != 1 {
		t.Fatalf("busy node's request: %+v (offer %+v)", req, req.Offer)
	}
	for _, c := range nd.candidates() {
		if c.ID() == req.Offer.ID() {
			t.Fatal("the offered rank can still be given to others")
		}
	}
	bad := []Message{
		{Kind: KindStealAccept, From: "R", To: "L", Origin: "L", ID: req.ID + 1, Rank: RankID{"heat", 3}, Swap: RankID{"heat", 5}}, // another request
		{Kind: KindStealAccept, From: "R", To: "L", Origin: "L", ID: req.ID, Rank: RankID{"heat", 3}, Swap: RankID{"heat", 1}},     // not the offer
	}
	for _, m := range bad {
		if err := nd.Step(t0, m); err != nil {
			t.Fatal(err)
		}
		if r := nd.Ready(); len(r.Migrations) != 0 {
			t.Fatalf("%+v moved %+v", m, r.Migrations)
		}
	}
	// The second one ended the steal (its ID matched); a new request, answered properly.
	nd.Tick(t0.Add(time.Second))
	if reqs = stealsIn(nd.Ready()); len(reqs) != 1 {
		t.Fatalf("no new request: %+v", reqs)
	}
	req = reqs[0]
	if err := nd.Step(t0.Add(time.Second), Message{Kind: KindStealAccept, From: "R", To: "L", Origin: "L", ID: req.ID, Rank: RankID{"heat", 3}, Swap: req.Offer.ID()}); err != nil {
		t.Fatal(err)
	}
	r := nd.Ready()
	if len(r.Migrations) != 1 || r.Migrations[0].Rank != req.Offer.ID() || r.Migrations[0].To != "R" || nd.Stats().RanksSwapped != 1 {
		t.Fatalf("swap not carried out: %+v", r.Migrations)
	}
}
