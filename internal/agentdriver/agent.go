// Package agentdriver runs a node's IOS agent: the thin I/O loop around iosbridge.Node,
// which makes the decisions (after MPI/IOS and Desell's IOS). One goroutine owns the Node;
// it samples the node's resources, feeds it the node's ranks and their latest profiles,
// carries its protocol messages over NATS (mpios.node.NODE.ios) and asks jobs to migrate
// the ranks it gives away (job.ControlSubject). pcmd serve starts one per node.
package agentdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/profiler"
)

// Defaults of Config.
const (
	DefaultPeriod         = 2 * time.Second
	DefaultTick           = 500 * time.Millisecond
	DefaultControlTimeout = 10 * time.Second // outlasts supervisor.JointTimeout (an exchange's parts)
)

// Config configures the node's IOS agent (see iosbridge): profiling, random stealing and
// decisions. Zero values select the defaults.
type Config struct {
	// Disabled turns the agent off: no profiling, no stealing, no migrations.
	Disabled bool
	// Policy is the node's decision policy (iosbridge.PolicyNames); "" = iosbridge.DefaultPolicy.
	// A job that names its own (mpirun --policy) is decided by that one on every node.
	Policy string
	// Period is how often the node's resources are sampled and the protocol learns the
	// ranks' latest profiles; 0 = DefaultPeriod.
	Period time.Duration
	// Tick drives the protocol's timers (heartbeats, steal timeouts, new steals);
	// 0 = DefaultTick.
	Tick time.Duration
	// StealThreshold: the node sends steal requests while its availability (idle fraction of
	// its CPUs, quota included) is at least this; 0 = 0.25.
	StealThreshold float64
	// TTL is the time to live of a steal request; 0 = 3 (it visits up to 4 nodes).
	TTL int
	// Cooldown: a rank that arrived less than Cooldown ago is not moved again;
	// 0 = iosbridge.DefaultStability's (one minute).
	Cooldown time.Duration
	// Cluster is the node's cluster (pcmd serve --cluster), for cluster-aware stealing.
	Cluster string
	// Hierarchical runs the thesis's hierarchical policy (hierarchy.go) for the jobs with
	// ranks here: when their nodes' iteration times diverge, or a peer is idle, the elected
	// manager asks the job to move ranks to the nodes' shares (pcmd serve --hierarchical).
	Hierarchical bool
	// Slots is this node's pcmd serve --slots, carried in its IOS profile so that a node
	// whose ranks fill its slots is given no rank it would refuse; 0: unlimited.
	Slots int
	// FreeSlots gives the free slots of this node and its peers (pcmd's heartbeats): the
	// hierarchical manager grows a malleable job onto a joined node by that many ranks. nil
	// counts none, so jobs are never grown.
	FreeSlots func() map[string]int
	// QuotaOnly measures the node's spare CPU from its cgroup quota and usage only, not from
	// the host's idle CPUs (see iosbridge.Sampler.QuotaOnly): for nodes sharing a machine.
	QuotaOnly bool
	// ControlTimeout bounds the wait for a job's answer to a migration request;
	// 0 = DefaultControlTimeout.
	ControlTimeout time.Duration
	// Key is the node's signing key (pcmd's NKey, as a ctlauth.RoleNode sender): the
	// agent's migration requests are signed with it, and jobs take them only from the nodes
	// that run the ranks concerned (supervisor.AuthorizeControl). Required unless Disabled.
	Key *ctlauth.KeyWrapper
	// Peers are the keys of the other nodes (pcmd's, pinned from their heartbeats or from
	// --known-nodes): a protocol message (steal request, accept...) counts only if signed
	// by the key of the node it claims to come from. Nil: the agent pins the first key
	// each node signs with.
	Peers *ctlauth.NodePins
	// Jobs are the keys of the jobs whose ranks the node started (pcmd's keyring): a rank's
	// profile counts only under its job's key, so a forged one cannot put a job under
	// another policy than its own (--policy none) or fake a slow rank. Nil: profiles are
	// taken as published (an agent tested alone).
	Jobs *ctlauth.JobKeyring
	// Protocol sets the protocol's timers (StealTimeout, BackoffMin/Max, HeartbeatInterval,
	// PeerTimeout, PendingTimeout); its other fields are taken from the fields above.
	Protocol iosbridge.Config

	// For tests: the resource sampler (nil = iosbridge.Sampler on this machine, in pcmd's own
	// cgroup), the reader of the ranks' CPU time and memory (nil = /proc; tests that feed
	// fake profiles may pass NoProcesses), the clock (nil = time.Now) and the random seed
	// (0 = random).
	Sampler ResourceSampler
	Procs   ProcessReader
	Clock   func() time.Time
	Seed    uint64
}

// ResourceSampler measures the node's resources; *iosbridge.Sampler is one.
type ResourceSampler interface {
	Sample(now time.Time, ranks []iosbridge.RankID) (iosbridge.NodeProfile, error)
}

// ProcessReader reads a rank's CPU time and memory; *iosbridge.Sampler is one.
type ProcessReader interface {
	Process(pid int) (iosbridge.ProcTimes, error)
}

