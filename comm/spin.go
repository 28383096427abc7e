package comm

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mpios/mpios/internal/nodecpu"
)

// When the reader of a TCP connection polls its socket instead of sleeping in the Go network
// poller (see spinReader).
//
// Polling halves small-message latency when every rank has a core of its own, and takes time
// from other threads when it does not. So, unless MPIOS_SPIN says otherwise, it is decided in
// two steps:
//
//  1. At start (DecideSpin): poll only if the ranks on this node (MPIOS_NODE_RANKS, set by
//     mpirun and pcmd) are no more than the CPUs this process may use (its affinity mask and
//     its cgroup's CPU quota). Without that count -- a process not started by mpirun -- never.
//  2. While running (loadGate): pause polling while the node is loaded, that is while runnable
//     threads wait for a CPU (Linux CPU pressure, /proc/pressure/cpu; else the runnable
//     threads of /proc/loadavg), and probe now and then whether the load is gone. A node that
//     becomes loaded mid-run stops polling within about 200 ms.
//
// When it polls, a reader polls for SuggestedSpinWait after data arrived, and for
// SuggestedSpinWaitLong while a goroutine of the process waits for a message (WaitNotifier),
// but not while its endpoint writes a large frame (see TCPEndpoint.Send).

// Environment variables read by NewTCP.
const (
	// EnvSpin overrides the decision: "0" or "off" never polls, a duration (e.g. "30us")
	// always polls that long (also while waiting), "" or "auto" decides as described above.
	EnvSpin = "MPIOS_SPIN"
	// EnvNodeRanks is the number of ranks (of all jobs) that the launcher started on this
	// rank's node.
	EnvNodeRanks = "MPIOS_NODE_RANKS"
)

// SpinPolicy is how a TCP endpoint's readers poll their sockets.
type SpinPolicy struct {
	// Wait is how long a reader polls after data arrived before it sleeps; 0: never polls.
	Wait time.Duration
	// WaitLong replaces Wait while a goroutine of the process waits for a message (see
	// WaitNotifier). It is never shorter than Wait.
	WaitLong time.Duration
	// Adaptive polling pauses while the node is loaded (see loadGate); forced polling does not.
	Adaptive bool
	// Reason says why, for logs and tests.
	Reason string
}

// DecideSpin is the start-up rule: setting is the value of MPIOS_SPIN, nodeRanks the number of
// ranks on this node (0 if unknown), cpus the CPUs this process may use.
func DecideSpin(setting string, nodeRanks int, cpus float64) (SpinPolicy, error) {
	switch s := strings.TrimSpace(setting); strings.ToLower(s) {
	case "", "auto":
	case "0", "off", "no", "false":
		return SpinPolicy{Reason: EnvSpin + "=" + s}, nil
	default:
		d, err := time.ParseDuration(s)
		if err != nil {
			return SpinPolicy{}, fmt.Errorf("comm: %s=%q: want auto, 0 (off) or a duration such as 30us", EnvSpin, setting)
		}
		if d <= 0 {
			return SpinPolicy{Reason: EnvSpin + "=" + s}, nil
		}
		return SpinPolicy{Wait: d, WaitLong: d, Reason: EnvSpin + "=" + s}, nil
	}
	switch {
	case nodeRanks <= 0:
		return SpinPolicy{Reason: "ranks on this node unknown (not started by mpirun)"}, nil
	case float64(nodeRanks) > cpus:
		return SpinPolicy{Reason: fmt.Sprintf("%d ranks share %g CPUs", nodeRanks, cpus)}, nil
	}
	return SpinPolicy{Wait: SuggestedSpinWait, WaitLong: SuggestedSpinWaitLong, Adaptive: true,
		Reason: fmt.Sprintf("%d ranks on %g CPUs", nodeRanks, cpus)}, nil
}

