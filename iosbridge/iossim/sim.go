package iossim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/mpios/mpios/iosbridge"
)

// epoch is virtual time zero; any fixed instant works, a fixed one keeps runs identical.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// profileWindow is how many sampling periods the rank counters are scaled to: the
// profiler's counters cover the window since its last reset, and a window of a few periods
// keeps the integer message counts of eq. 2.2–2.3 from being dominated by rounding.
const profileWindow = 10

// Sample is the grid's state at the end of one sampling period.
type Sample struct {
	// At is the virtual time since the start.
	At time.Duration
	// Throughput is iterations (messages processed) per second over all ranks: the sum of
	// the ranks' rates, or for Sync jobs ranks × the slowest rank's rate.
	Throughput float64
	// Migrations and Messages are cumulative counts since the start.
	Migrations int
	Messages   uint64
}

// Result is what a run produced.
type Result struct {
	Samples []Sample
	// Migrations were carried out; Refused were ordered for a rank that was not (or no
	// longer) on the giving node, which the model reports back as MigrationFailed.
	Migrations, Refused int
	// LastMigration is the virtual time the last migration landed; -1 if none did.
	LastMigration time.Duration
	// End is the virtual time the run ended: Duration, or earlier with Config.QuietStop.
	End time.Duration
	// Messages counts protocol messages sent, in total and by kind.
	Messages uint64
	ByKind   map[iosbridge.Kind]uint64
	// StepErrors counts messages a Node rejected (never expected); FirstError is the first.
	StepErrors int
	FirstError error
	// NodeSeconds is the sum over nodes of the virtual time each was part of the grid.
	NodeSeconds float64
	// Placement is where every rank ended (its destination if still in flight).
	Placement map[iosbridge.RankID]string
	// MigrationsPerRank counts, for every rank, how often it moved.
	MigrationsPerRank map[iosbridge.RankID]int
	// RemoteEdges and WideEdges are the shares of the application's edges whose ends ended
	// on different nodes, and on different clusters.
	RemoteEdges, WideEdges float64
	// Rotations counts the three-way exchanges carried out (the relays' ranks sent), and
	// ExchangesCancelled the exchange promises released with nothing moved (iosbridge.Stats).
	Rotations, ExchangesCancelled uint64
}

// MessagesPerNodeSecond is the protocol's traffic per node per virtual second.
func (r Result) MessagesPerNodeSecond() float64 {
	if r.NodeSeconds <= 0 {
		return 0
	}
	return float64(r.Messages) / r.NodeSeconds
}

