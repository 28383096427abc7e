package iosbridge

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Tests of the RAS protocol module, Desell's thesis §2.2.1, and the membership rules.

// connect makes b a neighbour of a by delivering a heartbeat from b.
func connect(t *testing.T, now time.Time, a *Node, peers ...string) {
	t.Helper()
	for _, p := range peers {
		if err := a.Step(now, Message{Kind: KindHeartbeat, From: p, To: a.ID()}); err != nil {
			t.Fatal(err)
		}
	}
	a.Ready()
}

func idleNode(t *testing.T, id string, peers ...string) *Node {
	t.Helper()
	n := mustNode(t, Config{ID: id, Policy: mustPolicy(t, PolicySRAS)})
	if err := n.Update(t0, node(id, 2, 1), nil); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, n, peers...)
	return n
}

func busyNode(t *testing.T, id string, peers ...string) *Node {
	t.Helper()
	n := mustNode(t, Config{ID: id, Policy: mustPolicy(t, PolicySRAS)})
	var rs []RankProfile
	for i := 0; i < 4; i++ {
		rs = append(rs, rankProfile("j", i, 0.5))
	}
	if err := n.Update(t0, node(id, 2, 0, ids("j", 0, 1, 2, 3)...), rs); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, n, peers...)
	return n
}

func only(t *testing.T, r Ready, kind Kind) Message {
	t.Helper()
	if len(r.Messages) != 1 || r.Messages[0].Kind != kind {
		t.Fatalf("want one %s, got %+v", kind, r.Messages)
	}
	return r.Messages[0]
}

func TestRASStealRequestWhenCPUUsageBelowThreshold(t *testing.T) {
	a := idleNode(t, "A", "B")
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)
	// "a neighbor is chosen at random and this steal request message will be sent", carrying
	// "a snapshot of the local profiling information" and "a time to live value".
	if len(s) != 1 || s[0].To != "B" || s[0].Origin != "A" || s[0].TTL != 3 || s[0].Profile == nil || s[0].Profile.Node != "A" {
		t.Fatalf("%+v", s)
	}
	b := busyNode(t, "B", "A") // availability 0 < 0.25: never steals
	b.Tick(t0)
	if s := ofKind(b.Ready(), KindStealRequest); len(s) != 0 {
		t.Fatalf("loaded node stole: %+v", s)
	}
}

func TestRASAtMostOneOutstandingSteal(t *testing.T) {
	a := idleNode(t, "A", "B", "C")
	for i := 0; i < 4; i++ { // StealTimeout is 5 s
		a.Tick(t0.Add(time.Duration(i) * time.Second))
	}
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 {
		t.Fatalf("want exactly one steal in flight, got %d", len(s))
	}
	// After the timeout the steal is abandoned and the node backs off (1 s, jitter ≥ 0.5 s):
	// no new request at the timeout instant, one within the next second.
	a.Tick(t0.Add(5 * time.Second))
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 0 || a.Stats().StealsTimedOut != 1 {
		t.Fatalf("steal at timeout: %+v %+v", s, a.Stats())
	}
	a.Tick(t0.Add(6 * time.Second))
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 1 || s[0].ID != 2 {
		t.Fatalf("second steal after backoff: %+v", s)
	}
}

func TestRASStealRequestForwardedWithTTLMinusOne(t *testing.T) {
	b := mustNode(t, Config{ID: "B", Policy: NonePolicy{}})
	connect(t, t0, b, "A", "C")
	prof := node("A", 2, 1)
	req := Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 7, TTL: 3, Profile: &prof}
	if err := b.Step(t0, req); err != nil {
		t.Fatal(err)
	}
	// "the time to live value is decremented and the steal request is forwarded to a
	// neighbor": never back to the origin A, so C.
	f := only(t, b.Ready(), KindStealRequest)
	if f.From != "B" || f.To != "C" || f.Origin != "A" || f.ID != 7 || f.TTL != 2 || f.Profile.Node != "A" {
		t.Fatalf("forward %+v", f)
	}
}