// spinPolicy applies the configuration and the environment to DecideSpin.
func spinPolicy(cfg *TCPConfig) (SpinPolicy, error) {
	switch {
	case cfg.SpinWait > 0:
		return SpinPolicy{Wait: cfg.SpinWait, WaitLong: cfg.SpinWait, Reason: "TCPConfig.SpinWait"}, nil
	case cfg.SpinWait < 0:
		return SpinPolicy{Reason: "TCPConfig.SpinWait < 0"}, nil
	}
	nodeRanks := cfg.NodeRanks
	if v := os.Getenv(EnvNodeRanks); nodeRanks == 0 && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return SpinPolicy{}, fmt.Errorf("comm: %s=%q: want a number of ranks", EnvNodeRanks, v)
		}
		nodeRanks = n
	}
	return DecideSpin(os.Getenv(EnvSpin), nodeRanks, usableCPUs())
}

// usableCPUs is the number of CPUs this process may run on: its affinity mask (NumCPU) or
// its cgroup's CPU bandwidth quota, whichever is smaller (see nodecpu.Reader.UsableCPUs).
func usableCPUs() float64 {
	n := float64(runtime.NumCPU())
	r, err := nodecpu.New(nil)
	if err != nil {
		return n
	}
	if u, err := r.UsableCPUs(); err == nil && u > 0 && u < n {
		return u
	}
	return n
}

// Run-time gate of adaptive polling.
//
// While readers poll, the gate samples the node's CPU pressure: the share of time in which some
// runnable thread waited for a CPU. Measured on the project's 2-core machine, two polling
// ranks alone show 2-8% (their runtimes' helper threads waiting for a moment), and 80-100%
// once one more busy thread competes. Two loaded samples in a row close the gate. A closed gate
// cannot measure what polling would cost (ranks that do not poll wake threads for every
// message, and those wake-ups show as 30% pressure on an idle node), so it probes instead:
// after a back-off it polls for one interval and measures again, reopening if the node is
// quiet, else backing off longer. On a loaded node polling thus runs about one interval in
// every gateMaxBackoff.
const (
	// gateInterval is how often the load is sampled while polling (by a reader about to poll).
	gateInterval = 100 * time.Millisecond
	// gateLoaded is the CPU pressure from which a sample counts as loaded.
	gateLoaded = 0.4
	// gateStrikes loaded samples in a row close an open gate (one can be a blip).
	gateStrikes = 2
	// A closed gate probes after gateMinBackoff, doubling up to gateMaxBackoff while the
	// probes find the node loaded.
	gateMinBackoff = time.Second
	gateMaxBackoff = 8 * time.Second
)

// gateState is the gate's decision logic, apart from sampling and clocks so that tests can
// drive it.
type gateState struct {
	closed  bool
	probing bool // polling for one interval to see whether the load is gone
	strikes int
	backoff time.Duration
}

// sample takes the CPU pressure of the interval that ended at now, during which polling was
// allowed. It returns whether polling stays allowed and when the gate needs the clock next
// (the next sample, or the end of the back-off).
func (g *gateState) sample(now time.Duration, pressure float64) (open bool, next time.Duration) {
	if pressure < gateLoaded {
		g.probing, g.strikes, g.backoff = false, 0, 0
		return true, now + gateInterval
	}
	g.strikes++
	if !g.probing && g.strikes < gateStrikes {
		return true, now + gateInterval
	}
	if g.probing {
		g.backoff = min(2*g.backoff, gateMaxBackoff)
	} else {
		g.backoff = gateMinBackoff
	}
	g.closed, g.probing, g.strikes = true, false, 0
	return false, now + g.backoff
}

// probe opens a closed gate whose back-off has ended, for one interval.
func (g *gateState) probe(now time.Duration) (next time.Duration) {
	g.closed, g.probing = false, true
	return now + gateInterval
}

// loadGate applies gateState to the node for the adaptive readers of this process. It has no
// goroutine: the reader that finds the clock due does the work (one pread of a /proc file, a
// few microseconds, at most every gateInterval).
type loadGate struct {
	open  atomic.Bool
	next  atomic.Int64         // when the gate needs the clock next, in ns of clock
	clock func() time.Duration // monotonic time

	disabled atomic.Bool // no source on this system: the start-up rule alone decides

	mu     sync.Mutex // one sampler at a time; guards the fields below
	src    stallSource
	last   uint64 // the source's cumulative stall, µs
	lastAt time.Duration
	state  gateState
}