// Throughput is the mean throughput over the samples taken at or after from.
func (r Result) Throughput(from time.Duration) float64 {
	var sum float64
	var n int
	for _, s := range r.Samples {
		if s.At >= from {
			sum += s.Throughput
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Converged is the first sample time from which throughput stays within tol (e.g. 0.05)
// of the final throughput (mean of the last tenth of the run); -1 if never.
func (r Result) Converged(tol float64) time.Duration {
	if len(r.Samples) == 0 {
		return -1
	}
	final := r.Throughput(r.Samples[len(r.Samples)-1-len(r.Samples)/10].At)
	at := time.Duration(-1)
	for i := len(r.Samples) - 1; i >= 0; i-- {
		if math.Abs(r.Samples[i].Throughput-final) > tol*final {
			break
		}
		at = r.Samples[i].At
	}
	return at
}

type evKind uint8

const (
	evStart evKind = iota
	evTick
	evSample
	evDeliver
	evLand
	evLoad
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	node int // evStart, evTick, evLoad, evLand (destination), evDeliver (receiver)
	rank int // evLand
	// evLand: the giver and how long the state took over the link, which the receiver
	// measures as pcmd's pieceserver does a buddy copy (Node.ObserveTransfer).
	from int
	took time.Duration
	bg   float64
	msg  iosbridge.Message
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simNode struct {
	spec       NodeSpec
	agent      *iosbridge.Node
	ranks      []int // indices into sim.ranks, kept sorted
	background float64
	started    bool
	startedAt  time.Duration
}

type simRank struct {
	spec          RankSpec
	id            iosbridge.RankID
	node          int  // current node, or the destination while moving
	moving        bool // in flight: does no work
	lastMigration time.Time
	rate          float64 // iterations per second
	compute, comm float64 // seconds per iteration
	share         float64 // CPUs it gets
	migrations    int
}

type sim struct {
	cfg    Config
	now    time.Duration
	seq    uint64
	q      queue
	rnd    *rand.Rand
	nodes  []*simNode
	byName map[string]int
	ranks  []*simRank
	byID   map[iosbridge.RankID]int
	jobs   map[string][]int
	order  []string // job names, sorted
	live   []int    // started nodes, in start order (join seeds come from here)
	free   []*event // recycled events: a 10,000-node run delivers millions of messages
	res    Result
	// moved is when a migration was last ordered or landed, inFlight how many have not
	// landed, quiet whether QuietStop ends the run (see Config.QuietStop).
	moved    time.Duration
	inFlight int
	quiet    bool
}

// Run simulates cfg and returns what happened. It fails only on an invalid Config.
func Run(cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0)), byName: map[string]int{},
		byID: map[iosbridge.RankID]int{}, jobs: map[string][]int{}}
	s.res = Result{LastMigration: -1, ByKind: map[iosbridge.Kind]uint64{}}
	policy := cfg.Tuned
	if policy == nil {
		var err error
		if policy, err = iosbridge.PolicyByName(cfg.Policy); err != nil {
			return Result{}, err
		}
	}
	for i, spec := range cfg.Nodes {
		if spec.Speed == 0 {
			spec.Speed = 1
		}
		ac := cfg.Agent
		ac.ID, ac.Policy, ac.Rand = spec.ID, policy, rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
		ac.Cluster = spec.Cluster
		agent, err := iosbridge.NewNode(ac)
		if err != nil {
			return Result{}, fmt.Errorf("iossim: node %s: %w", spec.ID, err)
		}
		s.nodes = append(s.nodes, &simNode{spec: spec, agent: agent, background: spec.Background})
		s.byName[spec.ID] = i
		s.push(&event{at: spec.JoinAt, kind: evStart, node: i})
	}
	for i, spec := range cfg.Ranks {
		r := &simRank{spec: spec, id: iosbridge.RankID{Job: spec.Job, Rank: spec.Rank}, node: s.byName[spec.Node]}
		s.ranks = append(s.ranks, r)
		s.byID[r.id] = i
		if s.jobs[spec.Job] == nil {
			s.order = append(s.order, spec.Job)
		}
		s.jobs[spec.Job] = append(s.jobs[spec.Job], i)
		s.nodes[r.node].ranks = append(s.nodes[r.node].ranks, i)
	}
	sort.Strings(s.order)
	for _, l := range cfg.Loads {
		s.push(&event{at: l.At, kind: evLoad, node: s.byName[l.Node], bg: l.Background})
	}
	s.push(&event{at: 0, kind: evSample})
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at > cfg.Duration || s.quiet {
			break
		}
		s.now = e.at
		s.handle(e)
		*e = event{}
		s.free = append(s.free, e)
	}
	s.res.End = cfg.Duration
	if s.quiet {
		s.res.End = s.now
	}
	s.finish()
	return s.res, nil
}

func (s *sim) alloc() *event {
	if k := len(s.free); k > 0 {
		e := s.free[k-1]
		s.free = s.free[:k-1]
		return e
	}
	return new(event)
}

func (s *sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) wall() time.Time { return epoch.Add(s.now) }