// NoProcesses is a ProcessReader that knows no process: the ranks' CPU use is then taken as
// their fair share of the node.
var NoProcesses ProcessReader = noProcs{}

type noProcs struct{}

func (noProcs) Process(pid int) (iosbridge.ProcTimes, error) {
	return iosbridge.ProcTimes{}, fmt.Errorf("process %d: not measured", pid)
}

// Validate checks the configuration and fills in the defaults of fields left zero. A
// disabled agent's configuration is not checked.
func (c *Config) Validate() error {
	if c.Disabled {
		return nil
	}
	name := strings.ToLower(strings.TrimSpace(c.Policy))
	if name == "" {
		name = iosbridge.DefaultPolicy
	}
	if _, err := iosbridge.PolicyByName(name); err != nil {
		return fmt.Errorf("pcmd: --policy: %s", strings.TrimPrefix(err.Error(), "iosbridge: "))
	}
	c.Policy = name
	if len(c.Cluster) > iosbridge.MaxClusterName {
		return fmt.Errorf("pcmd: --cluster: %d bytes, want at most %d", len(c.Cluster), iosbridge.MaxClusterName)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Period, DefaultPeriod)
	def(&c.Tick, DefaultTick)
	def(&c.ControlTimeout, DefaultControlTimeout)
	switch {
	case c.Period < job.MinInterval || c.Tick < job.MinInterval || c.Period > job.MaxInterval || c.Tick > job.MaxInterval:
		return fmt.Errorf("pcmd: IOS period %v and tick %v: want %v to %v", c.Period, c.Tick, job.MinInterval, job.MaxInterval)
	case c.ControlTimeout < 0 || c.Cooldown < 0:
		return errors.New("pcmd: IOS control timeout and cooldown must not be negative")
	case !(c.StealThreshold >= 0 && c.StealThreshold <= 1):
		return fmt.Errorf("pcmd: --steal-threshold %v: want 0 to 1", c.StealThreshold)
	case c.TTL < 0 || c.TTL > iosbridge.MaxTTL:
		return fmt.Errorf("pcmd: --steal-ttl %d: want 0 to %d", c.TTL, iosbridge.MaxTTL)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Sampler == nil || c.Procs == nil {
		smp := &iosbridge.Sampler{QuotaOnly: c.QuotaOnly} // finds pcmd's own cgroup
		if c.Sampler == nil {
			c.Sampler = smp
		}
		if c.Procs == nil {
			c.Procs = smp
		}
	}
	return nil
}

// Sizes of the agent's bounded buffers.
const (
	agentInbox     = 1024    // protocol messages waiting for the agent's goroutine
	keyEvents      = 48      // gives, steals and migration outcomes kept for status
	maxIters       = 1 << 16 // ranks whose iteration times the hierarchical manager keeps
	routineEvents  = 16      // declines and failed steals kept for status
	warnEvery      = 10 * time.Second
	maxReasonBytes = 1024 // job.ControlRequest.Reason
)

// rankKey names a rank of a job.
type rankKey struct {
	job  string
	rank int
}

type profEntry struct {
	raw  []byte
	prof profiler.RankProfile
	recv time.Time
}

type procSample struct {
	cpu   time.Duration
	start uint64
	at    time.Time
}

type migResult struct {
	m   iosbridge.Migration
	rep job.ControlReply
	err error
}

// Agent is a running IOS agent of a node. One goroutine (run) owns the iosbridge.Node and everything
// below "loop-owned"; NATS callbacks hand it their input through channels, except the ranks'
// profiles, which they keep in a map under pmu.
type Agent struct {
	cfg   Config
	node  string
	nc    *nats.Conn
	log   *log.Logger
	ranks func() []job.RankInfo // the node's rank table
	peers func() []string       // the nodes whose heartbeats are current

	inbox    chan inboxMsg
	verifier *ctlauth.KeyVerifier // the protocol messages of the peers
	results  chan migResult
	stateReq chan chan job.IOSState
	xfers    chan transfer
	quit     chan struct{}
	done     chan struct{}
	subs     []*nats.Subscription

	pmu      sync.Mutex
	profiles map[rankKey]*profEntry
	iters    map[rankKey]remoteIter // every rank's iteration time, for the hierarchical manager

	badMessages atomic.Uint64
	badProfiles atomic.Uint64
	wmu         sync.Mutex
	warned      map[string]time.Time
	suppressed  map[string]int

	// loop-owned
	n           *iosbridge.Node
	procs       map[int]procSample
	tablePeers  map[string]bool
	joinedAt    map[string]time.Time
	key, minor  []job.IOSEvent
	sample      iosbridge.NodeProfile
	sampleErr   string
	jobPolicies map[string]string
	hierBusy    map[string]bool      // a hierarchical request to the job is in flight
	hierNext    map[string]time.Time // the job is not planned again before
	hierResults chan hierResult
	migOK       uint64
	migFailed   uint64
}

// Start validates cfg, subscribes to the agent's subjects on nc and starts the agent of
// node. ranks returns the node's rank table, peers the nodes whose heartbeats are current;
// both are called from the agent's goroutine and must be safe for concurrent use.
func Start(cfg Config, node string, nc *nats.Conn, logger *log.Logger, ranks func() []job.RankInfo, peers func() []string) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Key == nil {
		return nil, errors.New("pcmd: IOS agent: no node key to sign its requests with")
	}
	if cfg.Peers == nil {
		cfg.Peers = ctlauth.NewNodePins(node, nil)
	}
	verifier, err := ctlauth.NewKeyVerifier(cfg.Peers, ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)})
	if err != nil {
		return nil, fmt.Errorf("pcmd: IOS agent: %w", err)
	}
	policy, _ := iosbridge.PolicyByName(cfg.Policy)
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := fnv.New64a()
	h.Write([]byte(node))
	stab := iosbridge.DefaultStability()
	if cfg.Cooldown > 0 {
		stab.Cooldown = cfg.Cooldown
	}
	nodeCfg := cfg.Protocol
	nodeCfg.ID, nodeCfg.Policy, nodeCfg.Rand = node, policy, rand.New(rand.NewPCG(seed, h.Sum64()))
	nodeCfg.StealThreshold, nodeCfg.TTL, nodeCfg.Stability = cfg.StealThreshold, cfg.TTL, stab
	// Heartbeats are echoed and timed, so NRS (a node's or a job's) and status see the
	// latencies between the nodes: one small echo per heartbeat.
	nodeCfg.Cluster, nodeCfg.MeasureLatency = cfg.Cluster, true
	n, err := iosbridge.NewNode(nodeCfg)
	if err != nil {
		return nil, fmt.Errorf("pcmd: IOS agent: %s", strings.TrimPrefix(err.Error(), "iosbridge: "))
	}
	a := &Agent{
		cfg: cfg, node: node, nc: nc, log: logger, ranks: ranks, peers: peers,
		verifier: verifier, inbox: make(chan inboxMsg, agentInbox), results: make(chan migResult, 16),
		stateReq: make(chan chan job.IOSState), xfers: make(chan transfer, 64), quit: make(chan struct{}), done: make(chan struct{}),
		profiles: map[rankKey]*profEntry{}, warned: map[string]time.Time{}, suppressed: map[string]int{},
		n: n, procs: map[int]procSample{}, tablePeers: map[string]bool{}, joinedAt: map[string]time.Time{},
		jobPolicies: map[string]string{}, iters: map[rankKey]remoteIter{},
		hierBusy: map[string]bool{}, hierNext: map[string]time.Time{}, hierResults: make(chan hierResult, 16),
	}
	for _, sb := range []struct {
		subj string
		fn   nats.MsgHandler
	}{
		{job.IOSInboxSubject(node), a.onProtocol},
		{job.IOSStateSubject(node), a.onState},
		{job.IOSDiscoverSubject, a.onState},
		{job.ProfileSubjectAll, a.onProfile},
	} {
		sub, err := nc.Subscribe(sb.subj, sb.fn)
		if err != nil {
			a.unsubscribe()
			return nil, fmt.Errorf("pcmd: subscribe to %s: %w", sb.subj, err)
		}
		a.subs = append(a.subs, sub)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		a.unsubscribe()
		return nil, fmt.Errorf("pcmd: NATS flush: %w", err)
	}
	a.log.Printf("IOS agent: policy %s, sampling every %v, steals at availability >= %.2f (TTL %d), cooldown %v",
		cfg.Policy, cfg.Period, nodeStealThreshold(cfg), ttlOrDefault(cfg.TTL), stab.Cooldown)
	go a.run()
	return a, nil
}

