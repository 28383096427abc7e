package iosbridge

import (
	"testing"
	"time"
)

// stealsSent drains n's output and counts its steal requests.
func stealsSent(n *Node) int {
	return len(ofKind(n.Ready(), KindStealRequest))
}

// backedOff returns an idle node A whose steals have all failed (B was not loaded) until
// its back-off reached BackoffMax, and the time then.
func backedOff(t *testing.T) (*Node, time.Time) {
	t.Helper()
	a := mustNode(t, Config{ID: "A", Rand: fixedRand{0}})
	now := t0
	if err := a.Update(now, node("A", 2, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Step(now, Message{Kind: KindHeartbeat, From: "B", To: "A", Profile: ptr(node("B", 2, 0.6, ids("j", 0)...))}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && a.backoff < a.cfg.BackoffMax; i++ {
		a.Tick(now)
		if id, _, ok := a.Outstanding(); ok {
			if err := a.Step(now, Message{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		a.Ready()
		now = now.Add(500 * time.Millisecond)
		// B stays in touch, unloaded.
		_ = a.Step(now, Message{Kind: KindHeartbeat, From: "B", To: "A", Profile: ptr(node("B", 2, 0.6, ids("j", 0)...))})
	}
	if a.backoff != a.cfg.BackoffMax {
		t.Fatalf("precondition: back-off %v, want %v", a.backoff, a.cfg.BackoffMax)
	}
	a.Tick(now)
	a.Ready()
	return a, now
}

// "A load change is acted on within a few sampling periods": an idle node A that backed
// off to BackoffMax after a run of failed steals steals at its next Tick once the load
// changes, instead of waiting out the back-off: when a neighbour's heartbeat shows it loaded,
// or when A itself becomes free (a rank left, a load ended).
func TestLoadChangeIsActedOnWithinASamplingPeriod(t *testing.T) {
	for name, change := range map[string]func(a *Node, now time.Time) error{
		"a neighbour becomes loaded": func(a *Node, now time.Time) error {
			return a.Step(now, Message{Kind: KindHeartbeat, From: "B", To: "A", Profile: ptr(node("B", 2, 0, ids("j", 0, 1, 2)...))})
		},
		"this node becomes free": func(a *Node, now time.Time) error {
			if err := a.Update(now, node("A", 2, 0.1, ids("k", 0, 1)...), nil); err != nil {
				return err
			}
			return a.Update(now.Add(time.Second), node("A", 2, 1), nil)
		},
	} {
		a, now := backedOff(t)
		now = now.Add(time.Second)
		a.Tick(now)
		if n := stealsSent(a); n != 0 {
			t.Fatalf("%s: precondition: %d steals sent during the back-off", name, n)
		}
		if err := change(a, now); err != nil {
			t.Fatal(err)
		}
		a.Tick(now.Add(2 * time.Second))
		if n := stealsSent(a); n != 1 {
			t.Errorf("%s: %d steal requests at the next tick, want 1", name, n)
		}
	}
}

// A neighbour that stays loaded does not reset the back-off at every heartbeat: the reset is
// for a change, so a network with nothing to give is not flooded with steals.
func TestSteadyLoadKeepsTheBackoff(t *testing.T) {
	a, now := backedOff(t)
	loaded := func() Message {
		return Message{Kind: KindHeartbeat, From: "B", To: "A", Profile: ptr(node("B", 2, 0, ids("j", 0, 1, 2)...))}
	}
	_ = a.Step(now, loaded())
	a.Tick(now)
	id, _, ok := a.Outstanding()
	if !ok {
		t.Fatal("no steal after B became loaded")
	}
	_ = a.Step(now, Message{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: id})
	a.Ready()
	sent := 0
	for i := 0; i < 4; i++ { // 2 s of heartbeats from a B that stays loaded
		now = now.Add(500 * time.Millisecond)
		_ = a.Step(now, loaded())
		a.Tick(now)
		sent += stealsSent(a)
		if id, _, ok := a.Outstanding(); ok {
			_ = a.Step(now, Message{Kind: KindStealFail, From: "B", To: "A", Origin: "A", ID: id})
		}
	}
	if sent > 2 {
		t.Fatalf("%d steals in 2 s from a steadily loaded neighbour: the back-off was reset", sent)
	}
}