func (s *sim) handle(e *event) {
	switch e.kind {
	case evStart:
		s.start(e.node)
	case evTick:
		n := s.nodes[e.node]
		n.agent.Tick(s.wall())
		s.collect(e.node)
		next := s.alloc()
		next.at, next.kind, next.node = s.now+s.cfg.TickPeriod, evTick, e.node
		s.push(next)
	case evSample:
		s.sample()
		if q := s.cfg.QuietStop; q > 0 && s.inFlight == 0 && s.now-s.moved >= q {
			s.quiet = true
			return
		}
		s.push(&event{at: s.now + s.cfg.SamplePeriod, kind: evSample})
	case evDeliver:
		to := e.node
		n := s.nodes[to]
		if !n.started {
			return // nobody listens yet: the message is lost, as on a real network
		}
		if err := n.agent.Step(s.wall(), e.msg); err != nil {
			s.res.StepErrors++
			if s.res.FirstError == nil {
				s.res.FirstError = fmt.Errorf("at %v, %s: %w", s.now, n.spec.ID, err)
			}
		}
		s.collect(to)
	case evLand:
		r := s.ranks[e.rank]
		r.moving = false
		r.lastMigration = s.wall()
		n := s.nodes[r.node]
		n.ranks = insertSorted(n.ranks, e.rank)
		s.res.LastMigration = s.now
		s.moved = s.now
		s.inFlight--
		// The receiver measures the state's transfer as pcmd does a bulk transfer: its bytes
		// over the time from the connection to the last byte (the latency is the
		// connection's set-up, before the clock starts).
		if r.spec.StateBytes > 0 && e.took > 0 {
			err := n.agent.ObserveTransfer(s.wall(), s.nodes[e.from].spec.ID, r.spec.StateBytes, e.took)
			if err != nil && !errors.Is(err, iosbridge.ErrTransferTooSmall) && s.res.FirstError == nil {
				s.res.FirstError = fmt.Errorf("at %v, %s: %w", s.now, n.spec.ID, err)
			}
		}
		s.rates(r.node)
	case evLoad:
		s.nodes[e.node].background = e.bg
		s.rates(e.node)
	}
}

// start brings a node into the grid: first profile, Join through Degree random live nodes,
// ticks at a random phase (real agents' timers are not aligned).
func (s *sim) start(i int) {
	n := s.nodes[i]
	n.started, n.startedAt = true, s.now
	s.rates(i)
	s.update(i)
	var seeds []string
	// Degree distinct live nodes, drawn without a permutation of all of them: a 10,000-node
	// start would otherwise shuffle 50 million entries.
	var picked []int
	for len(picked) < min(s.cfg.Degree, len(s.live)) {
		j := s.rnd.IntN(len(s.live))
		if !slices.Contains(picked, j) {
			picked = append(picked, j)
			seeds = append(seeds, s.nodes[s.live[j]].spec.ID)
		}
	}
	s.live = append(s.live, i)
	n.agent.Join(s.wall(), seeds)
	s.collect(i)
	phase := time.Duration(s.rnd.Int64N(int64(s.cfg.TickPeriod) + 1))
	s.push(&event{at: s.now + phase, kind: evTick, node: i})
}

// collect carries out what a node's Ready asks: messages go out over the link model,
// migrations take the rank off the giver now and land it after latency + state/bandwidth.
// A refused migration makes the giver tell its receiver (KindMigrationFailed): that message
// goes out in the next round.
func (s *sim) collect(i int) {
	for s.nodes[i].agent.HasReady() {
		s.collectOnce(i)
	}
}

func (s *sim) collectOnce(i int) {
	n := s.nodes[i]
	rd := n.agent.Ready()
	for _, m := range rd.Messages {
		s.res.Messages++
		s.res.ByKind[m.Kind]++
		to, ok := s.byName[m.To]
		if !ok {
			continue
		}
		lat, _ := s.link(i, to)
		e := s.alloc()
		e.at, e.kind, e.node, e.msg = s.now+lat, evDeliver, to, m
		s.push(e)
	}
	for _, m := range rd.Migrations {
		ri, ok := s.byID[m.Rank]
		to, ok2 := s.byName[m.To]
		if !ok || !ok2 || s.ranks[ri].moving || s.ranks[ri].node != i {
			s.res.Refused++
			n.agent.MigrationFailed(m.Rank)
			continue
		}
		r := s.ranks[ri]
		n.ranks = removeSorted(n.ranks, ri)
		r.moving, r.node, r.rate = true, to, 0
		r.migrations++
		s.res.Migrations++
		s.moved = s.now
		s.inFlight++
		lat, bw := s.link(i, to)
		took := time.Duration(float64(r.spec.StateBytes) / bw * float64(time.Second))
		s.push(&event{at: s.now + lat + took, kind: evLand, node: to, rank: ri, from: i, took: took})
		s.rates(i)
	}
}

