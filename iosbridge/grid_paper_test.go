package iosbridge

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests of the grid strategies: the IO paper's RS, ARS and NRS (seed 003), Satin's CRS
// (seed 002) and Bustos' Robin-Hood and Nottingham Sheriff (seed 001).

// ofKind returns the messages of r of kind k, in order.
func ofKind(r Ready, k Kind) (out []Message) {
	for _, m := range r.Messages {
		if m.Kind == k {
			out = append(out, m)
		}
	}
	return out
}

// gridNode is a node with policy name whose neighbours are peers, each with the cluster
// given in clusters (missing: ""), learned from their heartbeats.
func gridNode(t *testing.T, id, policy, cluster string, avail float64, ranks []RankProfile, peers map[string]string) *Node {
	t.Helper()
	n := mustNode(t, Config{ID: id, Policy: mustPolicy(t, policy), Cluster: cluster})
	var hosted []RankID
	for _, r := range ranks {
		hosted = append(hosted, r.ID())
	}
	if err := n.Update(t0, node(id, 2, avail, hosted...), ranks); err != nil {
		t.Fatal(err)
	}
	for p, c := range peers {
		prof := node(p, 2, 0.5)
		prof.Cluster = c
		if err := n.Step(t0, Message{Kind: KindHeartbeat, From: p, To: id, Profile: &prof}); err != nil {
			t.Fatal(err)
		}
	}
	n.Ready()
	return n
}

func TestARSEquations1To3(t *testing.T) {
	// Δp = (P(f) − P(l))/(P(f) + P(l)) = (3 − 1)/(3 + 1) = 0.5.
	approx(t, "Δp eq.2", ARSProcessing(1, 3), 0.5)
	// Δc = (M(f,a) − M(l,a))/M(a) = (10 − 30)/50 = −0.4.
	approx(t, "Δc eq.3", ARSCommunication(30, 10, 50), -0.4)
	approx(t, "Δ eq.1", ARSGain(0.5, -0.4), 0.1)
	approx(t, "Δp of two idle theaters", ARSProcessing(0, 0), 0)
	approx(t, "Δc of an actor that sends nothing", ARSCommunication(0, 0, 0), 0)
	// "Both ... have been normalized to a value between −1 and 1."
	for _, c := range [][3]float64{{0, 5, 5}, {5, 0, 5}, {2, 3, 10}} {
		if v := ARSCommunication(c[0], c[1], c[2]); v < -1 || v > 1 {
			t.Fatalf("Δc%v = %v not in [-1,1]", c, v)
		}
	}
}

// arsInput: local has 1 free CPU of 2 and hosts ranks 0 and 1 of job j; the remote (the
// stealer) has freeRemote free CPUs and hosts rank 2. Rank 0 sends toLocal messages to rank
// 1 and toRemote to rank 2.
func arsInput(freeRemote float64, toLocal, toRemote int64) DecisionInput {
	r := rankProfile("j", 0, 1)
	r.Peers = []PeerComm{{Rank: 1, Messages: toLocal}, {Rank: 2, Messages: toRemote}}
	return DecisionInput{
		Local:  node("L", 2, 0.5, ids("j", 0, 1)...),
		Remote: node("R", 2, freeRemote/2, ids("j", 2)...),
		Ranks:  []RankProfile{r},
	}
}

func TestARSMigratesOnlyWhenEstimatedChangeIsPositive(t *testing.T) {
	ars := mustPolicy(t, PolicyARS)
	// P(l)=1, P(f)=2: Δp = 1/3; Δc = (10 − 10)/20 = 0: Δ = 1/3 > 0, migrate.
	d := ars.Decide(arsInput(2, 10, 10))
	if !d.Migrate || d.Rank != (RankID{"j", 0}) {
		t.Fatalf("Δ=1/3 must migrate: %+v", d)
	}
	approx(t, "gain", d.Gain, 1.0/3)
	// Same processing, but the actor talks to its local peer 3 times as much:
	// Δc = (5 − 15)/20 = −0.5, Δ = 1/3 − 1/2 < 0: "migration only happens when ... Δ > 0".
	if d := ars.Decide(arsInput(2, 15, 5)); d.Migrate {
		t.Fatalf("Δ<0 must not migrate: %+v", d)
	}
}

func TestARSCoLocatesTightlyCoupledActors(t *testing.T) {
	// Equal processing power (Δp = 0); the actor sends all its messages to the remote
	// theater: Δc = (20 − 0)/20 = 1, so it moves to its peer ("tries to colocate tightly
	// coupled actors").
	d := mustPolicy(t, PolicyARS).Decide(arsInput(1, 0, 20))
	if !d.Migrate {
		t.Fatalf("%+v", d)
	}
	approx(t, "Δ", d.Gain, 1)
}

func TestRSGivesFirstUnsatisfiedActorOfAHeavilyLoadedTheater(t *testing.T) {
	rs := mustPolicy(t, PolicyRS)
	in := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2)...), Remote: node("R", 2, 1),
		Ranks: []RankProfile{rankProfile("j", 1, .6), rankProfile("j", 2, .6)}}
	if d := rs.Decide(in); !d.Migrate || d.Rank != (RankID{"j", 1}) {
		t.Fatalf("heavily loaded theater must give its first candidate: %+v", d)
	}
	// "since only lightly loaded theaters send steal packets" and a lightly loaded one has
	// only satisfied actors, it gives nothing.
	in.Local.Availability = 0.5
	if d := rs.Decide(in); d.Migrate {
		t.Fatalf("lightly loaded theater gave %+v", d)
	}
}

func TestNRSLocalesByPingTime(t *testing.T) {
	for _, c := range []struct {
		rtt  time.Duration
		want Locale
	}{
		{0, LocaleLocal}, {10 * time.Millisecond, LocaleLocal},
		{11 * time.Millisecond, LocaleRegional}, {100 * time.Millisecond, LocaleRegional},
		{101 * time.Millisecond, LocaleNational}, {250 * time.Millisecond, LocaleNational},
		{251 * time.Millisecond, LocaleInternational}, {3 * time.Second, LocaleInternational},
	} {
		if got := NRSLocale(c.rtt); got != c.want {
			t.Errorf("NRSLocale(%v) = %v, want %v", c.rtt, got, c.want)
		}
	}
}

