package pcmd

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/launch"
	"github.com/mpios/mpios/internal/nodecpu"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Defaults for Config fields left zero.
const (
	DefaultHeartbeat = time.Second
	DefaultKillGrace = 3 * time.Second
	DefaultAdvertise = "127.0.0.1"
)

// forgetAfter is how long a silent peer stays in the node's view (as gone) before it is
// dropped, so pcmd status can still name recently lost nodes.
const forgetAfter = 15 * time.Minute

// Config configures Serve. Zero values select the documented defaults.
type Config struct {
	Node string      // node name, a NATS subject token (job.ValidateNode)
	NATS NATSOptions // how to reach the control plane

	// Allow lists glob patterns (filepath.Match, '*' does not cross '/') of the absolute
	// program paths this node may run. Empty: the node refuses every spawn request.
	Allow []string

	Slots     int           // ranks run at once; 0 = runtime.NumCPU()
	Advertise string        // MPIOS_BIND of the ranks: the address peers on other nodes reach them at; "" = DefaultAdvertise
	Store     string        // checkpoint store root, passed as MPIOS_CKPT_DIR; "" = the ranks' own default
	Heartbeat time.Duration // heartbeat period; 0 = DefaultHeartbeat
	KillGrace time.Duration // SIGTERM to SIGKILL delay when stopping ranks; 0 = DefaultKillGrace
	Log       *log.Logger   // nil = stderr, prefixed with "pcmd[NODE] "

	// IOS configures the node's IOS agent: resource profiling, random stealing, migration
	// decisions (pcmd serve --policy ...).
	IOS IOSConfig
}

// ErrNodeNameInUse reports that a live pcmd already serves the node name on the NATS server.
var ErrNodeNameInUse = errors.New("node name is in use")

// ErrConnectionClosed reports that Serve stopped because its NATS connection was closed
// for good (e.g. the credentials were revoked).
var ErrConnectionClosed = errors.New("pcmd: NATS connection closed")

func (c *Config) setDefaults() error {
	if err := job.ValidateNode(c.Node); err != nil {
		return fmt.Errorf("pcmd: %w", trimJob(err))
	}
	if c.Slots == 0 {
		c.Slots = runtime.NumCPU()
	}
	if c.Slots < 1 || c.Slots > job.MaxSlots {
		return fmt.Errorf("pcmd: %d slots: want 1 to %d", c.Slots, job.MaxSlots)
	}
	if c.Advertise == "" {
		c.Advertise = DefaultAdvertise
	}
	if strings.ContainsAny(c.Advertise, " \t\n/") {
		return fmt.Errorf("pcmd: advertise address %q: want a host name or IP address", c.Advertise)
	}
	for _, p := range c.Allow {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("pcmd: --allow %q: want a pattern of absolute paths", p)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("pcmd: --allow %q: %w", p, err)
		}
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Heartbeat < job.MinInterval || c.Heartbeat > job.MaxInterval {
		return fmt.Errorf("pcmd: heartbeat %v: want %v to %v", c.Heartbeat, job.MinInterval, job.MaxInterval)
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.KillGrace < 0 {
		return errors.New("pcmd: kill grace must not be negative")
	}
	if c.Log == nil {
		c.Log = log.New(os.Stderr, "pcmd["+c.Node+"] ", log.LstdFlags)
	}
	if c.NATS.Name == "" {
		c.NATS.Name = "pcmd " + c.Node
	}
	return c.IOS.setDefaults()
}

// server is a running pcmd.
type server struct {
	cfg     Config
	log     *log.Logger
	nc      *nats.Conn
	store   string   // absolute store root, or ""
	baseEnv []string // pcmd's environment without MPIOS_* variables
	spawnc  chan spawnOp
	spawnSb *nats.Subscription
	agent   *agent // nil when IOSConfig.Disabled

	mu       sync.Mutex
	ranks    map[rankKey]*rank
	leases   map[string]*lease
	peers    map[string]*peer
	stopping bool
	seq      uint64
	twins    map[int]bool // pids of other pcmds beating with our name, already reported
	wg       sync.WaitGroup
}

type peer struct {
	info job.NodeInfo
	last time.Time
}

// Serve runs the node daemon until ctx is cancelled, then stops its ranks (SIGTERM, SIGKILL
// after KillGrace), deregisters the node and returns nil. It returns an error if it cannot
// start (bad Config, NATS unreachable, ErrNodeNameInUse) or loses NATS for good
// (ErrConnectionClosed).
func Serve(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	s := &server{
		cfg: cfg, log: cfg.Log,
		spawnc: make(chan spawnOp),
		ranks:  make(map[rankKey]*rank),
		leases: make(map[string]*lease),
		peers:  make(map[string]*peer),
		twins:  make(map[int]bool),
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MPIOS_") {
			s.baseEnv = append(s.baseEnv, kv)
		}
	}
	if cfg.Store != "" {
		// Opening creates the root (0700) and checks it is usable before any rank needs it.
		st, err := ckptstore.Open(cfg.Store, &ckptstore.Options{Node: cfg.Node})
		if err != nil {
			return fmt.Errorf("pcmd: --store: %w", err)
		}
		s.store = st.Dir()
	}

	closed := make(chan struct{})
	var closeOnce sync.Once
	nc, err := cfg.NATS.Connect(s.log, func() { closeOnce.Do(func() { close(closed) }) })
	if err != nil {
		return err
	}
	defer nc.Close()
	s.nc = nc
	if err := s.checkUnique(); err != nil {
		return err
	}
	go s.spawner()
	if err := s.subscribe(); err != nil {
		close(s.spawnc)
		return err
	}
	if !cfg.IOS.Disabled {
		// Before the first heartbeat: a node that hears of us can reach our agent at once.
		if s.agent, err = startAgent(cfg.IOS, cfg.Node, nc, s.log, s.rankTable, s.alivePeers); err != nil {
			close(s.spawnc)
			return err
		}
	}

	// Ranks restarting elsewhere read this node's checkpoint pieces through it.
	stopPieces, err := startPieceServer(nc, cfg.Node, s.store, cfg.Advertise, s.log.Printf)
	if err != nil {
		close(s.spawnc)
		return err
	}
	defer stopPieces()

	allow := "no --allow given: this node refuses to run any program"
	if len(cfg.Allow) > 0 {
		allow = "runs programs matching " + strings.Join(cfg.Allow, " ")
	}
	store := "no --store"
	if s.store != "" {
		store = "store " + s.store
	}
	s.log.Printf("node %s up: %d slots, advertise %s, %s, nats %s, pid %d, version %s",
		cfg.Node, cfg.Slots, cfg.Advertise, store, launch.RedactURL(nc.ConnectedUrl()), os.Getpid(), Version())
	s.log.Print(allow)

	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	go s.heartbeatLoop(stopBeat, beatDone)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Printf("shutting down")
	case <-closed:
		runErr = ErrConnectionClosed
		s.log.Printf("%v, stopping", runErr)
	}
	if s.agent != nil {
		s.agent.stop() // leave the peer network first: no migrations of ranks being stopped
	}
	s.shutdown()
	close(stopBeat)
	<-beatDone
	// Deregister: observers drop the node at once instead of waiting for missed beats.
	info := s.info()
	info.Leaving = true
	s.publish(job.NodesHeartbeatSubject, info)
	_ = nc.FlushTimeout(2 * time.Second)
	// Drain unsubscribes first, so requests to this node get "no responders" at once
	// rather than waiting for the server to notice the closed connection.
	if err := nc.Drain(); err == nil {
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
		}
	}
	s.log.Printf("node %s down", cfg.Node)
	return runErr
}