func nodeStealThreshold(c Config) float64 {
	if c.StealThreshold == 0 {
		return 0.25
	}
	return c.StealThreshold
}

func ttlOrDefault(ttl int) int {
	if ttl == 0 {
		return 3
	}
	return ttl
}

func (a *Agent) unsubscribe() {
	for _, s := range a.subs {
		_ = s.Unsubscribe()
	}
	a.subs = nil
}

// transfer is a bulk transfer received from node from (ObserveTransfer).
type transfer struct {
	from  string
	bytes int64
	d     time.Duration
}

// ObserveTransfer tells the agent of a bulk transfer of bytes received from node from,
// which took d from its connection to its last byte (pcmd's pieceserver calls it for each
// buddy copy of a checkpoint piece): the agent's node folds it into its bandwidth to that
// peer (iosbridge.Node.ObserveTransfer), which its policies price the link with and pcmd
// status shows (peer_bandwidth_bps). It never blocks: a transfer told while 64 others wait
// for the agent is left out. Safe for concurrent use.
func (a *Agent) ObserveTransfer(from string, bytes int64, d time.Duration) {
	select {
	case a.xfers <- transfer{from: from, bytes: bytes, d: d}:
	default:
	}
}

// Stop leaves the peer network (telling the neighbours) and stops the agent.
func (a *Agent) Stop() {
	a.unsubscribe()
	close(a.quit)
	<-a.done
}