// pinged makes n time a round trip of rtt[p] to each neighbour p: n pings with its
// heartbeats at t0 and each neighbour's pong arrives rtt later.
func pinged(t *testing.T, n *Node, rtt map[string]time.Duration) {
	t.Helper()
	n.Tick(t0)
	for _, hb := range ofKind(n.Ready(), KindHeartbeat) {
		if hb.ID == 0 {
			t.Fatalf("heartbeat without a ping ID: %+v", hb)
		}
		d, ok := rtt[hb.To]
		if !ok {
			continue
		}
		if err := n.Step(t0.Add(d), Message{Kind: KindPong, From: hb.To, To: n.ID(), ID: hb.ID}); err != nil {
			t.Fatal(err)
		}
	}
	n.Ready()
}

func TestPingsTimeRoundTripsToNeighbours(t *testing.T) {
	n := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicyMPIIOS), MeasureLatency: true})
	connect(t, t0, n, "B", "C")
	pinged(t, n, map[string]time.Duration{"B": 7 * time.Millisecond})
	if rtt, ok := n.Latency("B"); !ok || rtt != 7*time.Millisecond {
		t.Fatalf("B: %v %v", rtt, ok)
	}
	if _, ok := n.Latency("C"); ok || n.LocaleOf("C") != LocaleUnknown {
		t.Fatal("C never answered but has a latency")
	}
	// A pong that answers no ping of ours (forged, or duplicated) changes nothing.
	if err := n.Step(t0.Add(time.Second), Message{Kind: KindPong, From: "B", To: "A", ID: 999}); err != nil {
		t.Fatal(err)
	}
	if rtt, _ := n.Latency("B"); rtt != 7*time.Millisecond {
		t.Fatalf("forged pong moved the latency to %v", rtt)
	}
	// The other side echoes a ping and only a ping.
	b := mustNode(t, Config{ID: "B"})
	if err := b.Step(t0, Message{Kind: KindHeartbeat, From: "A", To: "B", ID: 5}); err != nil {
		t.Fatal(err)
	}
	if p := only(t, b.Ready(), KindPong); p.To != "A" || p.ID != 5 {
		t.Fatalf("%+v", p)
	}
	if err := b.Step(t0, Message{Kind: KindHeartbeat, From: "A", To: "B"}); err != nil {
		t.Fatal(err)
	}
	if r := b.Ready(); len(r.Messages) != 0 {
		t.Fatalf("a plain heartbeat was answered: %+v", r.Messages)
	}
}

func TestNRSStealsLocalFirstThenRegionalAndSoOn(t *testing.T) {
	a := gridNode(t, "A", PolicyNRS, "", 0, nil, map[string]string{"B": "", "C": "", "D": ""})
	pinged(t, a, map[string]time.Duration{"B": 2 * time.Millisecond, "C": 40 * time.Millisecond, "D": 300 * time.Millisecond})
	if err := a.Update(t0, node("A", 2, 1), nil); err != nil { // now idle: it steals
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	want := []struct {
		to     string
		locale Locale
	}{{"B", LocaleLocal}, {"C", LocaleRegional}, {"D", LocaleInternational}}
	for i, w := range want {
		a.Tick(now)
		s := ofKind(a.Ready(), KindStealRequest)
		if len(s) != 1 || s[0].To != w.to || s[0].Locale != w.locale {
			t.Fatalf("steal %d: want one to %s in locale %v, got %+v", i, w.to, w.locale, s)
		}
		// "If a local random steal packet fails ..., the theater will then attempt a
		// regional random steal, and so on" (national is empty here: skipped).
		if err := a.Step(now, Message{Kind: KindStealFail, From: w.to, To: "A", Origin: "A", ID: s[0].ID}); err != nil {
			t.Fatal(err)
		}
	}
	// After the farthest locale failed the node backs off, then starts local again.
	a.Tick(now)
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 0 {
		t.Fatalf("stole again without backing off: %+v", s)
	}
	a.Tick(now.Add(time.Second)) // BackoffMin, within the neighbours' timeout
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].Locale != LocaleLocal {
		t.Fatalf("after the back-off: %+v", s)
	}
}

func TestNRSPropagatesOnlyWithinTheSpecifiedLocale(t *testing.T) {
	// B is fully used but gives nothing (policy none decides); its neighbours: C is local
	// to it, D regional. A local packet from A may only go on to C.
	b2 := mustNode(t, Config{ID: "B", Policy: mustPolicy(t, PolicyNone), MeasureLatency: true})
	if err := b2.Update(t0, node("B", 2, 0), nil); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, b2, "C", "D")
	pinged(t, b2, map[string]time.Duration{"C": time.Millisecond, "D": 50 * time.Millisecond})
	prof := node("A", 2, 1)
	for i := 0; i < 20; i++ {
		if err := b2.Step(t0.Add(time.Second), Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: uint64(i + 1), TTL: 2, Profile: &prof, Locale: LocaleLocal}); err != nil {
			t.Fatal(err)
		}
		f := ofKind(b2.Ready(), KindStealRequest)
		if len(f) != 1 || f[0].To != "C" || f[0].Locale != LocaleLocal {
			t.Fatalf("local packet forwarded as %+v", f)
		}
	}
	// A national packet that reached B (national to A) travels on in B's area, to C, which
	// is as far from A as B is; never to D, B's regional peer.
	for i := 0; i < 20; i++ {
		if err := b2.Step(t0.Add(time.Second), Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: uint64(100 + i), TTL: 2, Profile: &prof, Locale: LocaleNational}); err != nil {
			t.Fatal(err)
		}
		f := ofKind(b2.Ready(), KindStealRequest)
		if len(f) != 1 || f[0].To != "C" || f[0].Locale != LocaleNational {
			t.Fatalf("national packet forwarded as %+v", f)
		}
	}
	// Without a local peer, B has nowhere to forward it: it fails back to A.
	b2.dropPeer("C")
	if err := b2.Step(t0.Add(time.Second), Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 99, TTL: 2, Profile: &prof, Locale: LocaleNational}); err != nil {
		t.Fatal(err)
	}
	only(t, b2.Ready(), KindStealFail)
}