// checkUnique fails if a live pcmd already answers for our node name: two daemons would
// both execute every spawn request.
func (s *server) checkUnique() error {
	msg, err := s.nc.Request(job.NodeInfoSubject(s.cfg.Node), nil, time.Second)
	if err != nil {
		return nil // no responders (or no answer): the name is free
	}
	var other job.NodeInfo
	if job.Decode(msg.Data, &other) != nil {
		return fmt.Errorf("pcmd: node %s: something already answers on %s: %w",
			s.cfg.Node, job.NodeInfoSubject(s.cfg.Node), ErrNodeNameInUse)
	}
	return fmt.Errorf("pcmd: node %s is already served by pcmd pid %d (advertise %s): %w",
		s.cfg.Node, other.PID, other.Advertise, ErrNodeNameInUse)
}

func (s *server) subscribe() error {
	name := s.cfg.Node
	subs := []struct {
		subj string
		fn   nats.MsgHandler
	}{
		{job.NodeInfoSubject(name), func(m *nats.Msg) { s.respond(m, s.info()) }},
		{job.NodesDiscoverSubject, func(m *nats.Msg) { s.respond(m, s.view()) }},
		{job.NodesHeartbeatSubject, s.onHeartbeat},
		{job.NodeSpawnSubject(name), s.onSpawn},
		{job.NodeSignalSubject(name), s.onSignal},
	}
	for _, sb := range subs {
		sub, err := s.nc.Subscribe(sb.subj, sb.fn)
		if err != nil {
			return fmt.Errorf("pcmd: subscribe to %s: %w", sb.subj, err)
		}
		if sb.subj == job.NodeSpawnSubject(name) {
			s.spawnSb = sub
		}
	}
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("pcmd: NATS flush: %w", err)
	}
	return nil
}

// respond answers a request; requests without a reply subject are ignored.
func (s *server) respond(m *nats.Msg, v any) {
	if m.Reply == "" {
		return
	}
	data, err := job.Encode(v)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.log.Printf("reply on %s: %v", m.Subject, err)
	}
}

func (s *server) publish(subject string, v any) {
	data, err := job.Encode(v)
	if err == nil {
		err = s.nc.Publish(subject, data)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Printf("publish on %s: %v", subject, err)
	}
}

// info describes the node now.
func (s *server) info() job.NodeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return job.NodeInfo{
		Name: s.cfg.Node, Slots: s.cfg.Slots, Used: len(s.ranks), Load: loadAvg(),
		Advertise: s.cfg.Advertise, PID: os.Getpid(), Version: Version(),
		Interval: s.cfg.Heartbeat, Seq: s.seq, Ranks: s.rankTableLocked(),
	}
}