// warn logs a problem with input from the network, at most once per warnEvery per kind.
func (a *Agent) warn(kind, format string, args ...any) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	now := time.Now()
	if t, ok := a.warned[kind]; ok && now.Sub(t) < warnEvery {
		a.suppressed[kind]++
		return
	}
	msg := fmt.Sprintf(format, args...)
	if k := a.suppressed[kind]; k > 0 {
		msg += fmt.Sprintf(" (and %d more like it)", k)
	}
	a.warned[kind], a.suppressed[kind] = now, 0
	a.log.Print("IOS agent: " + msg)
}

// inboxMsg is a protocol message whose signature verified: its body and its signer's node.
type inboxMsg struct {
	from string
	body []byte
}

// onProtocol verifies a protocol message (signed by the key of the node it comes from,
// never seen before) and queues it for the agent's goroutine: a fake steal request must
// not make the agent give a rank away.
func (a *Agent) onProtocol(m *nats.Msg) {
	msg, err := a.verifier.Verify(m.Subject, m.Data, time.Now())
	if err != nil {
		a.badMessages.Add(1)
		a.warn("forged", "dropping a protocol message that does not verify: %v", err)
		return
	}
	if !a.cfg.Peers.Pin(msg.From.Node, msg.Key) {
		a.badMessages.Add(1)
		a.warn("forged", "dropping a protocol message of node %s signed with another key than its pinned one", msg.From.Node)
		return
	}
	select {
	case a.inbox <- inboxMsg{from: msg.From.Node, body: msg.Body}:
	default:
		a.badMessages.Add(1)
		a.warn("overflow", "dropping a protocol message: %d messages are waiting", agentInbox)
	}
}

// onState answers a status request with the agent's state.
func (a *Agent) onState(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	ch := make(chan job.IOSState, 1)
	select {
	case a.stateReq <- ch:
	case <-a.quit:
		return
	case <-time.After(2 * time.Second):
		return
	}
	st := <-ch // the loop always answers a request it took
	// Signed by the node, bound to the requester's inbox: anyone can answer in its place.
	data, err := job.Encode(st)
	if err == nil {
		data, err = a.cfg.Key.Wrap(m.Reply, data, time.Now())
	}
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		a.warn("state", "reply on %s: %v", m.Subject, err)
	}
}

// onProfile keeps the latest profile of every rank of this node.
func (a *Agent) onProfile(m *nats.Msg) {
	tok := strings.Split(m.Subject, ".")
	if len(tok) != 4 {
		return
	}
	jobID := tok[2]
	data := m.Data
	if a.cfg.Jobs != nil {
		body, from, err := a.cfg.Jobs.Open(jobID, m.Subject, m.Data, time.Now())
		if errors.Is(err, ctlauth.ErrUnknownJob) {
			// A job the node holds no key of: one it runs ranks of was started without a
			// secret (an --insecure-open node), and its profiles come in clear; any other
			// is not this node's to judge.
			if _, envErr := ctlauth.DecodeEnvelope(m.Data); envErr == nil || !a.runsJob(jobID) {
				return
			}
			body, from, err = m.Data, ctlauth.Sender{Role: ctlauth.RoleRank}, nil
		}
		if err == nil && from.Role != ctlauth.RoleRank {
			err = fmt.Errorf("sent by %s, not by a rank", from)
		}
		if err != nil {
			a.badProfiles.Add(1)
			a.warn("profile", "dropping a profile on %s that does not verify: %v", m.Subject, err)
			return
		}
		data = body
	}
	var p profiler.RankProfile
	if err := json.Unmarshal(data, &p); err != nil {
		a.badProfiles.Add(1)
		a.warn("profile", "dropping a malformed profile on %s: %v", m.Subject, err)
		return
	}
	if a.cfg.Hierarchical && p.Job == jobID && p.Rank >= 0 && job.ValidateNode(p.Node) == nil &&
		p.MeanIterSeconds > 0 && p.MeanIterSeconds < 1e6 {
		// The manager compares the iteration times of every node of a job.
		a.pmu.Lock()
		if len(a.iters) < maxIters {
			a.iters[rankKey{p.Job, p.Rank}] = remoteIter{node: p.Node, iter: time.Duration(p.MeanIterSeconds * float64(time.Second)), at: a.cfg.Clock()}
		}
		a.pmu.Unlock()
	}
	if p.Node != a.node {
		// Ranks labelled with another node are theirs; an unlabelled rank (MPIOS_NODE
		// unset) is ours if its pid is that of one of our ranks.
		ours := false
		if p.Node == "" && p.PID > 0 {
			for _, r := range a.ranks() {
				ours = ours || r.Job == p.Job && r.Rank == p.Rank && r.PID == p.PID
			}
		}
		if !ours {
			return
		}
	}
	if p.Job != jobID {
		a.badProfiles.Add(1)
		a.warn("profile", "dropping a profile of job %q published on %s", p.Job, m.Subject)
		return
	}
	if err := p.IOS().Validate(); err != nil {
		a.badProfiles.Add(1)
		a.warn("profile", "dropping an invalid profile of job %s rank %d: %s", p.Job, p.Rank, strings.TrimPrefix(err.Error(), "iosbridge: "))
		return
	}
	a.pmu.Lock()
	a.profiles[rankKey{p.Job, p.Rank}] = &profEntry{raw: slices.Clone(data), prof: p, recv: a.cfg.Clock()}
	a.pmu.Unlock()
}