func TestRASFailureAtTTLZero(t *testing.T) {
	b := mustNode(t, Config{ID: "B", Policy: NonePolicy{}})
	connect(t, t0, b, "A", "C")
	prof := node("A", 2, 1)
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 7, TTL: 0, Profile: &prof}); err != nil {
		t.Fatal(err)
	}
	// "if the time to live value is zero, the protocol module responds to the initiator that
	// its steal request was unsuccessful" — directly to A, not back along the path.
	f := only(t, b.Ready(), KindStealFail)
	if f.To != "A" || f.Origin != "A" || f.ID != 7 {
		t.Fatalf("fail %+v", f)
	}
	// A node whose only neighbour is the origin cannot forward: it fails at once.
	lone := mustNode(t, Config{ID: "B", Policy: NonePolicy{}})
	connect(t, t0, lone, "A")
	if err := lone.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 8, TTL: 3, Profile: &prof}); err != nil {
		t.Fatal(err)
	}
	only(t, lone.Ready(), KindStealFail)
}

func TestRASFailureFreesStealAndBacksOffExponentially(t *testing.T) {
	a := idleNode(t, "A", "B")
	now := t0
	var waits []time.Duration
	for i := 0; i < 6; i++ {
		a.Tick(now)
		s := ofKind(a.Ready(), KindStealRequest)
		if len(s) != 1 {
			t.Fatalf("round %d: %+v", i, s)
		}
		if err := a.Step(now, Message{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: s[0].ID}); err != nil {
			t.Fatal(err)
		}
		start := now
		for a.Tick(now); len(ofKind(a.Ready(), KindStealRequest)) == 0; a.Tick(now) {
			now = now.Add(100 * time.Millisecond)
			connect(t, now, a, "B") // B stays alive
			if now.Sub(start) > time.Minute {
				t.Fatal("no steal within a minute of a failure")
			}
		}
		waits = append(waits, now.Sub(start))
		a.steal = nil // the request just sent is not part of this measurement
	}
	// Backoff b = 1, 2, 4, 8, 16, 30 s (capped); each wait is in [b/2, b] (+1 tick).
	for i, b := range []time.Duration{1, 2, 4, 8, 16, 30} {
		b *= time.Second
		if waits[i] < b/2 || waits[i] > b+100*time.Millisecond {
			t.Errorf("failure %d: waited %v, want within [%v, %v]", i+1, waits[i], b/2, b)
		}
	}
}

func TestRASAcceptWhenDecisionModuleDecides(t *testing.T) {
	b := busyNode(t, "B", "A", "D")
	prof := node("A", 2, 1)
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 3, TTL: 2, Profile: &prof}); err != nil {
		t.Fatal(err)
	}
	r := b.Ready()
	acc := only(t, r, KindStealAccept)
	if acc.To != "A" || acc.ID != 3 || acc.Rank.Job != "j" || acc.CPUUse != 0.5 {
		t.Fatalf("accept %+v", acc)
	}
	if len(r.Migrations) != 1 || r.Migrations[0].Rank != acc.Rank || r.Migrations[0].To != "A" {
		t.Fatalf("migration order %+v", r.Migrations)
	}
	// The given rank is booked: B's effective availability is 0 + 0.5/2 = 0.25 — no longer
	// "fully used", so S-RAS declines a second stealer until a fresh profile says otherwise.
	if got := b.Local().Availability; got != 0.25 || len(b.Local().Ranks) != 3 {
		t.Fatalf("effective local after give: %+v", b.Local())
	}
	prof2 := node("D", 2, 1)
	if err := b.Step(t0, Message{Kind: KindStealRequest, From: "D", To: "B", Origin: "D", ID: 1, TTL: 0, Profile: &prof2}); err != nil {
		t.Fatal(err)
	}
	only(t, b.Ready(), KindStealFail)
	// Once the sampler no longer lists the rank, the booking is settled.
	left := []RankID{}
	for _, id := range ids("j", 0, 1, 2, 3) {
		if id != acc.Rank {
			left = append(left, id)
		}
	}
	if err := b.Update(t0.Add(time.Second), node("B", 2, 0.25, left...), nil); err != nil {
		t.Fatal(err)
	}
	if len(b.outgoing) != 0 {
		t.Fatalf("booking not settled: %+v", b.outgoing)
	}
}