// "Random steal packets specify which locale they are to travel" (seed 003 §3.3), as the
// origin sees it. Two clusters 15 ms apart: a regional packet of b3 goes to a node of
// cluster a and travels on inside cluster a, never back into cluster b (b3's local
// locale), so it crosses the wide-area link once.
func TestNRSStealPacketTravelsInItsOriginsLocale(t *testing.T) {
	ms := time.Millisecond
	a1 := mustNode(t, Config{ID: "a1", Policy: mustPolicy(t, PolicyNone), MeasureLatency: true})
	if err := a1.Update(t0, node("a1", 2, 0), nil); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, a1, "a2", "a3", "b1", "b2", "b3")
	pinged(t, a1, map[string]time.Duration{"a2": 2 * ms, "a3": 3 * ms, "b1": 31 * ms, "b2": 32 * ms, "b3": 33 * ms})
	prof := node("b3", 2, 1)
	for i := 0; i < 40; i++ {
		if err := a1.Step(t0.Add(time.Second), Message{Kind: KindStealRequest, From: "b3", To: "a1", Origin: "b3", ID: uint64(i + 1), TTL: 3, Profile: &prof, Locale: LocaleRegional}); err != nil {
			t.Fatal(err)
		}
		f := ofKind(a1.Ready(), KindStealRequest)
		if len(f) != 1 || (f[0].To != "a2" && f[0].To != "a3") {
			t.Fatalf("b3's regional packet forwarded by a1 as %+v: want it to stay in cluster a", f)
		}
	}
}

func TestCRSAtMostOneAsynchronousWideAreaSteal(t *testing.T) {
	a := gridNode(t, "A", PolicyCRS, "x", 1, nil, map[string]string{"B": "x", "C": "y", "D": "y"})
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)
	if len(s) != 2 {
		t.Fatalf("want a wide-area and a local steal, got %+v", s)
	}
	wide, local := s[0], s[1]
	if !wide.Wide || wide.Cluster != "y" || !wide.InCluster || (wide.To != "C" && wide.To != "D") {
		t.Fatalf("wide-area steal: %+v", wide)
	}
	if local.Wide || local.To != "B" || local.Cluster != "x" || !local.InCluster {
		t.Fatalf("local steal: %+v", local)
	}
	// The local steal fails: more local steals follow ("as long as the flag is set, only
	// local stealing will be performed"), none wide.
	for i, at := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} { // within the steal timeout
		if err := a.Step(t0, Message{Kind: KindStealFail, From: local.To, To: "A", Origin: "A", ID: local.ID}); err != nil {
			t.Fatal(err)
		}
		a.Tick(t0.Add(at))
		s = ofKind(a.Ready(), KindStealRequest)
		if len(s) != 1 || s[0].Wide || s[0].To != "B" {
			t.Fatalf("round %d: want one local steal, got %+v", i, s)
		}
		local = s[0]
	}
	if st := a.Stats(); st.WideStealsSent != 1 {
		t.Fatalf("wide steals sent: %d", st.WideStealsSent)
	}
	// One request crossed clusters (the wide one), the four local ones stayed inside.
	if st := a.Stats(); st.StealRequestsAcross != 1 || st.StealRequestsInCluster != 4 {
		t.Fatalf("steal requests in cluster %d, across %d; want 4 and 1", st.StealRequestsInCluster, st.StealRequestsAcross)
	}
	// "When a reply for a wide-area steal arrives, CRS simply resets the flag and, if the
	// request was successful, puts the new job into the work queue."
	if err := a.Step(t0, Message{Kind: KindStealAccept, From: wide.To, To: "A", Origin: "A", ID: wide.ID, Rank: RankID{"j", 4}, CPUUse: 1}); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.WideStealsAccepted != 1 || !a.Local().Hosts(RankID{"j", 4}) {
		t.Fatalf("wide accept not booked: %+v", st)
	}
}

func TestCRSLocalStealsStayInTheCluster(t *testing.T) {
	b := gridNode(t, "B", PolicyNone, "x", 0, nil, map[string]string{"E": "x", "C": "y", "D": "y"})
	prof := node("A", 2, 1)
	for i := 0; i < 20; i++ {
		if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: uint64(i + 1), TTL: 2, Profile: &prof, InCluster: true, Cluster: "x"}); err != nil {
			t.Fatal(err)
		}
		if f := ofKind(b.Ready(), KindStealRequest); len(f) != 1 || f[0].To != "E" {
			t.Fatalf("local packet left the cluster: %+v", f)
		}
	}
	if st := b.Stats(); st.StealRequestsInCluster != 20 || st.StealRequestsAcross != 0 {
		t.Fatalf("forwarded steal requests in cluster %d, across %d; want 20 and 0", st.StealRequestsInCluster, st.StealRequestsAcross)
	}
}