// rankTable lists the started ranks, sorted by job and rank.
func (s *server) rankTable() []job.RankInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rankTableLocked()
}

func (s *server) rankTableLocked() []job.RankInfo {
	var out []job.RankInfo
	for _, r := range s.ranks {
		if r.proc != nil {
			out = append(out, job.RankInfo{Job: r.key.job, Rank: r.key.rank, PID: r.pid, Started: r.started, Successor: r.successor})
		}
	}
	slices.SortFunc(out, func(a, b job.RankInfo) int {
		if c := strings.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		return a.Rank - b.Rank
	})
	return out
}

// alivePeers names the peers whose heartbeats are current, sorted.
func (s *server) alivePeers() []string {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, p := range s.peers {
		if now.Sub(p.last) <= p.info.GoneAfter() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// view is the node's answer to discovery: itself and every peer it remembers.
func (s *server) view() job.NodeView {
	v := job.NodeView{Self: s.info()}
	now := time.Now()
	s.mu.Lock()
	for _, p := range s.peers {
		v.Peers = append(v.Peers, job.PeerInfo{Info: p.info, Age: now.Sub(p.last)})
	}
	s.mu.Unlock()
	return v
}

func (s *server) onHeartbeat(m *nats.Msg) {
	var info job.NodeInfo
	if err := job.Decode(m.Data, &info); err != nil {
		s.log.Printf("ignoring a malformed heartbeat: %v", trimJob(err))
		return
	}
	if err := info.Validate(); err != nil {
		s.log.Printf("ignoring an invalid heartbeat: %v", trimJob(err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if info.Name == s.cfg.Node {
		if info.PID != os.Getpid() && !s.twins[info.PID] {
			s.twins[info.PID] = true
			s.log.Printf("warning: another pcmd (pid %d, advertise %s) also uses node name %s", info.PID, info.Advertise, info.Name)
		}
		return
	}
	if info.Leaving {
		delete(s.peers, info.Name)
		return
	}
	s.peers[info.Name] = &peer{info: info, last: time.Now()}
}

func (s *server) heartbeatLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	s.beat()
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.beat()
			s.checkLeases()
			s.forgetPeers()
		}
	}
}

func (s *server) beat() {
	s.mu.Lock()
	s.seq++
	s.mu.Unlock()
	s.publish(job.NodesHeartbeatSubject, s.info())
}

func (s *server) forgetPeers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, p := range s.peers {
		if time.Since(p.last) > forgetAfter {
			delete(s.peers, name)
		}
	}
}

// shutdown stops accepting spawns and stops every rank: SIGTERM, then SIGKILL after the
// grace period. Each rank's exit is still published.
func (s *server) shutdown() {
	if s.spawnSb != nil {
		_ = s.spawnSb.Unsubscribe()
	}
	s.mu.Lock()
	s.stopping = true
	victims := s.running(func(r *rank) bool { return true }, "pcmd on node "+s.cfg.Node+" is shutting down")
	s.mu.Unlock()
	if len(victims) > 0 {
		s.log.Printf("stopping %d ranks", len(victims))
	}
	s.signalAll(victims, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.KillGrace):
		s.mu.Lock()
		victims = s.running(func(r *rank) bool { return true }, "")
		s.mu.Unlock()
		s.log.Printf("%d ranks did not stop within %v of SIGTERM, killing them", len(victims), s.cfg.KillGrace)
		s.signalAll(victims, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			// Never close spawnc under a spawn that may still send on it; the ranks die
			// with us anyway (Pdeathsig).
			s.log.Printf("some ranks did not exit after SIGKILL")
			return
		}
	}
	close(s.spawnc)
}

// running returns the started ranks that keep returns true for, recording reason (if not
// "") as why pcmd stops them. s.mu must be held.
func (s *server) running(keep func(*rank) bool, reason string) []*rank {
	var out []*rank
	for _, r := range s.ranks {
		if r.proc != nil && keep(r) {
			if reason != "" && r.reason == "" {
				r.reason = reason
			}
			out = append(out, r)
		}
	}
	return out
}

func (s *server) signalAll(ranks []*rank, sig syscall.Signal) {
	for _, r := range ranks {
		if err := r.proc.Signal(sig); err != nil {
			s.log.Printf("job %s rank %d: %v", r.key.job, r.key.rank, err)
		}
	}
}

// loadAvg reads the 1, 5 and 15 minute load averages; zeros where /proc/loadavg is missing.
func loadAvg() [3]float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return [3]float64{}
	}
	l, err := nodecpu.ParseLoadavg(string(b))
	if err != nil {
		return [3]float64{}
	}
	return [3]float64{l.Load1, l.Load5, l.Load15}
}

// Version is pcmd's version: the module version, or the VCS revision of a development build.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "devel"
	}
	return "devel-" + rev + dirty
}

// trimJob drops the "job: " prefix of internal/job errors for pcmd's messages.
func trimJob(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "job: "); ok {
		return errors.New(s)
	}
	return err
}