// stallSource returns a cumulative count of microseconds in which some runnable thread waited
// for a CPU.
type stallSource func() (uint64, error)

var (
	nodeGateOnce sync.Once
	nodeGate     *loadGate
)

// processGate returns the process's gate (all endpoints share it: the load is the node's).
func processGate() *loadGate {
	nodeGateOnce.Do(func() { nodeGate = newLoadGate(openStallSource()) })
	return nodeGate
}

func newLoadGate(src stallSource) *loadGate {
	epoch := time.Now()
	return newLoadGateClock(src, func() time.Duration { return time.Since(epoch) })
}

func newLoadGateClock(src stallSource, clock func() time.Duration) *loadGate {
	g := &loadGate{clock: clock, src: src}
	g.open.Store(true)
	if src == nil {
		g.disabled.Store(true)
		return g
	}
	if v, err := src(); err == nil {
		g.last = v
	} else {
		g.disabled.Store(true)
	}
	g.lastAt = clock()
	g.next.Store(int64(g.lastAt + gateInterval))
	return g
}

// allow reports whether adaptive readers may poll now, sampling the load if a sample is due.
func (g *loadGate) allow() bool {
	if pollHolds.Load() > 0 {
		return false
	}
	if g.disabled.Load() {
		return true
	}
	now := g.clock()
	if int64(now) < g.next.Load() || !g.mu.TryLock() {
		return g.open.Load()
	}
	defer g.mu.Unlock()
	if int64(now) < g.next.Load() {
		return g.open.Load() // another reader just did it
	}
	v, err := g.src()
	if err != nil {
		g.disabled.Store(true) // the source went away: the start-up rule alone decides
		g.open.Store(true)
		return true
	}
	var next time.Duration
	open := true
	if g.state.closed {
		next = g.state.probe(now)
	} else {
		pressure := 0.0
		if dt := now - g.lastAt; dt > 0 && v >= g.last {
			pressure = float64(v-g.last) / float64(dt.Microseconds()+1)
		}
		open, next = g.state.sample(now, pressure)
	}
	g.last, g.lastAt = v, now
	g.next.Store(int64(next))
	g.open.Store(open)
	return open
}

// isOpen reports whether the gate lets readers poll, without sampling.
func (g *loadGate) isOpen() bool { return pollHolds.Load() == 0 && g.open.Load() }

// pollHolds counts the holds on this process's adaptive polling (HoldPolling).
var pollHolds atomic.Int32

// HoldPolling makes this process's adaptive readers (MPIOS_SPIN unset or auto) stop polling
// their sockets and rings until release is called, as while the node is loaded: a reader
// that would poll sleeps until its peer's data arrives instead. It is for work the process
// does beside the application, such as a checkpoint written while the application computes
// on. On a node whose cores the ranks fill, a rank that polls while it waits for a
// neighbour keeps its core busy, and that work then takes the core of a rank that computes
// (which the neighbour waits for in turn) rather than the core of the rank that waits: the
// load gate, which samples every gateInterval, does not see work that lasts milliseconds.
// Forced polling (MPIOS_SPIN=DURATION) is not held. Holds nest; release may be called more
// than once.
func HoldPolling() (release func()) {
	pollHolds.Add(1)
	var once sync.Once
	return func() { once.Do(func() { pollHolds.Add(-1) }) }
}

// openStallSource returns the node's CPU stall counter (nodecpu.Stall: Linux CPU pressure,
// else the runnable threads of /proc/loadavg); nil where neither exists.
func openStallSource() stallSource {
	r, err := nodecpu.New(nil)
	if err != nil {
		return nil
	}
	st, err := r.OpenStall(nil)
	if err != nil {
		return nil
	}
	return st.Read
}