// Random stealing ignores clusters: with one neighbour in the node's cluster and two in
// another, its requests cross clusters too, which the counters show.
func TestRSStealRequestsCrossClustersAndAreCounted(t *testing.T) {
	a := gridNode(t, "A", PolicyRS, "x", 1, nil, map[string]string{"B": "x", "C": "y", "D": "y"})
	now := t0
	for i := 0; i < 60; i++ {
		a.Tick(now)
		s := ofKind(a.Ready(), KindStealRequest)
		if len(s) != 1 {
			t.Fatalf("round %d: want one steal, got %+v", i, s)
		}
		if err := a.Step(now, Message{Kind: KindStealFail, From: s[0].To, To: "A", Origin: "A", ID: s[0].ID}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute) // past any back-off
		for _, p := range []string{"B", "C", "D"} {
			prof := node(p, 2, 0.5)
			prof.Cluster = map[string]string{"B": "x", "C": "y", "D": "y"}[p]
			if err := a.Step(now, Message{Kind: KindHeartbeat, From: p, To: "A", Profile: &prof}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := a.Stats()
	if st.StealRequestsInCluster+st.StealRequestsAcross != 60 || st.StealRequestsInCluster == 0 || st.StealRequestsAcross == 0 {
		t.Fatalf("60 random steals: %d in cluster, %d across", st.StealRequestsInCluster, st.StealRequestsAcross)
	}
}

func TestCRSWithoutClustersIsRandomStealing(t *testing.T) {
	a := gridNode(t, "A", PolicyCRS, "", 1, nil, map[string]string{"B": "", "C": ""})
	a.Tick(t0)
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].Wide {
		t.Fatalf("one cluster: want one ordinary steal, got %+v", s)
	}
}

// overloaded hosts three ranks on two CPUs with nothing idle.
func overloadedRanks() []RankProfile {
	return []RankProfile{rankProfile("j", 0, .7), rankProfile("j", 1, .6), rankProfile("j", 2, .7)}
}

func TestRobinHoodOverloadedNodeAsksNAcquaintances(t *testing.T) {
	peers := map[string]string{"B": "", "C": "", "D": "", "E": "", "F": ""}
	a := gridNode(t, "A", PolicyRobinHood, "", 0, overloadedRanks(), peers)
	a.Tick(t0)
	r := a.Ready()
	reqs := ofKind(r, KindBalanceRequest)
	if len(reqs) != 3 {
		t.Fatalf("want balance requests to 3 acquaintances, got %+v", r.Messages)
	}
	seen := map[string]bool{}
	for _, m := range reqs {
		if seen[m.To] || m.Profile == nil || m.Profile.Node != "A" || m.ID != reqs[0].ID {
			t.Fatalf("bad request set %+v", reqs)
		}
		seen[m.To] = true
	}
	if len(ofKind(r, KindStealRequest)) != 0 {
		t.Fatal("Robin-Hood alone does not steal")
	}
	// Not overloaded: no request.
	calm := gridNode(t, "A", PolicyRobinHood, "", 0.5, overloadedRanks()[:1], peers)
	calm.Tick(t0)
	if m := ofKind(calm.Ready(), KindBalanceRequest); len(m) != 0 {
		t.Fatalf("calm node pushed: %+v", m)
	}
}

func TestRobinHoodUnderloadedNodeOfSimilarRankAnswers(t *testing.T) {
	req := func(b *Node, cpusA int) []Message {
		prof := node("A", cpusA, 0, ids("j", 0, 1, 2)...)
		if err := b.Step(t0, Message{Kind: KindBalanceRequest, From: "A", To: "B", Origin: "A", ID: 7, Profile: &prof}); err != nil {
			t.Fatal(err)
		}
		return ofKind(b.Ready(), KindBalanceOffer)
	}
	idle := gridNode(t, "B", PolicyRobinHood, "", 1, nil, nil)
	// rank(B)=2 ≥ RB × rank(A) = 0.7 × 2: "B sends a response to A".
	if o := req(idle, 2); len(o) != 1 || o[0].To != "A" || o[0].ID != 7 || o[0].Profile.Node != "B" {
		t.Fatalf("offer: %+v", o)
	}
	// rank(B)=2 < 0.7 × rank(A)=0.7 × 4: silence.
	if o := req(idle, 4); len(o) != 0 {
		t.Fatalf("weaker node offered: %+v", o)
	}
	// load(B) ≥ UT: silence.
	busy := gridNode(t, "B", PolicyRobinHood, "", 0.1, nil, nil)
	if o := req(busy, 2); len(o) != 0 {
		t.Fatalf("loaded node offered: %+v", o)
	}
}

func TestRobinHoodMigratesToTheFirstResponder(t *testing.T) {
	a := gridNode(t, "A", PolicyRobinHood, "", 0, overloadedRanks(), map[string]string{"B": "", "C": "", "D": ""})
	a.Tick(t0)
	id := ofKind(a.Ready(), KindBalanceRequest)[0].ID
	offer := func(from string) Ready {
		prof := node(from, 2, 1)
		if err := a.Step(t0, Message{Kind: KindBalanceOffer, From: from, To: "A", Origin: "A", ID: id, Profile: &prof}); err != nil {
			t.Fatal(err)
		}
		return a.Ready()
	}
	r := offer("C")
	if len(r.Migrations) != 1 || r.Migrations[0].To != "C" {
		t.Fatalf("want a migration to the first responder C: %+v", r)
	}
	// The rank with the least CPU use (j/1), the one "with shortest service queue".
	if r.Migrations[0].Rank != (RankID{"j", 1}) {
		t.Fatalf("pushed %v", r.Migrations[0].Rank)
	}
	acc := only(t, Ready{Messages: r.Messages}, KindStealAccept)
	if acc.To != "C" || acc.ID != 0 || acc.Rank != (RankID{"j", 1}) {
		t.Fatalf("accept: %+v", acc)
	}
	// "Further responses for the same balance request can be discarded."
	if r := offer("B"); len(r.Migrations) != 0 {
		t.Fatalf("second offer used: %+v", r)
	}
	// The receiver books the pushed rank.
	c := gridNode(t, "C", PolicyRobinHood, "", 1, nil, nil)
	if err := c.Step(t0, acc); err != nil {
		t.Fatal(err)
	}
	if !c.Local().Hosts(RankID{"j", 1}) || c.Stats().PushesReceived != 1 {
		t.Fatalf("push not booked: %+v", c.Stats())
	}
}

func TestNottinghamSheriffStealsOnlyTowardsHigherRank(t *testing.T) {
	sheriff := mustPolicy(t, PolicySheriff)
	in := func(rankLocal, rankRemote int) DecisionInput {
		return DecisionInput{Now: t0, Local: node("L", rankLocal, 0.6, ids("j", 0)...), Remote: node("R", rankRemote, 0.9),
			Ranks: []RankProfile{rankProfile("j", 0, 1)}}
	}
	// "If rank(A) > RS × rank(B), B migrates an active-object to A" (RS = 1): even from a
	// node that is not loaded, through the stability guard, which knows such moves never
	// flip back.
	stable := Stabilize(PerRank(sheriff), DefaultStability())
	if d := stable.Decide(in(2, 4)); !d.Migrate {
		t.Fatalf("ranked steal refused: %+v", d)
	}
	for _, c := range [][2]int{{4, 4}, {4, 2}} {
		if d := stable.Decide(in(c[0], c[1])); d.Migrate {
			t.Fatalf("rank %d -> %d migrated: %+v", c[0], c[1], d)
		}
	}
	// The cooldown still holds.
	moved := in(2, 4)
	moved.Ranks[0].LastMigration = t0.Add(-time.Second)
	if d := stable.Decide(moved); d.Migrate {
		t.Fatalf("cooling rank moved: %+v", d)
	}
}

func TestRHNSPushesWhenOverloadedAndStealsByRank(t *testing.T) {
	rhns := mustPolicy(t, PolicyRHNS)
	over := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2)...), Remote: node("R", 2, 1), Ranks: overloadedRanks()}
	if d := rhns.Decide(over); !d.Migrate {
		t.Fatalf("overloaded, similar underloaded remote: %+v", d)
	}
	calm := DecisionInput{Local: node("L", 2, .5, ids("j", 0)...), Remote: node("R", 4, 1), Ranks: overloadedRanks()[:1]}
	if d := rhns.Decide(calm); !d.Migrate {
		t.Fatalf("calm node, better remote: Sheriff must give: %+v", d)
	}
	calm.Remote = node("R", 2, 1)
	if d := rhns.Decide(calm); d.Migrate {
		t.Fatalf("calm node, equal remote: %+v", d)
	}
	if p := protocolOf(rhns); !p.Push || p.Steal != ScopeAnywhere || p.PushFanout != 3 {
		t.Fatalf("protocol %+v", p)
	}
	if p := protocolOf(mustPolicy(t, PolicyRobinHood)); p.Steal != ScopeNone {
		t.Fatalf("robin-hood protocol %+v", p)
	}
}