func (a *Agent) run() {
	defer close(a.done)
	sample := time.NewTicker(a.cfg.Period)
	defer sample.Stop()
	tick := time.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	a.resample()
	a.syncPeers()
	a.flush()
	for {
		select {
		case <-a.quit:
			a.n.Leave(a.cfg.Clock())
			a.flush()
			return
		case <-sample.C:
			a.resample()
		case <-tick.C:
			a.syncPeers()
			a.n.Tick(a.cfg.Clock())
		case in := <-a.inbox:
			a.step(in)
		case r := <-a.results:
			a.migrationDone(r)
		case r := <-a.hierResults:
			a.hierDone(r)
		case ch := <-a.stateReq:
			ch <- a.state()
		case x := <-a.xfers:
			err := a.n.ObserveTransfer(a.cfg.Clock(), x.from, x.bytes, x.d)
			if err != nil && !errors.Is(err, iosbridge.ErrTransferTooSmall) {
				a.warn("transfer", "transfer not measured: %v", err)
			}
		}
		a.flush()
	}
}

// resample feeds the node a fresh resource sample and its ranks' latest profiles.
func (a *Agent) resample() {
	now := a.cfg.Clock()
	table := a.ranks()
	ids := make([]iosbridge.RankID, len(table))
	for i, r := range table {
		ids[i] = iosbridge.RankID{Job: r.Job, Rank: r.Rank}
	}
	np, err := a.cfg.Sampler.Sample(now, ids)
	if err == nil {
		np.Node, np.Slots = a.node, a.cfg.Slots
		err = np.Validate()
	}
	if err != nil {
		a.sampleErr = strings.TrimPrefix(err.Error(), "iosbridge: ")
		a.warn("sample", "cannot sample this node's resources: %s", a.sampleErr)
		return // the protocol keeps the last good sample
	}
	a.sampleErr = ""
	ranks := a.rankProfiles(now, table)
	if err := a.n.Update(now, np, ranks); err != nil {
		a.warn("update", "%v", err)
		return
	}
	a.sample = np
	if a.cfg.Hierarchical {
		a.planHierarchy(now)
	}
}

// staleAfter is how old a profile may be and still describe a rank: a few of the ranks'
// default publication periods, or of ours if longer.
func (a *Agent) staleAfter() time.Duration {
	return max(5*profiler.DefaultEvery, 3*a.cfg.Period)
}

// rankProfiles converts the latest profile of every rank in table, completed with its
// process's CPU use and memory, and forgets what no longer runs here.
func (a *Agent) rankProfiles(now time.Time, table []job.RankInfo) []iosbridge.RankProfile {
	inTable := make(map[rankKey]job.RankInfo, len(table))
	for _, r := range table {
		inTable[rankKey{r.Job, r.Rank}] = r
	}
	a.pmu.Lock()
	for k, e := range a.profiles {
		if _, ok := inTable[k]; !ok && now.Sub(e.recv) > a.staleAfter() {
			delete(a.profiles, k)
		}
	}
	for k, r := range a.iters {
		if now.Sub(r.at) > a.staleAfter() {
			delete(a.iters, k)
		}
	}
	entries := make(map[rankKey]profEntry, len(table))
	for k := range inTable {
		if e := a.profiles[k]; e != nil {
			entries[k] = *e
		}
	}
	a.pmu.Unlock()

	var out []iosbridge.RankProfile
	pids := map[int]bool{}
	clear(a.jobPolicies)
	for _, r := range table {
		pids[r.PID] = true
		e, ok := entries[rankKey{r.Job, r.Rank}]
		if !ok || now.Sub(e.recv) > a.staleAfter() || e.prof.PID > 0 && e.prof.PID != r.PID && e.prof.At.Before(r.Started) {
			continue // no profile yet, or one of an earlier process of this rank
		}
		rp := e.prof.IOS()
		rp.Node = a.node
		// The cooldown runs from a migrated rank's arrival here (its successor's start); a
		// fresh start is free to move at once, so a job adapts from its first iterations.
		if r.Successor {
			rp.LastMigration = r.Started
		}
		if pt, err := a.cfg.Procs.Process(r.PID); err == nil {
			rp.MemoryBytes = pt.RSSBytes
			if prev, ok := a.procs[r.PID]; ok && prev.start == pt.StartTicks && now.After(prev.at) && pt.CPU >= prev.cpu {
				if u := float64(pt.CPU-prev.cpu) / float64(now.Sub(prev.at)); u >= 0 && !math.IsInf(u, 0) {
					rp.CPUUse = u
				}
			}
			a.procs[r.PID] = procSample{cpu: pt.CPU, start: pt.StartTicks, at: now}
		}
		if err := rp.Validate(); err != nil {
			a.warn("profile", "ignoring the profile of job %s rank %d: %s", r.Job, r.Rank, strings.TrimPrefix(err.Error(), "iosbridge: "))
			continue
		}
		if rp.Policy != "" && rp.Policy != a.cfg.Policy {
			a.jobPolicies[rp.Job] = rp.Policy
		}
		out = append(out, rp)
	}
	for pid := range a.procs {
		if !pids[pid] {
			delete(a.procs, pid)
		}
	}
	return out
}

