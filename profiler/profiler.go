package profiler

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mpios/mpios/mpi"
)

// DefaultWindow is the number of iteration intervals the iteration-time estimate averages:
// long enough to smooth noise, short enough to follow a load change within a few seconds.
const DefaultWindow = 16

// Options configures a Profiler. The zero value is usable.
type Options struct {
	// Job and Node label the profiles.
	Job  string
	Node string
	// Window is the number of iteration intervals kept for the estimates; 0 means
	// DefaultWindow.
	Window int
	// Now is the clock of snapshots; nil means time.Now. Tests inject one.
	Now func() time.Time
}

// Profiler records mpi calls per rank. It implements mpi.Interceptor; all methods are safe
// for concurrent use.
type Profiler struct {
	opts Options

	on   atomic.Bool
	next atomic.Pointer[mpi.Interceptor] // the interceptor Install replaced, chained to

	mu     sync.Mutex                   // serializes shard creation and Install/Uninstall
	shards atomic.Pointer[[]*rankState] // world rank -> shard; copied on growth
	nranks int
	sole   atomic.Pointer[rankState] // the shard when there is exactly one

	dropped atomic.Int64
}

// New returns a profiler that records events passed to Observe. Install makes mpi pass them.
func New(opts Options) *Profiler {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Profiler{opts: opts}
	p.on.Store(true)
	return p
}

// Install makes p the process's mpi interceptor. The interceptor it replaces, if any, keeps
// receiving every event through p, so profilers and tracers stack as PMPI layers do.
func (p *Profiler) Install() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.Load() != nil {
		return errors.New("profiler: install: already installed")
	}
	var none mpi.Interceptor
	p.next.Store(&none) // marks p installed, chaining to nothing until SetInterceptor returns
	prev := mpi.SetInterceptor(p)
	if prev == mpi.Interceptor(p) {
		prev = nil // set directly with mpi.SetInterceptor: never chain to itself
	}
	p.next.Store(&prev)
	p.on.Store(true)
	return nil
}

// Uninstall stops recording and restores the interceptor Install replaced. If another
// interceptor was installed on top of p, that one stays installed (still chaining to p, which
// now only forwards) and Uninstall reports it.
func (p *Profiler) Uninstall() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on.Store(false)
	next := p.next.Load()
	if next == nil {
		return errors.New("profiler: uninstall: not installed")
	}
	cur := mpi.SetInterceptor(*next)
	if cur != mpi.Interceptor(p) {
		mpi.SetInterceptor(cur) // put the foreign interceptor back; p stays in its chain
		return fmt.Errorf("profiler: uninstall: interceptor %T was installed after the profiler and is left in place", cur)
	}
	p.next.Store(nil)
	return nil
}

// Observe implements mpi.Interceptor. It costs a few atomic loads, one uncontended mutex and
// no allocation once the rank and its peers have been seen.
func (p *Profiler) Observe(ev mpi.CallEvent) {
	if n := p.next.Load(); n != nil && *n != nil {
		(*n).Observe(ev)
	}
	if !p.on.Load() {
		return
	}
	s := p.shardOf(ev.Comm, ev.Start)
	if s == nil {
		p.dropped.Add(1)
		return
	}
	s.mu.Lock()
	s.record(&ev)
	s.mu.Unlock()
}

// shardOf returns the shard of the rank that made a call on c: the calling rank of c. A call
// without a communicator belongs to the sole rank, if there is one.
func (p *Profiler) shardOf(c *mpi.Comm, start time.Time) *rankState {
	if c == nil {
		return p.sole.Load()
	}
	r := c.Rank()
	if r < 0 || r >= c.Size() {
		return nil
	}
	return p.shard(c.WorldRank(r), start, true)
}

// shard returns the shard of world rank w, creating it (profiling since start) if needed.
// A shard created by an event has its first iteration start at that event.
func (p *Profiler) shard(w int, start time.Time, markStart bool) *rankState {
	if t := p.shards.Load(); t != nil && w < len(*t) && (*t)[w] != nil {
		return (*t)[w]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var tab []*rankState
	if t := p.shards.Load(); t != nil {
		tab = *t
	}
	if w < len(tab) && tab[w] != nil {
		return tab[w]
	}
	grown := make([]*rankState, max(len(tab), w+1))
	copy(grown, tab)
	s := newRankState(w, start, p.opts.Window)
	if markStart {
		s.mark = start
	}
	grown[w] = s
	p.shards.Store(&grown)
	p.nranks++
	if p.nranks == 1 {
		p.sole.Store(s)
	} else {
		p.sole.Store(nil)
	}
	return s
}

// Begin starts timing an iteration of world rank rank at now, discarding the open interval:
// call it when the iterative phase starts (after setup, or after a restart from a
// checkpoint). Without it the first interval starts at the rank's first mpi call.
func (p *Profiler) Begin(rank int, now time.Time) error {
	if rank < 0 {
		return fmt.Errorf("profiler: begin: negative rank %d", rank)
	}
	s := p.shard(rank, now, false)
	s.mu.Lock()
	s.begin(now)
	s.mu.Unlock()
	return nil
}

// Iteration closes the interval of world rank rank that ends with iteration iter at now: its
// wall time, the time spent in mpi calls during it, and the rest as computation. If iter
// advanced by k since the previous mark the interval counts as k iterations. The first mark
// of a rank that made no mpi call and no Begin only opens an interval.
func (p *Profiler) Iteration(rank, iter int, now time.Time) error {
	if rank < 0 {
		return fmt.Errorf("profiler: iteration %d: negative rank %d", iter, rank)
	}
	s := p.shard(rank, now, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.iteration(int64(iter), now)
}

func errBackwards(rank int, iter int64, now, mark time.Time) error {
	return fmt.Errorf("profiler: rank %d iteration %d: end %v before the interval's start %v", rank, iter, now, mark)
}

// Snapshot returns the profile of every rank seen, sorted by rank.
func (p *Profiler) Snapshot() []RankProfile {
	at := p.opts.Now()
	t := p.shards.Load()
	if t == nil {
		return []RankProfile{}
	}
	out := make([]RankProfile, 0, len(*t))
	for _, s := range *t {
		if s == nil {
			continue
		}
		s.mu.Lock()
		out = append(out, s.profile(p.opts.Job, p.opts.Node, at))
		s.mu.Unlock()
	}
	return out
}

// SnapshotRank returns the profile of world rank rank; ok is false if the profiler has not
// seen it. It costs one rank's copy, where Snapshot copies every rank of the process.
func (p *Profiler) SnapshotRank(rank int) (RankProfile, bool) {
	t := p.shards.Load()
	if t == nil || rank < 0 || rank >= len(*t) || (*t)[rank] == nil {
		return RankProfile{}, false
	}
	s := (*t)[rank]
	at := p.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.profile(p.opts.Job, p.opts.Node, at), true
}

// Dropped returns the number of events that could not be attributed to a rank: calls
// without a communicator (WaitAll, Wait on an eager send) while several ranks share the
// process.
func (p *Profiler) Dropped() int64 { return p.dropped.Load() }
