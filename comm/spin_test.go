package comm

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDecideSpin(t *testing.T) {
	cases := []struct {
		setting   string
		nodeRanks int
		cpus      float64
		want      time.Duration
		adaptive  bool
	}{
		// auto: a core per rank, or nothing.
		{"", 2, 2, SuggestedSpinWait, true},
		{"auto", 1, 2, SuggestedSpinWait, true},
		{"", 4, 2, 0, false},
		{"", 3, 2.5, 0, false}, // a quota of 2.5 CPUs does not hold 3 busy ranks
		{"", 2, 2.5, SuggestedSpinWait, true},
		{"", 0, 64, 0, false}, // not started by mpirun
		// overrides
		{"0", 2, 2, 0, false},
		{"off", 1, 8, 0, false},
		{"-5us", 1, 8, 0, false},
		{"0s", 1, 8, 0, false},
		{"30us", 4, 2, 30 * time.Microsecond, false}, // forced even when oversubscribed
		{" 1ms ", 0, 1, time.Millisecond, false},
	}
	for _, c := range cases {
		got, err := DecideSpin(c.setting, c.nodeRanks, c.cpus)
		if err != nil {
			t.Errorf("DecideSpin(%q, %d, %g): %v", c.setting, c.nodeRanks, c.cpus, err)
			continue
		}
		long := c.want // forced: the same window while waiting
		if c.adaptive {
			long = SuggestedSpinWaitLong
		}
		if got.Wait != c.want || got.WaitLong != long || got.Adaptive != c.adaptive || got.Reason == "" {
			t.Errorf("DecideSpin(%q, %d, %g) = %+v, want wait %v (%v while waiting) adaptive %v and a reason",
				c.setting, c.nodeRanks, c.cpus, got, c.want, long, c.adaptive)
		}
	}
	for _, bad := range []string{"30", "yes please", "1x"} {
		if _, err := DecideSpin(bad, 1, 2); err == nil || !strings.Contains(err.Error(), EnvSpin) {
			t.Errorf("DecideSpin(%q): err %v, want an error naming %s", bad, err, EnvSpin)
		}
	}
}

func TestSpinPolicyFromConfigAndEnvironment(t *testing.T) {
	cpus := usableCPUs()
	t.Setenv(EnvSpin, "")
	t.Setenv(EnvNodeRanks, "1")
	cases := []struct {
		cfg  TCPConfig
		env  string // MPIOS_NODE_RANKS
		want time.Duration
	}{
		{TCPConfig{SpinWait: 7 * time.Microsecond}, "1", 7 * time.Microsecond},
		{TCPConfig{SpinWait: -1}, "1", 0},
		{TCPConfig{}, "1", SuggestedSpinWait},
		{TCPConfig{}, "", 0},
		{TCPConfig{NodeRanks: 1}, "", SuggestedSpinWait},
		{TCPConfig{NodeRanks: int(cpus) + 1}, "1", 0}, // the configuration wins over the environment
	}
	for _, c := range cases {
		t.Setenv(EnvNodeRanks, c.env)
		got, err := spinPolicy(&c.cfg)
		if err != nil || got.Wait != c.want {
			t.Errorf("spinPolicy(%+v) with %s=%q: %+v, %v; want wait %v", c.cfg, EnvNodeRanks, c.env, got, err, c.want)
		}
	}
	t.Setenv(EnvNodeRanks, "two")
	if _, err := spinPolicy(&TCPConfig{}); err == nil || !strings.Contains(err.Error(), EnvNodeRanks) {
		t.Errorf("malformed %s: err %v", EnvNodeRanks, err)
	}
	t.Setenv(EnvNodeRanks, "1")
	t.Setenv(EnvSpin, "fast")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = NewTCP(TCPConfig{Rank: 0, Size: 1, Addrs: []string{ln.Addr().String()}, Listener: ln, Secret: secret()})
	if err == nil || !strings.Contains(err.Error(), EnvSpin) {
		t.Errorf("NewTCP with %s=fast: err %v, want an error naming it", EnvSpin, err)
	}
}