// The Sheriff steals from acquaintances it could take a rank from: its steal requests go
// (and are forwarded) to neighbours whose heartbeats showed ranks and a lower rank than the
// stealer's, when there is one; otherwise to a random neighbour.
func TestSheriffStealsFromLowerRankedAcquaintancesHostingRanks(t *testing.T) {
	peers := []NodeProfile{
		node("B", 2, 0.5, ids("j", 0)...), // lower rank, hosts a rank: the only fit
		node("C", 8, 0.5, ids("j", 1)...), // hosts a rank, higher rank
		node("D", 2, 1),                   // lower rank, nothing to give
	}
	for seed := uint64(1); seed <= 20; seed++ {
		a := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicySheriff), Rand: newRand(seed)})
		if err := a.Update(t0, node("A", 4, 1), nil); err != nil {
			t.Fatal(err)
		}
		for i := range peers {
			if err := a.Step(t0, Message{Kind: KindHeartbeat, From: peers[i].Node, To: "A", Profile: &peers[i]}); err != nil {
				t.Fatal(err)
			}
		}
		a.Ready()
		a.Tick(t0)
		if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].To != "B" {
			t.Fatalf("seed %d: steal %+v, want one to B", seed, s)
		}
		// Forwarding another stealer's request: the same preference, by that stealer's rank.
		e := node("E", 4, 1)
		if err := a.Step(t0, Message{Kind: KindStealRequest, From: "E", To: "A", Origin: "E", ID: seed, TTL: 2, Profile: &e}); err != nil {
			t.Fatal(err)
		}
		if f := ofKind(a.Ready(), KindStealRequest); len(f) != 1 || f[0].To != "B" {
			t.Fatalf("seed %d: forwarded %+v, want to B", seed, f)
		}
	}
	// No fitting neighbour: a random one, as in Bustos' algorithm.
	a := gridNode(t, "A", PolicySheriff, "", 1, nil, map[string]string{"D": ""})
	a.Tick(t0)
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].To != "D" {
		t.Fatalf("fallback steal %+v", s)
	}
}

// --- Bustos' Sheriff on a large grid (seed 001 §5.5, §6.1.4): gathering on the best nodes ---

// heartbeat delivers a heartbeat of prof (with hint lists) from prof.Node to n.
func heartbeat(t *testing.T, now time.Time, n *Node, prof NodeProfile, best, hosts []Hint) {
	t.Helper()
	if err := n.Step(now, Message{Kind: KindHeartbeat, From: prof.Node, To: n.ID(), Profile: &prof, Best: best, Hosts: hosts}); err != nil {
		t.Fatal(err)
	}
}

// sheriffNode is a node of policy name with cpus CPUs at availability avail hosting ranks
// (each using 1 CPU), at t0.
func sheriffNode(t *testing.T, id, policy string, cpus int, avail float64, ranks ...int) *Node {
	t.Helper()
	n := mustNode(t, Config{ID: id, Policy: mustPolicy(t, policy)})
	var rs []RankProfile
	for _, r := range ranks {
		rs = append(rs, rankProfile("j", r, 1))
	}
	if err := n.Update(t0, node(id, cpus, avail, ids("j", ranks...)...), rs); err != nil {
		t.Fatal(err)
	}
	return n
}

// "All peers keep frequently their lists up-to-date ... the peer sends a Heart Beat to all of
// its acquaintances" (§3.2): the heartbeats also pass on, one hop further each time, the best
// underloaded nodes and the lowest-ranked hosts their senders know of, and a node trusts a
// neighbour's own heartbeat over what others say of it.
func TestHeartbeatsPassOnTheBestUnderloadedNodesAndTheLowestHostsKnown(t *testing.T) {
	a := sheriffNode(t, "A", PolicyRHNS, 4, 1)             // underloaded, rank 4, hosts nothing
	heartbeat(t, t0, a, node("B", 2, 0.5, ids("j", 0)...), // a host of rank 2, not underloaded
		[]Hint{{Node: "X", Rank: 16, Hops: 2}, {Node: "C", Rank: 8, Hops: 1}, {Node: "Y", Rank: 30, Hops: MaxHintHops}},
		[]Hint{{Node: "B", Rank: 2}, {Node: "W", Rank: 1, Hops: 3}, {Node: "A", Rank: 4, Hops: 1}})
	heartbeat(t, t0, a, node("C", 8, 0, ids("j", 1)...), nil, []Hint{{Node: "C", Rank: 8}}) // C is full now
	heartbeat(t, t0, a, node("D", 6, 1), []Hint{{Node: "D", Rank: 6}, {Node: "X", Rank: 16, Hops: 1}}, nil)
	a.Tick(t0)
	var hb []Message
	for _, m := range ofKind(a.Ready(), KindHeartbeat) {
		hb = append(hb, m)
	}
	if len(hb) != 3 {
		t.Fatalf("heartbeats %+v", hb)
	}
	// Best: X (16) at 2 hops through D (the 3-hop copy through B loses), D (6) at 1 hop, A
	// itself (4) — not C, whose own heartbeat says it is full, nor Y, MaxHintHops+1 away.
	wantBest := []Hint{{Node: "X", Rank: 16, Hops: 2}, {Node: "D", Rank: 6, Hops: 1}, {Node: "A", Rank: 4}}
	// Hosts, lowest first: W (1) at 4 hops, B (2) at 1, C (8) at 1; not A (hosts nothing).
	wantHosts := []Hint{{Node: "W", Rank: 1, Hops: 4}, {Node: "B", Rank: 2, Hops: 1}, {Node: "C", Rank: 8, Hops: 1}}
	for _, m := range hb {
		if !slices.Equal(m.Best, wantBest) || !slices.Equal(m.Hosts, wantHosts) {
			t.Fatalf("heartbeat to %s: best %+v hosts %+v", m.To, m.Best, m.Hosts)
		}
	}
	if best, hosts := a.Hints(); !slices.Equal(best, wantBest) || !slices.Equal(hosts, wantHosts) {
		t.Fatalf("Hints() = %+v, %+v", best, hosts)
	}
	// Robin-Hood alone keeps Bustos' heartbeats: no hints.
	rh := sheriffNode(t, "A", PolicyRobinHood, 4, 1)
	heartbeat(t, t0, rh, node("B", 2, 0.5, ids("j", 0)...), nil, []Hint{{Node: "B", Rank: 2}})
	rh.Tick(t0)
	for _, m := range ofKind(rh.Ready(), KindHeartbeat) {
		if m.Best != nil || m.Hosts != nil {
			t.Fatalf("robin-hood heartbeat with hints: %+v", m)
		}
	}
}