// syncPeers follows pcmd's peer table: a node whose heartbeats are current and that the
// protocol does not know is sent a Join (again after a PeerTimeout without answer); a node
// that left the table leaves the protocol's neighbours too.
func (a *Agent) syncPeers() {
	now := a.cfg.Clock()
	cur := map[string]bool{}
	for _, p := range a.peers() {
		if p != a.node {
			cur[p] = true
		}
	}
	known := map[string]bool{}
	for _, p := range a.n.Peers() {
		known[p] = true
	}
	for p := range a.tablePeers {
		if !cur[p] {
			delete(a.joinedAt, p)
			if known[p] {
				_ = a.n.Step(now, iosbridge.Message{Kind: iosbridge.KindLeave, From: p, To: a.node})
			}
		}
	}
	retry := a.cfg.Protocol.PeerTimeout
	if retry == 0 {
		retry = 10 * time.Second
	}
	var join []string
	for p := range cur {
		if t, ok := a.joinedAt[p]; !known[p] && (!ok || now.Sub(t) >= retry) {
			join = append(join, p)
			a.joinedAt[p] = now
		}
	}
	slices.Sort(join)
	if len(join) > 0 {
		a.n.Join(now, join)
	}
	a.tablePeers = cur
}

// step hands one protocol message to the node; bad ones are counted, logged and dropped.
func (a *Agent) step(in inboxMsg) {
	var m iosbridge.Message
	if err := job.Decode(in.body, &m); err != nil {
		a.drop("a malformed protocol message: %v", job.TrimPrefix(err).Error())
		return
	}
	if m.From != in.from {
		a.drop("a %s message claiming to come from %q, signed by node %s", m.Kind, m.From, in.from)
		return
	}
	names := append([]string{m.From, m.To, m.Origin, m.SwapTo}, m.Peers...)
	if m.RelayProfile != nil {
		names = append(names, m.RelayProfile.Node)
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		if err := job.ValidateNode(name); err != nil {
			a.drop("a %s message from %q: %v", m.Kind, m.From, job.TrimPrefix(err).Error())
			return
		}
	}
	if m.Profile != nil {
		if err := job.ValidateNode(m.Profile.Node); err != nil {
			a.drop("a %s message from %q: %v", m.Kind, m.From, job.TrimPrefix(err).Error())
			return
		}
	}
	if m.To != a.node {
		a.drop("a %s message for node %q from %q", m.Kind, m.To, m.From)
		return
	}
	now := a.cfg.Clock()
	refused := a.n.Stats().ExchangesRefused
	err := a.n.Step(now, m)
	switch {
	case errors.Is(err, iosbridge.ErrLeft):
		return
	case err != nil:
		a.drop("a %s message from %s: %s", m.Kind, m.From, strings.TrimPrefix(err.Error(), "iosbridge: "))
		return
	}
	switch {
	case m.Kind == iosbridge.KindStealAccept && a.n.Stats().ExchangesRefused != refused:
		a.event(false, job.IOSEvent{At: now, Kind: job.IOSStealFailed, Rank: -1, Peer: m.From,
			Reason: fmt.Sprintf("refused %s's exchange for request %d (late, or this node's ranks changed): nothing moves", m.From, m.ID)})
	case m.Kind == iosbridge.KindStealAccept:
		given := m.Rank.String()
		if m.Pair != (iosbridge.RankID{}) {
			given += " and " + m.Pair.String() // a pair swap
		}
		a.event(true, job.IOSEvent{At: now, Kind: job.IOSStolen, Job: m.Rank.Job, Rank: m.Rank.Rank, Peer: m.From, Gain: m.Gain,
			Reason: fmt.Sprintf("%s gives %s to this node: %s", m.From, given, m.Reason)})
	case m.Kind == iosbridge.KindStealFail:
		a.event(false, job.IOSEvent{At: now, Kind: job.IOSStealFailed, Rank: -1, Peer: m.From,
			Reason: fmt.Sprintf("steal request %d failed at %s: %s", m.ID, m.From, m.Reason)})
	case m.Kind == iosbridge.KindMigrationFailed:
		a.event(true, job.IOSEvent{At: now, Kind: job.IOSMigrateFailed, Job: m.Rank.Job, Rank: m.Rank.Rank, Peer: m.From,
			Reason: fmt.Sprintf("%s's move of %s to this node failed: no longer counted as coming", m.From, m.Rank)})
	}
}

func (a *Agent) drop(format string, args ...any) {
	a.badMessages.Add(1)
	a.warn("protocol", "dropping "+format, args...)
}

// event records a decision or an outcome for status: key events (gives, arrivals,
// migrations) and routine ones (declines, failed steals) are kept in separate rings so that
// frequent declines cannot push the migrations out.
func (a *Agent) event(key bool, e job.IOSEvent) {
	ring, limit := &a.minor, routineEvents
	if key {
		ring, limit = &a.key, keyEvents
	}
	if len(e.Reason) > maxReasonBytes {
		e.Reason = e.Reason[:maxReasonBytes]
	}
	*ring = append(*ring, e)
	if len(*ring) > limit {
		*ring = slices.Delete(*ring, 0, len(*ring)-limit)
	}
}