// link is the latency and bandwidth between two nodes.
func (s *sim) link(a, b int) (time.Duration, float64) {
	l := s.cfg.Links
	switch {
	case a == b:
		return l.SameNode, math.Inf(1)
	case s.nodes[a].spec.Cluster == s.nodes[b].spec.Cluster:
		return l.LocalLatency, l.LocalBandwidth
	}
	return l.WideLatency, l.WideBandwidth
}

// share is the CPUs each rank gets on node i: every rank and every background CPU wants a
// core, and a saturated node shares fairly.
func (s *sim) share(i int) (perRank, availability float64) {
	n := s.nodes[i]
	c, k := n.spec.CPUs, float64(len(n.ranks))
	demand := n.background + k
	if demand <= c {
		return 1, (c - demand) / c
	}
	return c / demand, 0
}

// busy is the CPUs a rank really uses: its share while it computes, nothing while it waits
// for its messages, which is what a sampler of CPU time sees.
func (r *simRank) busy() float64 {
	if r.moving || r.compute+r.comm <= 0 {
		return 0
	}
	return r.share * r.compute / (r.compute + r.comm)
}

// availability is the idle share of node i as its sampler would measure it: what the
// background and the ranks' busy time leave.
func (s *sim) availability(i int) float64 {
	n := s.nodes[i]
	c := n.spec.CPUs
	used := n.background * math.Min(1, c/(n.background+float64(len(n.ranks))))
	for _, ri := range n.ranks {
		used += s.ranks[ri].busy()
	}
	return math.Max(0, math.Min(1, (c-used)/c))
}

// rates recomputes the iteration rates of the ranks on node i; their peers' communication
// costs follow at the next sample, at most one sampling period late.
func (s *sim) rates(i int) {
	for _, ri := range s.nodes[i].ranks {
		s.rate(ri)
	}
}

func (s *sim) rate(ri int) {
	r := s.ranks[ri]
	if r.moving {
		r.rate = 0
		return
	}
	n := s.nodes[r.node]
	share, _ := s.share(r.node)
	r.share = share
	r.compute = r.spec.Work / (n.spec.Speed * share)
	r.comm = 0
	for _, e := range r.spec.Peers {
		p := s.ranks[s.byID[iosbridge.RankID{Job: r.spec.Job, Rank: e.Rank}]]
		lat, bw := s.link(r.node, p.node)
		r.comm += lat.Seconds() + float64(e.Bytes)/bw
	}
	r.rate = 1 / (r.compute + r.comm)
}

// lockstep caps every rank's rate at its neighbours' own rates: it cannot run an iteration
// ahead of a neighbour whose halo it needs.
func (s *sim) lockstep() {
	own := make([]float64, len(s.ranks))
	for ri, r := range s.ranks {
		own[ri] = r.rate
	}
	for _, r := range s.ranks {
		for _, e := range r.spec.Peers {
			r.rate = math.Min(r.rate, own[s.byID[iosbridge.RankID{Job: r.spec.Job, Rank: e.Rank}]])
		}
	}
}

// sample records throughput, refreshes every rate (placements changed since the last
// sample) and gives every live agent its profiling snapshot.
func (s *sim) sample() {
	for ri := range s.ranks {
		s.rate(ri)
	}
	if s.cfg.Lockstep {
		s.lockstep()
	}
	var tput float64
	for _, job := range s.order {
		ids := s.jobs[job]
		if s.cfg.Sync {
			slowest := math.Inf(1)
			for _, ri := range ids {
				slowest = math.Min(slowest, s.ranks[ri].rate)
			}
			tput += slowest * float64(len(ids))
			continue
		}
		for _, ri := range ids {
			tput += s.ranks[ri].rate
		}
	}
	s.res.Samples = append(s.res.Samples, Sample{At: s.now, Throughput: tput, Migrations: s.res.Migrations, Messages: s.res.Messages})
	if s.cfg.OnSample != nil {
		s.cfg.OnSample(s.res.Samples[len(s.res.Samples)-1])
	}
	for _, i := range s.live {
		s.update(i)
		s.collect(i)
	}
}