// "If a processor A is underloaded, it ... sends to this node a steal message and the value
// of rank(A)" (§5.5): the node is a lower-ranked host a heartbeat named, near or far, rather
// than a random acquaintance.
func TestSheriffStealsFromALowerRankedHostTheHeartbeatsName(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		a := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicySheriff), Rand: newRand(seed)})
		if err := a.Update(t0, node("A", 8, 1), nil); err != nil {
			t.Fatal(err)
		}
		// Neighbour B names far hosts F (rank 2) and G (rank 12, above A's 8).
		heartbeat(t, t0, a, node("B", 2, 1), nil, []Hint{{Node: "F", Rank: 2, Hops: 2}, {Node: "G", Rank: 12, Hops: 1}})
		a.Ready()
		a.Tick(t0)
		s := ofKind(a.Ready(), KindStealRequest)
		if len(s) != 1 || s[0].To != "F" || s[0].Profile.Node != "A" || a.Stats().HintedSteals != 1 {
			t.Fatalf("seed %d: steals %+v, want one to F", seed, s)
		}
	}
	// No lower-ranked host known: the acquaintances, as before.
	a := sheriffNode(t, "A", PolicySheriff, 8, 1)
	heartbeat(t, t0, a, node("B", 2, 1), nil, []Hint{{Node: "G", Rank: 12, Hops: 1}})
	a.Ready()
	a.Tick(t0)
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].To != "B" {
		t.Fatalf("steals %+v, want one to B", s)
	}
}