func TestGateStateMachine(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var g gateState
	type step struct {
		at       time.Duration
		probe    bool    // the back-off ended: probe instead of sampling
		pressure float64 // for a sample
		open     bool
		next     time.Duration
	}
	steps := []step{
		{at: ms(100), pressure: 0.05, open: true, next: ms(200)},
		{at: ms(200), pressure: 0.90, open: true, next: ms(300)},   // one loaded sample: a blip?
		{at: ms(300), pressure: 0.10, open: true, next: ms(400)},   // it was
		{at: ms(400), pressure: 0.90, open: true, next: ms(500)},   // the count starts over
		{at: ms(500), pressure: 0.45, open: false, next: ms(1500)}, // two in a row: closed for a second
		{at: ms(1500), probe: true, open: true, next: ms(1600)},
		{at: ms(1600), pressure: 0.80, open: false, next: ms(3600)}, // still loaded: two seconds
		{at: ms(3600), probe: true, open: true, next: ms(3700)},
		{at: ms(3700), pressure: 0.80, open: false, next: ms(7700)},
		{at: ms(7700), probe: true, open: true, next: ms(7800)},
		{at: ms(7800), pressure: 0.80, open: false, next: ms(15800)},
		{at: ms(15800), probe: true, open: true, next: ms(15900)},
		{at: ms(15900), pressure: 0.80, open: false, next: ms(23900)}, // at most gateMaxBackoff
		{at: ms(23900), probe: true, open: true, next: ms(24000)},
		{at: ms(24000), pressure: 0.02, open: true, next: ms(24100)}, // quiet: open again
		{at: ms(24100), pressure: 0.50, open: true, next: ms(24200)},
		{at: ms(24200), pressure: 0.50, open: false, next: ms(25200)}, // back-off starts over
	}
	for i, s := range steps {
		var open bool
		var next time.Duration
		if s.probe {
			if !g.closed {
				t.Fatalf("step %d: probing an open gate", i)
			}
			open, next = true, g.probe(s.at)
		} else {
			open, next = g.sample(s.at, s.pressure)
		}
		if open != s.open || next != s.next || g.closed == open {
			t.Fatalf("step %d (t=%v): open %v next %v (closed %v), want open %v next %v", i, s.at, open, next, g.closed, s.open, s.next)
		}
	}
}

func TestLoadGateSamplesTheSource(t *testing.T) {
	var now time.Duration
	var stall uint64 // cumulative µs
	calls := 0
	var srcErr error
	src := func() (uint64, error) { calls++; return stall, srcErr }
	g := newLoadGateClock(src, func() time.Duration { return now })
	if !g.allow() || calls != 1 {
		t.Fatalf("fresh gate: allow %v after %d samples", g.allow(), calls)
	}
	// Every following interval loses half its time to waiting threads.
	step := func() bool {
		now += gateInterval / 2
		stall += uint64((gateInterval / 2).Microseconds())
		if !g.allow() {
			t.Fatal("the gate changed between samples")
		}
		now += gateInterval / 2
		return g.allow()
	}
	if !step() || calls != 2 {
		t.Fatalf("first loaded sample closed the gate (%d samples)", calls)
	}
	if step() || calls != 3 {
		t.Fatalf("second loaded sample left the gate open (%d samples)", calls)
	}
	// Closed: no samples until the back-off has passed, then a probe.
	now += gateMinBackoff - gateInterval/2
	if g.allow() || calls != 3 {
		t.Fatalf("closed gate sampled or opened before the back-off ended (%d samples)", calls)
	}
	now += gateInterval / 2
	if !g.allow() || calls != 4 {
		t.Fatalf("no probe after the back-off (%d samples)", calls)
	}
	// The node is quiet now: the probe's sample keeps the gate open.
	now += gateInterval
	if !g.allow() || calls != 5 || g.allow() != true {
		t.Fatalf("quiet probe closed the gate (%d samples)", calls)
	}
	// A source that fails leaves the decision to the start-up rule.
	srcErr = errors.New("gone")
	now += gateInterval
	if !g.allow() || !g.allow() {
		t.Fatal("failed source closed the gate")
	}
	if !newLoadGate(nil).allow() {
		t.Fatal("gate without a source is closed")
	}
}

func TestStallSourceOfThisMachine(t *testing.T) {
	// This machine's source, if it has one, counts up.
	if src := openStallSource(); src != nil {
		a, err1 := src()
		b, err2 := src()
		if err1 != nil || err2 != nil || b < a {
			t.Errorf("stall source: %v, %v; %v then %v", err1, err2, a, b)
		}
	}
}

// A hold stops adaptive polling at once, whatever the load, until it is released; forced
// polling goes on.
func TestHoldPollingStopsAdaptivePollingUntilReleased(t *testing.T) {
	var waiters atomic.Int32
	var waitAt atomic.Int64
	var writes atomic.Int32
	quiet := newLoadGateClock(func() (uint64, error) { return 0, nil }, func() time.Duration { return 0 })
	adaptive := &pollPolicy{spin: time.Hour, long: time.Hour, gate: quiet, waiters: &waiters, waitAt: &waitAt, writing: &writes}
	forced := &pollPolicy{spin: time.Hour, long: time.Hour, waiters: &waiters, waitAt: &waitAt, writing: &writes}
	polls := func() (bool, bool, bool) {
		return adaptive.poll(monoNow()), adaptive.gateOpen(), forced.poll(monoNow())
	}
	if a, open, f := polls(); !a || !open || !f {
		t.Fatalf("no hold: adaptive polls %v (gate open %v), forced %v; want all", a, open, f)
	}
	outer := HoldPolling()
	inner := HoldPolling()
	if a, open, f := polls(); a || open || !f {
		t.Fatalf("held: adaptive polls %v (gate open %v), forced %v; want only forced", a, open, f)
	}
	inner()
	inner() // a second release of the same hold changes nothing
	if a, open, _ := polls(); a || open {
		t.Fatalf("one of two holds released: adaptive polls %v (gate open %v)", a, open)
	}
	outer()
	if a, open, f := polls(); !a || !open || !f {
		t.Fatalf("all holds released: adaptive polls %v (gate open %v), forced %v; want all", a, open, f)
	}
}