// update feeds node i's agent what pcmd's profiler would: the node profile and one profile
// per hosted rank, with counters scaled to a window of profileWindow periods.
func (s *sim) update(i int) {
	n := s.nodes[i]
	avail := s.availability(i)
	window := time.Duration(profileWindow) * s.cfg.SamplePeriod
	prof := iosbridge.NodeProfile{Node: n.spec.ID, CPUs: int(math.Ceil(n.spec.CPUs)), EffectiveCPUs: n.spec.CPUs, Speed: n.spec.Speed,
		Availability: avail, MemFreeBytes: 8 << 30, MemTotalBytes: 16 << 30, SampledAt: s.wall()}
	profiles := make([]iosbridge.RankProfile, 0, len(n.ranks))
	for _, ri := range n.ranks {
		r := s.ranks[ri]
		prof.Ranks = append(prof.Ranks, r.id)
		iters := r.rate * window.Seconds()
		msgs := int64(math.Round(iters))
		deg := float64(max(1, len(r.spec.Peers)))
		rp := iosbridge.RankProfile{Job: r.id.Job, Rank: r.id.Rank, Node: n.spec.ID,
			IterationTime: time.Duration((r.compute + r.comm) * float64(time.Second)), RemainingIterations: 1 << 20,
			StateBytes: r.spec.StateBytes, CPUUse: r.busy(),
			CompTime: time.Duration(iters * r.compute * float64(time.Second)), CommTime: time.Duration(iters * r.comm * float64(time.Second)),
			Window: window, MessagesProcessed: int64(math.Round(iters * deg)),
			ComputePerMessage: time.Duration(r.compute / deg * float64(time.Second)),
			LastMigration:     r.lastMigration, Policy: r.spec.Policy}
		for _, e := range r.spec.Peers {
			rp.Peers = append(rp.Peers, iosbridge.PeerComm{Rank: e.Rank, Messages: msgs, Bytes: msgs * e.Bytes})
		}
		sort.Slice(rp.Peers, func(a, b int) bool { return rp.Peers[a].Rank < rp.Peers[b].Rank })
		profiles = append(profiles, rp)
	}
	sort.Slice(prof.Ranks, func(a, b int) bool {
		if prof.Ranks[a].Job != prof.Ranks[b].Job {
			return prof.Ranks[a].Job < prof.Ranks[b].Job
		}
		return prof.Ranks[a].Rank < prof.Ranks[b].Rank
	})
	if err := n.agent.Update(s.wall(), prof, profiles); err != nil {
		s.res.StepErrors++
		if s.res.FirstError == nil {
			s.res.FirstError = fmt.Errorf("at %v, update %s: %w", s.now, n.spec.ID, err)
		}
	}
}

func (s *sim) finish() {
	for _, n := range s.nodes {
		st := n.agent.Stats()
		s.res.Rotations += st.RanksRelayed
		s.res.ExchangesCancelled += st.ExchangesCancelled
	}
	s.res.Placement = map[iosbridge.RankID]string{}
	s.res.MigrationsPerRank = map[iosbridge.RankID]int{}
	for _, r := range s.ranks {
		s.res.Placement[r.id] = s.nodes[r.node].spec.ID
		s.res.MigrationsPerRank[r.id] = r.migrations
	}
	var edges, remote, wide int
	for _, r := range s.ranks {
		for _, e := range r.spec.Peers {
			p := s.ranks[s.byID[iosbridge.RankID{Job: r.spec.Job, Rank: e.Rank}]]
			edges++
			if p.node != r.node {
				remote++
				if s.nodes[p.node].spec.Cluster != s.nodes[r.node].spec.Cluster {
					wide++
				}
			}
		}
	}
	if edges > 0 {
		s.res.RemoteEdges, s.res.WideEdges = float64(remote)/float64(edges), float64(wide)/float64(edges)
	}
	for _, i := range s.live {
		s.res.NodeSeconds += (s.res.End - s.nodes[i].startedAt).Seconds()
	}
}

func insertSorted(xs []int, x int) []int {
	i := sort.SearchInts(xs, x)
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

func removeSorted(xs []int, x int) []int {
	i := sort.SearchInts(xs, x)
	if i < len(xs) && xs[i] == x {
		return append(xs[:i], xs[i+1:]...)
	}
	return xs
}