// "B migrates an active-object to A" — an underloaded node of high rank takes several in
// one steal, as many as it holds without becoming overloaded (jλ < μ), not one per cooldown.
func TestSheriffOfHighRankStealsSeveralObjectsUpToItsCapacity(t *testing.T) {
	b := sheriffNode(t, "B", PolicySheriff, 6, 0, 0, 1, 2, 3, 4, 5) // rank 6, 6 ranks of 1 CPU each
	stealer := node("A", 4, 0.75, ids("j", 9)...)                   // rank 4 < 6: no steal
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, Profile: &stealer}); err != nil {
		t.Fatal(err)
	}
	if r := b.Ready(); len(r.Migrations) != 0 {
		t.Fatalf("lower rank stole %+v", r.Migrations)
	}
	// A has 10 CPUs, 1 used: 9 free, and stays not overloaded while more than 0.05 × 10 =
	// 0.5 CPU stays free: 8 ranks fit, B has 6.
	stealer = node("A", 10, 0.9, ids("j", 9)...)
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 2, Profile: &stealer}); err != nil {
		t.Fatal(err)
	}
	r := b.Ready()
	if len(r.Migrations) != 6 || len(ofKind(r, KindStealAccept)) != 6 {
		t.Fatalf("want all 6 ranks: %+v", r.Migrations)
	}
	// A 5-CPU stealer with 1 rank (4 free) takes 3: the fourth would leave it no CPU free.
	b = sheriffNode(t, "B", PolicySheriff, 2, 0.5, 0, 1, 2, 3, 4, 5)
	stealer = node("A", 5, 0.8, ids("j", 9)...)
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 3, Profile: &stealer}); err != nil {
		t.Fatal(err)
	}
	r = b.Ready()
	if len(r.Migrations) != 3 {
		t.Fatalf("want 3 ranks: %+v", r.Migrations)
	}
	// A crowded giver: 4 ranks share 2 CPUs, each uses 0.5 and would use 1 with room. The
	// same stealer takes 3, not 7, and books each at 1 CPU.
	b = mustNode(t, Config{ID: "B", Policy: mustPolicy(t, PolicySheriff)})
	var half []RankProfile
	for i := 0; i < 4; i++ {
		half = append(half, rankProfile("j", i, 0.5))
	}
	if err := b.Update(t0, node("B", 2, 0, ids("j", 0, 1, 2, 3)...), half); err != nil {
		t.Fatal(err)
	}
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 3, Profile: &stealer}); err != nil {
		t.Fatal(err)
	}
	crowd := b.Ready()
	if acc := ofKind(crowd, KindStealAccept); len(acc) != 3 || acc[0].CPUUse != 1 || acc[2].CPUUse != 1 {
		t.Fatalf("crowded giver: %+v", acc)
	}
	// The stealer books them all; the first ends its steal, the others count as bulk.
	a := sheriffNode(t, "A", PolicySheriff, 5, 0.8, 9)
	heartbeat(t, t0, a, node("B", 2, 0, ids("j", 0, 1, 2, 3, 4, 5)...), nil, nil)
	a.Tick(t0)
	req := ofKind(a.Ready(), KindStealRequest)[0]
	for _, acc := range ofKind(r, KindStealAccept) {
		acc.ID = req.ID
		if err := a.Step(t0, acc); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.StealsAccepted != 1 || st.BulkRanks != 2 || st.LateAccepts != 0 || len(a.Local().Ranks) != 4 {
		t.Fatalf("stats %+v, local %+v", st, a.Local())
	}
	// Without Bulk, one rank per steal, as in Bustos' Sheriff.
	cfg := DefaultRobinHoodConfig()
	cfg.Bulk = false
	one, err := NewBalancer(PolicySheriff, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = mustNode(t, Config{ID: "B", Policy: one})
	if err := b.Update(t0, node("B", 2, 0.5, ids("j", 0, 1)...), []RankProfile{rankProfile("j", 0, 1), rankProfile("j", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 4, Profile: &stealer}); err != nil {
		t.Fatal(err)
	}
	if r := b.Ready(); len(r.Migrations) != 1 {
		t.Fatalf("without bulk: %+v", r.Migrations)
	}
}

// Bustos' Sheriff is "trying to collect all active-objects to the best ranked node": a node
// keeps its objects for the best underloaded nodes it knows of, and gives them to a better
// stealer only if fewer than Prefer known underloaded nodes rank above it.
func TestSheriffKeepsObjectsForTheBestUnderloadedNodesKnown(t *testing.T) {
	sheriff := Stabilize(PerRank(mustPolicy(t, PolicySheriff)), DefaultStability()) // Prefer 3
	in := DecisionInput{Now: t0, Local: node("L", 2, 0.5, ids("j", 0)...), Remote: node("R", 4, 1),
		Ranks: []RankProfile{rankProfile("j", 0, 1)},
		Best:  []Hint{{Node: "X", Rank: 16, Hops: 2}, {Node: "Y", Rank: 12, Hops: 1}, {Node: "Z", Rank: 8, Hops: 3}}}
	if d := sheriff.Decide(in); d.Migrate || !strings.Contains(d.Reason, "wait") {
		t.Fatalf("three better nodes known, rank 4 stealer: %+v", d)
	}
	in.Remote = node("Z", 8, 1) // the third best known: it may take it
	if d := sheriff.Decide(in); !d.Migrate {
		t.Fatalf("one of the 3 best known: %+v", d)
	}
	in.Remote, in.Best = node("R", 4, 1), in.Best[:2] // only two better known
	if d := sheriff.Decide(in); !d.Migrate {
		t.Fatalf("two better known: %+v", d)
	}
	// An overloaded node does not wait: its objects suffer where they are.
	in.Best = []Hint{{Node: "X", Rank: 16}, {Node: "Y", Rank: 12}, {Node: "Z", Rank: 8}}
	in.Local = node("L", 2, 0, ids("j", 0, 1, 2)...)
	if d := sheriff.Decide(in); !d.Migrate {
		t.Fatalf("overloaded host: %+v", d)
	}
}

// Bustos' overload test (jλ ≥ μ) on the receiving side: neither Robin-Hood nor the Sheriff
// moves an object to a node it would overload, which would only shed it again.
func TestBustosNoMoveToANodeThatWouldBeOverloaded(t *testing.T) {
	rhns := mustPolicy(t, PolicyRHNS)
	// Overloaded L (2 CPUs, 3 ranks): the rank pushed uses 0.6 CPU of a 2/3 share, so it
	// wants 0.9 CPU. R (4 CPUs) with 2 free keeps 1.1 > 0.05 × 4 free; with 1 free, 0.1.
	over := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2)...), Remote: node("R", 4, 0.5), Ranks: overloadedRanks()}
	if d := rhns.Decide(over); !d.Migrate {
		t.Fatalf("room for it: %+v", d)
	}
	over.Remote = node("R", 4, 0.25)
	if d := rhns.Decide(over); d.Migrate || !strings.Contains(d.Reason, "overloaded") {
		t.Fatalf("robin-hood overloads the remote: %+v", d)
	}
	// A Sheriff steal by a better node with less than a rank's CPU free.
	calm := DecisionInput{Local: node("L", 2, 0.5, ids("j", 0)...), Remote: node("R", 4, 0.25), Ranks: []RankProfile{rankProfile("j", 0, 1)}}
	if d := rhns.Decide(calm); d.Migrate || !strings.Contains(d.Reason, "sheriff") {
		t.Fatalf("sheriff overloads the remote: %+v", d)
	}
}

// "A processor A is overloaded, it sends a balance request ... to a subset of n of its
// acquaintances": one of them is one of the best underloaded nodes it knows of, which can
// then take the object where the Sheriff would gather it.
func TestRobinHoodAsksABestKnownNodeFirst(t *testing.T) {
	a := sheriffNode(t, "A", PolicyRHNS, 2, 0, 0, 1, 2)
	for _, p := range []string{"B", "C", "D", "E"} {
		heartbeat(t, t0, a, node(p, 2, 0.5), nil, nil)
	}
	heartbeat(t, t0, a, node("B", 2, 0.5), []Hint{{Node: "X", Rank: 16, Hops: 1}}, nil)
	a.Ready()
	a.Tick(t0)
	reqs := ofKind(a.Ready(), KindBalanceRequest)
	if len(reqs) != 3 || reqs[0].To != "X" {
		t.Fatalf("want 3 balance requests, the first to X: %+v", reqs)
	}
}