// flush carries out what the node wants: messages to their nodes, migrations to the jobs.
func (a *Agent) flush() {
	rd := a.n.Ready()
	for _, d := range rd.Decisions {
		e := job.IOSEvent{At: d.At, Kind: job.IOSDecline, Rank: -1, Peer: d.Origin, Policy: d.Decision.Policy,
			Gain: d.Decision.Gain, Reason: d.Decision.Reason}
		if d.Decision.Migrate {
			e.Kind, e.Job, e.Rank = job.IOSGive, d.Decision.Rank.Job, d.Decision.Rank.Rank
		}
		a.event(d.Decision.Migrate, e)
	}
	for _, m := range rd.Messages {
		if err := job.ValidateNode(m.To); err != nil {
			a.warn("send", "not sending a %s message to %q: %v", m.Kind, m.To, job.TrimPrefix(err).Error())
			continue
		}
		data, err := job.Encode(m)
		if err == nil {
			data, err = a.cfg.Key.Wrap(job.IOSInboxSubject(m.To), data, time.Now())
		}
		if err == nil {
			err = a.nc.Publish(job.IOSInboxSubject(m.To), data)
		}
		if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			a.warn("send", "send %s to %s: %v", m.Kind, m.To, err)
		}
	}
	for _, ms := range batches(rd.Migrations) {
		a.migrate(ms)
	}
	if a.n.HasReady() {
		a.flush() // a migration not sent (job policy none): its receiver is told at once
	}
}

// policyOf is the policy that governs a rank: its job's, or the node's.
func (a *Agent) policyOf(r iosbridge.RankID) string {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	if e := a.profiles[rankKey{r.Job, r.Rank}]; e != nil && e.prof.Policy != "" {
		return e.prof.Policy
	}
	return a.cfg.Policy
}

// batches groups migrations for one request to one node of one job (a pair swap's two
// ranks), in order: they go to the job in one request, which moves them at the same
// iteration boundary or not at all, so PCM cannot carry out half of the pair.
func batches(ms []iosbridge.Migration) [][]iosbridge.Migration {
	var out [][]iosbridge.Migration
	for _, m := range ms {
		if k := len(out) - 1; k >= 0 && m.RequestID != 0 {
			if p := out[k][0]; p.RequestID == m.RequestID && p.To == m.To && p.Rank.Job == m.Rank.Job && p.Origin == m.Origin {
				out[k] = append(out[k], m)
				continue
			}
		}
		out = append(out, []iosbridge.Migration{m})
	}
	return out
}

// migrate asks the ranks' job to move them (one job, one target), in the background; the
// answer comes back to the loop through results, one per rank.
func (a *Agent) migrate(ms []iosbridge.Migration) {
	m := ms[0]
	if p := a.policyOf(m.Rank); p == iosbridge.PolicyNone {
		// The policies never decide this (iosbridge.PerRank); keep the promise anyway.
		for _, m := range ms {
			a.failed(a.cfg.Clock(), m.Rank)
			a.event(true, job.IOSEvent{At: a.cfg.Clock(), Kind: job.IOSMigrateFailed, Job: m.Rank.Job, Rank: m.Rank.Rank, Peer: m.To,
				Policy: m.Policy, Reason: "not sent: job policy none"})
		}
		return
	}
	reason := fmt.Sprintf("ios %s: node %s steals, gain %.4g: %s", m.Policy, m.To, m.Gain, m.Reason)
	if len(reason) > maxReasonBytes {
		reason = reason[:maxReasonBytes]
	}
	req := job.ControlRequest{Kind: job.ControlMigrate, Rank: m.Rank.Rank, To: m.To, Reason: reason}
	if len(ms) > 1 {
		for _, x := range ms {
			req.Ranks = append(req.Ranks, x.Rank.Rank)
		}
	}
	if len(m.Parties) > 0 {
		// This node's part of an exchange: the job moves it with the other nodes' parts.
		req.Exchange = &job.ExchangePart{Origin: m.Origin, ID: m.RequestID, Parties: m.Parties}
	}
	a.log.Printf("IOS agent: asking job %s to move rank(s) %v to %s (%s)", m.Rank.Job, rankList(ms), m.To, reason)
	go func() {
		rep, err := nodestatus.Control(a.nc, m.Rank.Job, req, a.cfg.Key, nodestatus.JobReplies(a.cfg.Jobs, m.Rank.Job), a.cfg.ControlTimeout)
		for _, m := range ms {
			select {
			case a.results <- migResult{m: m, rep: rep, err: err}:
			case <-a.quit:
				return
			}
		}
	}()
}

func rankList(ms []iosbridge.Migration) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.Rank.Rank
	}
	return out
}

