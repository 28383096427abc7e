package ctlplane

import (
	"testing"
	"time"
)

// TestAnObserverCutOffDeclaresNobodyGone follows the rule: a peer is not declared
// gone while the observer's own connection is down, nor before it had its usual time to be
// heard after the connection came back; an outage longer than the grace counts in full.
func TestAnObserverCutOffDeclaresNobodyGone(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := &Watch{Grace: 15 * time.Second}
	last := t0
	if got := w.Silence(t0.Add(2*time.Second), last); got != 2*time.Second {
		t.Fatalf("connected: silence %v, want 2s", got)
	}
	w.Disconnected(t0.Add(3 * time.Second))
	if got := w.Silence(t0.Add(10*time.Second), last); got != 0 {
		t.Fatalf("down for 7s of a 15s grace: silence %v, want 0", got)
	}
	if !w.Settling(t0.Add(10*time.Second), time.Second) {
		t.Fatal("down: no responders must prove nothing")
	}
	w.Reconnected(t0.Add(12 * time.Second))
	if got := w.Silence(t0.Add(13*time.Second), last); got != time.Second {
		t.Fatalf("1s after reconnecting: silence %v, want 1s (counted from the reconnection)", got)
	}
	if !w.Settling(t0.Add(12500*time.Millisecond), time.Second) || w.Settling(t0.Add(14*time.Second), time.Second) {
		t.Fatal("settling should last the window after the reconnection, no longer")
	}
	if got := w.Silence(t0.Add(20*time.Second), t0.Add(19*time.Second)); got != time.Second {
		t.Fatalf("a peer heard after the reconnection: silence %v, want 1s", got)
	}
	if down, _ := w.Outage(t0.Add(20 * time.Second)); down != 0 {
		t.Fatalf("connected: outage %v", down)
	}
	w.Disconnected(t0.Add(30 * time.Second))
	if got := w.Silence(t0.Add(46*time.Second), t0.Add(29*time.Second)); got != 17*time.Second {
		t.Fatalf("down for 16s, longer than the grace: silence %v, want the full 17s", got)
	}
	// Whoever declares peers gone then can say that the outage is the observer's own.
	if down, grace := w.Outage(t0.Add(46 * time.Second)); down != 16*time.Second || grace != 15*time.Second {
		t.Fatalf("outage %v, grace %v; want 16s, 15s", down, grace)
	}
}

func TestZeroWatchIsConnectedWithTheDefaultGrace(t *testing.T) {
	var w Watch
	t0 := time.Unix(1000, 0)
	if got := w.Silence(t0.Add(time.Second), t0); got != time.Second {
		t.Fatalf("silence %v, want 1s", got)
	}
	w.Disconnected(t0)
	if got := w.Silence(t0.Add(DefaultGrace-time.Millisecond), t0); got != 0 {
		t.Fatalf("within the default grace: silence %v, want 0", got)
	}
}

func TestGraceFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want time.Duration
		bad  bool
	}{
		{env: []string{}, want: DefaultGrace},
		{env: []string{EnvGrace + "=30s"}, want: 30 * time.Second},
		{env: []string{EnvGrace + "=soon"}, bad: true},
		{env: []string{EnvGrace + "=-1s"}, bad: true},
	} {
		got, err := GraceFromEnv(tc.env)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("%v: %v, %v; want %v (error: %v)", tc.env, got, err, tc.want, tc.bad)
		}
	}
}