// "If an actor is not satisfied, it cannot process messages as quickly as it is receiving
// them" (seed 003 §2). A rank that gets a tenth of a core while it computes (a competing
// user took most of its node) is unsatisfied, and RS gives it, even though its node shows
// idle time (the rank waits for its far peers' halos between its slow computations); a
// rank that computes at full speed on the same lightly loaded node is satisfied.
func TestRSActorThatCannotProcessMessagesAsQuicklyAsItReceivesThemIsUnsatisfied(t *testing.T) {
	rs := mustPolicy(t, PolicyRS)
	local := node("L", 1, 0.3, ids("j", 0, 1)...)
	local.EffectiveCPUs = 0.1
	fast := rankProfile("j", 0, 0.7)
	fast.CompTime = 7 * time.Second // computing 70% of its 10 s window, at 0.7 CPUs: a full core
	slow := rankProfile("j", 1, 0.07)
	slow.CompTime = 7 * time.Second // computing 70% of the window at 0.07 CPUs: a tenth of a core
	if speed, starved, ok := RankStarved(slow); !ok || !starved || speed > 0.11 {
		t.Fatalf("slow rank: speed %v, starved %v, measured %v", speed, starved, ok)
	}
	if _, starved, ok := RankStarved(fast); !ok || starved {
		t.Fatalf("fast rank: starved %v, measured %v", starved, ok)
	}
	in := DecisionInput{Local: local, Remote: node("R", 1, 1), Ranks: []RankProfile{fast, slow}}
	d := rs.Decide(in)
	if !d.Migrate || d.Rank != slow.ID() {
		t.Fatalf("the starved rank must go: %+v", d)
	}
	// Only satisfied ranks, on a lightly loaded theater: nothing goes.
	in.Ranks = []RankProfile{fast}
	if d := rs.Decide(in); d.Migrate {
		t.Fatalf("a satisfied rank on a lightly loaded theater was given: %+v", d)
	}
	// Unmeasured compute time: the node's availability alone decides, as before.
	unmeasured := rankProfile("j", 1, 0.07)
	in.Ranks = []RankProfile{unmeasured}
	if d := rs.Decide(in); d.Migrate {
		t.Fatalf("a rank without a compute time was judged starved: %+v", d)
	}
}

// Satin's CRS with one cluster overloaded (the grid experiment): a node of the other
// cluster, idle, sends its wide-area steal to the loaded cluster, whose node hosts one
// starved rank and shows idle time; the steal brings the rank over, past the stability
// guard (the idle node's free CPUs exceed the loaded one's by more than the rank uses).
// Before ranks counted as unsatisfied when starved, this wide steal always failed with
// "lightly loaded", and the loaded cluster kept its last ranks.
func TestCRSWideAreaStealTakesTheStarvedRankOfAnOverloadedCluster(t *testing.T) {
	idle := gridNode(t, "b3", PolicyCRS, "b", 1, nil, map[string]string{"b1": "b", "a1": "a"})
	loaded := mustNode(t, Config{ID: "a1", Policy: mustPolicy(t, PolicyCRS), Cluster: "a"})
	r := rankProfile("j", 4, 0.07)
	r.CompTime = 7 * time.Second
	prof := node("a1", 1, 0.3, r.ID())
	prof.EffectiveCPUs = 0.1 // a competing user takes 80% of its half CPU
	if err := loaded.Update(t0, prof, []RankProfile{r}); err != nil {
		t.Fatal(err)
	}
	idle.Tick(t0)
	var wide Message
	for _, m := range ofKind(idle.Ready(), KindStealRequest) {
		if m.Wide {
			wide = m
		}
	}
	if wide.To != "a1" {
		t.Fatalf("no wide-area steal to a1")
	}
	if err := loaded.Step(t0, wide); err != nil {
		t.Fatal(err)
	}
	rd := loaded.Ready()
	if len(rd.Migrations) != 1 || rd.Migrations[0].Rank != r.ID() || rd.Migrations[0].To != "b3" {
		t.Fatalf("the starved rank did not go to the wide-area stealer: migrations %+v, decisions %+v", rd.Migrations, rd.Decisions)
	}
	accepts := ofKind(rd, KindStealAccept)
	if len(accepts) != 1 {
		t.Fatalf("no steal accept: %+v", rd.Messages)
	}
	if err := idle.Step(t0, accepts[0]); err != nil {
		t.Fatal(err)
	}
	if st := idle.Stats(); st.WideStealsAccepted != 1 {
		t.Fatalf("wide steals accepted: %d", st.WideStealsAccepted)
	}
}

// NRS "classifies its neighbors into four groups ... by the following ping times" (seed
// 003 §3.3): ping times of the network. Echoes that the two agents were slow to handle
// (their nodes' CPUs busy) arrive late, but never early, so a neighbour one network hop
// away whose pings mostly take 30 to 90 ms, yet one of the last few took 2 ms, is local;
// a neighbour across a 15 ms link, never under 30 ms, is regional. The smoothed round trip
// (Latency, for status) keeps the host delays; a change of the network shows once the
// window has passed.
func TestNRSLocalesByPingTimeOfTheNetworkNotOfTheHosts(t *testing.T) {
	ms := time.Millisecond
	n := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicyNRS)})
	connect(t, t0, n, "B", "C")
	near := []time.Duration{45 * ms, 2 * ms, 90 * ms, 30 * ms, 60 * ms}
	far := []time.Duration{95 * ms, 31 * ms, 140 * ms, 33 * ms, 70 * ms}
	round := 0
	ping := func(rtt map[string]time.Duration) { // one heartbeat round, 2 s after the last
		t.Helper()
		now := t0.Add(time.Duration(round) * 2 * time.Second)
		round++
		n.Tick(now)
		for _, hb := range ofKind(n.Ready(), KindHeartbeat) {
			if d, ok := rtt[hb.To]; ok {
				if err := n.Step(now.Add(d), Message{Kind: KindPong, From: hb.To, To: "A", ID: hb.ID}); err != nil {
					t.Fatal(err)
				}
			}
		}
		n.Ready()
	}
	for i := range near {
		ping(map[string]time.Duration{"B": near[i], "C": far[i]})
	}
	if l := n.LocaleOf("B"); l != LocaleLocal {
		t.Errorf("B, one echo in 2 ms: locale %v, want local", l)
	}
	if rtt, _ := n.BaseLatency("B"); rtt != 2*ms {
		t.Errorf("B's base round trip %v, want 2ms", rtt)
	}
	if srtt, _ := n.Latency("B"); srtt <= 10*ms {
		t.Errorf("B's smoothed round trip %v: the host delays should show in it", srtt)
	}
	if l := n.LocaleOf("C"); l != LocaleRegional {
		t.Errorf("C, never under 31 ms: locale %v, want regional", l)
	}
	// The network to B grows: once the window holds only the new times, B is regional.
	for range rttWindow {
		ping(map[string]time.Duration{"B": 40 * ms, "C": 40 * ms})
	}
	if l := n.LocaleOf("B"); l != LocaleRegional {
		t.Errorf("B after %d echoes of 40 ms: locale %v, want regional", rttWindow, l)
	}
}