func TestRASAcceptEndsStealAndBooksIncomingCapacity(t *testing.T) {
	a := idleNode(t, "A", "B") // 2 free CPUs
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)[0]
	if err := a.Step(t0, Message{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: s.ID, Rank: RankID{"j", 0}, CPUUse: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.Outstanding(); ok || a.Stats().StealsAccepted != 1 {
		t.Fatal("accept must end the outstanding steal")
	}
	// One CPU booked: availability 0.5 ≥ 0.25, so A immediately steals again...
	a.Tick(t0.Add(time.Second))
	s = ofKind(a.Ready(), KindStealRequest)[0]
	if err := a.Step(t0, Message{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: s.ID, Rank: RankID{"j", 1}, CPUUse: 1}); err != nil {
		t.Fatal(err)
	}
	// ...but with both CPUs booked it stops, before any profile shows the new ranks.
	a.Tick(t0.Add(2 * time.Second))
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 0 || a.Local().Availability != 0 {
		t.Fatalf("over-stealing: %+v, local %+v", s, a.Local())
	}
	// When the ranks arrive they start their cooldown at A.
	if err := a.Update(t0.Add(3*time.Second), node("A", 2, 0, ids("j", 0, 1)...), []RankProfile{rankProfile("j", 0, 1), rankProfile("j", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range a.candidates() {
		if !c.LastMigration.Equal(t0.Add(3 * time.Second)) {
			t.Fatalf("arrival not recorded: %+v", c)
		}
	}
}

func TestRASLateAnswersAreHarmless(t *testing.T) {
	a := idleNode(t, "A", "B")
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)[0]
	if err := a.Step(t0, Message{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: s.ID + 10}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.Outstanding(); !ok {
		t.Fatal("a fail for another request must not end the current one")
	}
	// A late accept (after timeout) still books the rank: it is coming anyway.
	if err := a.Step(t0, Message{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: s.ID + 10, Rank: RankID{"j", 5}, CPUUse: 1}); err != nil {
		t.Fatal(err)
	}
	if a.Stats().LateAccepts != 1 || len(a.Local().Ranks) != 1 {
		t.Fatalf("%+v %+v", a.Stats(), a.Local())
	}
}

func TestRASOwnRequestReturningAtTTLZeroFailsLocally(t *testing.T) {
	a := idleNode(t, "A", "B")
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)[0]
	back := s
	back.From, back.To, back.TTL = "B", "A", 0
	if err := a.Step(t0, back); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.Outstanding(); ok || a.Stats().StealsFailed != 1 || a.HasReady() {
		t.Fatalf("own request at TTL 0: outstanding cleared without messages; stats %+v", a.Stats())
	}
}

func TestRASJoinAnnounceLearnsPeers(t *testing.T) {
	b := idleNode(t, "B", "A")
	c := mustNode(t, Config{ID: "C"})
	c.Join(t0, []string{"B", "C", ""})
	join := only(t, c.Ready(), KindJoin)
	if join.To != "B" {
		t.Fatalf("%+v", join)
	}
	if err := b.Step(t0, join); err != nil {
		t.Fatal(err)
	}
	ann := only(t, b.Ready(), KindAnnounce)
	if ann.To != "C" || len(ann.Peers) != 1 || ann.Peers[0] != "A" || ann.Profile == nil {
		t.Fatalf("announce %+v", ann)
	}
	if err := c.Step(t0, ann); err != nil {
		t.Fatal(err)
	}
	if got := c.Peers(); len(got) != 2 || got[0] != "A" || got[1] != "B" {
		t.Fatalf("C's peers %v", got)
	}
	if got := b.Peers(); len(got) != 2 || got[1] != "C" {
		t.Fatalf("B's peers %v", got)
	}
	if p, ok := c.PeerProfile("B"); !ok || p.Node != "B" {
		t.Fatalf("profile from announce: %+v %v", p, ok)
	}
}

func TestRASLeaveRemovesPeerAndStopsNode(t *testing.T) {
	a := idleNode(t, "A", "B", "C")
	b := idleNode(t, "B", "A", "C")
	b.Leave(t0)
	r := b.Ready()
	if len(r.Messages) != 2 || r.Messages[0].Kind != KindLeave || len(b.Peers()) != 0 {
		t.Fatalf("leave: %+v", r.Messages)
	}
	if err := a.Step(t0, r.Messages[0]); err != nil {
		t.Fatal(err)
	}
	if got := a.Peers(); len(got) != 1 || got[0] != "C" {
		t.Fatalf("A's peers after B left: %v", got)
	}
	// A never sends a steal to a node that left.
	for i := 0; i < 50; i++ {
		a.Tick(t0.Add(time.Duration(i) * time.Minute))
		for _, m := range a.Ready().Messages {
			if m.To == "B" {
				t.Fatalf("message to departed node: %+v", m)
			}
		}
	}
	if err := b.Step(t0, Message{Kind: KindHeartbeat, From: "A", To: "B"}); !errors.Is(err, ErrLeft) {
		t.Fatalf("Step after Leave: %v", err)
	}
	b.Tick(t0)
	if b.HasReady() {
		t.Fatal("a node that left must stay silent")
	}
}

// Tick skips its scan for silent neighbours until the oldest could have gone silent; a
// neighbour is still dropped at the first Tick after PeerTimeout of silence.
func TestRASHeartbeatExpiryBetweenScans(t *testing.T) {
	a := idleNode(t, "A", "B", "C") // both seen at t0
	a.Tick(t0.Add(time.Second))     // scanned: none can go silent before t0+10s
	connect(t, t0.Add(8*time.Second), a, "C")
	a.Tick(t0.Add(9 * time.Second))
	a.Tick(t0.Add(10*time.Second + time.Millisecond))
	if got := a.Peers(); len(got) != 1 || got[0] != "C" {
		t.Fatalf("after B's silence: %v", got)
	}
	a.Tick(t0.Add(17 * time.Second))
	if got := a.Peers(); len(got) != 1 {
		t.Fatalf("C heard 9 s ago: %v", got)
	}
	a.Tick(t0.Add(18*time.Second + time.Millisecond))
	if got := a.Peers(); len(got) != 0 {
		t.Fatalf("after C's silence: %v", got)
	}
}

func TestRASHeartbeatExpiryRemovesPeer(t *testing.T) {
	a := idleNode(t, "A", "B", "C") // both seen at t0; PeerTimeout 10 s
	connect(t, t0.Add(8*time.Second), a, "C")
	a.Tick(t0.Add(11 * time.Second))
	if got := a.Peers(); len(got) != 1 || got[0] != "C" {
		t.Fatalf("after B's silence: %v", got)
	}
	// Heartbeats go to the remaining neighbour every HeartbeatInterval (2 s).
	if hb := len(ofKind(a.Ready(), KindHeartbeat)); hb != 1 {
		t.Fatalf("heartbeats %d", hb)
	}
	a.Tick(t0.Add(12 * time.Second))
	for _, m := range a.Ready().Messages {
		if m.Kind == KindHeartbeat {
			t.Fatal("heartbeat before the interval elapsed")
		}
	}
}

func TestRASStepRejectsBadInput(t *testing.T) {
	a := idleNode(t, "A", "B")
	bad := node("", 1, 2)
	for _, m := range []Message{
		{Kind: KindHeartbeat, From: "B", To: "Z"},                                         // not for us
		{Kind: "gossip", From: "B", To: "A"},                                              // unknown kind
		{Kind: KindHeartbeat, From: "", To: "A"},                                          // empty node
		{Kind: KindStealRequest, From: "B", To: "A", Origin: "B", TTL: -1, Profile: &bad}, // negative TTL
	} {
		if err := a.Step(t0, m); err == nil {
			t.Errorf("Step(%+v): want error", m)
		}
	}
	if _, err := NewNode(Config{ID: "x"}); err == nil {
		t.Error("NewNode without Rand must fail")
	}
	if err := a.Update(t0, node("B", 1, 1), nil); err == nil {
		t.Error("Update with another node's profile must fail")
	}
}

// A steal travels up to TTL hops and is answered by whoever ends it: those nodes are not
// neighbours, and treating them as such (heartbeating them from then on) made every node's
// neighbourhood grow towards the whole grid in the 10,000-node simulation (iossim).
func TestRASStealTrafficDoesNotMakeNeighbours(t *testing.T) {
	a := mustNode(t, Config{ID: "A", Policy: NonePolicy{}})
	connect(t, t0, a, "B")
	far := node("Z", 2, 1)
	for _, m := range []Message{
		{Kind: KindStealRequest, From: "Y", To: "A", Origin: "Z", ID: 1, TTL: 2, Profile: &far},
		{Kind: KindStealFail, From: "X", To: "A", Origin: "A", ID: 1},
	} {
		if err := a.Step(t0, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(a.Peers()); got != "[B]" {
		t.Fatalf("peers after steal traffic: %s", got)
	}
	// Membership messages still add neighbours.
	if err := a.Step(t0, Message{Kind: KindHeartbeat, From: "C", To: "A"}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(a.Peers()); got != "[B C]" {
		t.Fatalf("peers after heartbeat: %s", got)
	}
}

// A stealer "has room" for the actor it asks for: in MPI/IOS a node hosts at most its pcmd's
// slots, and a migration to a node whose slots are full is refused on arrival. So an idle
// node whose ranks (with those promised to it) fill its slots sends no steal request, and a
// giver gives no rank to a stealer whose profile says its slots are full (the testbed
// experiment's ATS-RAS run lost a rank's move that way: the stealer took three ranks while
// its profile still had the CPU free, the third was refused).
func TestRASStealOnlyWithAFreeSlot(t *testing.T) {
	a := mustNode(t, Config{ID: "A", Policy: mustPolicy(t, PolicyATSRAS)})
	prof := node("A", 2, 1, ids("j", 0)...)
	prof.Slots = 2
	if err := a.Update(t0, prof, []RankProfile{rankProfile("j", 0, 0)}); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, a, "B")
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)
	if len(s) != 1 || s[0].Profile.Slots != 2 || len(s[0].Profile.Ranks) != 1 {
		t.Fatalf("idle node with a free slot: %+v", s)
	}
	// B gives rank 1: A's CPU is still mostly free, but with the promised rank its 2 slots
	// are full.
	if err := a.Step(t0, Message{Kind: KindStealAccept, From: "B", To: "A", Origin: "A", ID: s[0].ID, Rank: RankID{"j", 1}, CPUUse: 0.1}); err != nil {
		t.Fatal(err)
	}
	a.Tick(t0.Add(time.Second))
	if s := ofKind(a.Ready(), KindStealRequest); len(s) != 0 || a.Local().Availability < 0.25 {
		t.Fatalf("node with full slots stole: %+v, local %+v", s, a.Local())
	}

	// The giver's side: the same stealer profile with a free slot gets a rank, full does not.
	b := busyNode(t, "B", "A")
	for _, tc := range []struct {
		ranks   []RankID
		migrate bool
	}{{ids("k", 0), true}, {ids("k", 0, 1), false}} {
		thief := node("A", 2, 1, tc.ranks...)
		thief.Slots = 2
		if err := b.Step(t0, Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 7, TTL: 0, Profile: &thief}); err != nil {
			t.Fatal(err)
		}
		r := b.Ready()
		if got := len(r.Migrations) == 1; got != tc.migrate {
			t.Errorf("stealer with %d of 2 slots used: migration %v, want %v (%+v)", len(tc.ranks), got, tc.migrate, r)
		}
		if !tc.migrate && (len(r.Decisions) != 1 || !strings.Contains(r.Decisions[0].Decision.Reason, "no free slot at A (2 ranks, 2 slots)")) {
			t.Errorf("decline reason: %+v", r.Decisions)
		}
	}
}