func (a *Agent) migrationDone(r migResult) {
	e := job.IOSEvent{At: a.cfg.Clock(), Kind: job.IOSMigrateOK, Job: r.m.Rank.Job, Rank: r.m.Rank.Rank, Peer: r.m.To, Policy: r.m.Policy, Gain: r.m.Gain}
	switch {
	case r.err != nil:
		e.Kind, e.Reason = job.IOSMigrateFailed, strings.TrimPrefix(r.err.Error(), "pcmd: ")
	case !r.rep.OK:
		e.Kind, e.Reason = job.IOSMigrateFailed, "refused: "+r.rep.Error
	default:
		e.Reason = r.rep.Message
	}
	if e.Kind == job.IOSMigrateFailed {
		a.failed(e.At, r.m.Rank)
		a.log.Printf("IOS agent: job %s did not move rank %d to %s: %s", e.Job, e.Rank, e.Peer, e.Reason)
	} else {
		a.migOK++
		a.log.Printf("IOS agent: job %s moves rank %d to %s: %s", e.Job, e.Rank, e.Peer, e.Reason)
	}
	a.event(true, e)
}

// failed frees a rank whose migration did not happen and starts its cooldown, so that a job
// that refuses is not asked again at every steal request.
func (a *Agent) failed(now time.Time, rank iosbridge.RankID) {
	a.n.MigrationFailed(rank)
	a.n.Cooldown(now, rank)
	a.migFailed++
}

// state describes the agent for pcmd status.
func (a *Agent) state() job.IOSState {
	st := job.IOSState{
		Node: a.node, Policy: a.cfg.Policy, StealThreshold: nodeStealThreshold(a.cfg), Period: a.cfg.Period,
		SampledAt: a.sample.SampledAt, CPUs: a.sample.CPUs, EffectiveCPUs: a.sample.EffectiveCPUs,
		Availability: a.sample.Availability, MemFreeBytes: a.sample.MemFreeBytes, MemTotalBytes: a.sample.MemTotalBytes,
		Load1: a.sample.Load1, SampleError: a.sampleErr, Peers: a.n.Peers(), LoadSource: a.sample.LoadSource,
		Cluster: a.cfg.Cluster,
	}
	for _, p := range st.Peers {
		if rtt, ok := a.n.Latency(p); ok {
			if st.PeerRTT == nil {
				st.PeerRTT = map[string]time.Duration{}
			}
			st.PeerRTT[p] = rtt
		}
		if rtt, ok := a.n.BaseLatency(p); ok {
			if st.PeerBaseRTT == nil {
				st.PeerBaseRTT = map[string]time.Duration{}
			}
			st.PeerBaseRTT[p] = rtt
		}
		if bw, _, ok := a.n.Bandwidth(p); ok {
			if st.PeerBandwidth == nil {
				st.PeerBandwidth = map[string]float64{}
			}
			st.PeerBandwidth[p] = bw
		}
	}
	if len(a.jobPolicies) > 0 {
		st.JobPolicies = maps.Clone(a.jobPolicies)
	}
	if id, target, ok := a.n.Outstanding(); ok {
		st.Steal = &job.IOSSteal{ID: id, Target: target}
	}
	ns := a.n.Stats()
	st.Stats = job.IOSStats{
		StealsSent: ns.StealsSent, StealsAccepted: ns.StealsAccepted, StealsFailed: ns.StealsFailed,
		StealsTimedOut: ns.StealsTimedOut, RequestsForwarded: ns.RequestsForwarded, RequestsFailed: ns.RequestsFailed,
		RanksGiven: ns.RanksGiven, RanksPushed: ns.RanksPushed, WideStealsSent: ns.WideStealsSent,
		StealRequestsInCluster: ns.StealRequestsInCluster, StealRequestsAcross: ns.StealRequestsAcross,
		ExchangesSent: ns.ExchangesSent, RanksSwapped: ns.RanksSwapped, RelaysOffered: ns.RelaysOffered, RanksRelayed: ns.RanksRelayed,
		RotationsDecided: ns.RotationsDecided, ExchangesRefused: ns.ExchangesRefused, ExchangesCancelled: ns.ExchangesCancelled,
		MigrationsOK: a.migOK, MigrationsFailed: a.migFailed,
		BadMessages: a.badMessages.Load(), BadProfiles: a.badProfiles.Load(),
	}
	st.Events = append(slices.Clone(a.key), a.minor...)
	slices.SortStableFunc(st.Events, func(x, y job.IOSEvent) int { return x.At.Compare(y.At) })

	table := a.ranks()
	budget := int(a.nc.MaxPayload()) - 64<<10
	a.pmu.Lock()
	for _, r := range table {
		e := a.profiles[rankKey{r.Job, r.Rank}]
		if e == nil {
			continue
		}
		if budget -= len(e.raw) + 8; budget < 0 || len(st.Profiles) >= job.MaxIOSProfiles {
			st.ProfilesOmitted++
			continue
		}
		st.Profiles = append(st.Profiles, e.raw)
	}
	a.pmu.Unlock()
	return st
}

// runsJob says whether the node runs a rank of job jobID.
func (a *Agent) runsJob(jobID string) bool {
	return slices.ContainsFunc(a.ranks(), func(r job.RankInfo) bool { return r.Job == jobID })
}
