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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/agentdriver"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/nodecpu"
	"github.com/mpios/mpios/internal/pieceserver"
	"github.com/mpios/mpios/internal/spawner"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Defaults for Config fields left zero.
const (
	DefaultHeartbeat = time.Second
	DefaultKillGrace = 3 * time.Second
	DefaultLease     = time.Minute
	DefaultAdvertise = "127.0.0.1"
)

// Config configures Serve. Zero values select the documented defaults.
type Config struct {
	Node string      // node name, a NATS subject token (job.ValidateNode)
	NATS NATSOptions // how to reach the control plane

	// PassEnv names variables of pcmd's environment that the ranks inherit besides
	// spawner.PassedEnv (pcmd serve --pass-env). MPIOS_* variables cannot be passed.
	PassEnv []string

	// Allow lists glob patterns (filepath.Match, '*' does not cross '/') of the absolute
	// program paths this node may run. Empty: the node refuses every spawn request.
	Allow []string
	// PinArgs fixes the arguments of some allowed programs: "PROGRAM_GLOB ARG_GLOB..."
	// (spawner.Config.PinArgs).
	PinArgs []string

	Slots     int           // ranks run at once; 0 = runtime.NumCPU()
	Advertise string        // MPIOS_BIND of the ranks: the address peers on other nodes reach them at; "" = DefaultAdvertise
	Store     string        // checkpoint store root, passed as MPIOS_CKPT_DIR; "" = the ranks' own default
	Heartbeat time.Duration // heartbeat period; 0 = DefaultHeartbeat
	KillGrace time.Duration // SIGTERM to SIGKILL delay when stopping ranks; 0 = DefaultKillGrace
	// Lease is the longest a job's ranks outlive the last keepalive of its launcher (which
	// died): a spawn request's lease is capped to it and one that names none gets it;
	// 0 = DefaultLease.
	Lease time.Duration
	// Leave, when it is closed, asks the node to leave gracefully (pcmd serve gets SIGTERM):
	// it drains (see Drain) and exits once its ranks are gone; a drain that cannot place
	// them says why and the node keeps serving. Cancelling Serve's context still stops the
	// node at once. nil: never.
	Leave <-chan struct{}
	// CkptStore is StoreDisk (default: the pieces under Store) or StoreMem (in memory, at
	// most CkptMemCap bytes, 0 = DefaultMemCap; lost when pcmd stops, kept by the buddy
	// copies when a node is lost).
	CkptStore  string
	CkptMemCap int64
	// CopyNice lowers the priority of receiving the buddy copies of other nodes' pieces by
	// this many nice levels (0 to 19; pieceserver.Config.CopyNice), so that the node's own
	// ranks get the CPU first. 0: pcmd's priority.
	CopyNice int

	Log *log.Logger // nil = stderr, prefixed with "pcmd[NODE] "

	// AuthorizedLaunchers is the file listing the launchers' NKey public keys that may start
	// and signal ranks here (pcmd serve --authorized-launchers; ctlauth.ParseAuthorizedKeys).
	// Without one, InsecureOpen must be set: anyone who can publish on the node's subjects
	// may then start allowed programs.
	AuthorizedLaunchers string
	InsecureOpen        bool
	// NodeKey is a file holding the node's NKey server seed (pcmd serve --node-key), which
	// signs its key card; launchers list its public key in their known-nodes file. "" = a
	// fresh key at every start, which no known-nodes file can name.
	NodeKey string
	// KnownNodes is the known-nodes file (pcmd serve --known-nodes, the format of mpirun's:
	// ctlauth.ParseKnownNodes) naming the only peers this node believes: their heartbeats
	// make them drain targets and IOS peers. "" = each peer's key is pinned on first use.
	KnownNodes string

	// IOS configures the node's IOS agent: resource profiling, random stealing, migration
	// decisions (pcmd serve --policy ...).
	IOS agentdriver.Config
}

// ErrNodeNameInUse reports that a live pcmd already serves the node name on the NATS server.
var ErrNodeNameInUse = errors.New("node name is in use")

// ErrConnectionClosed reports that Serve stopped because its NATS connection was closed
// for good (e.g. the credentials were revoked).
var ErrConnectionClosed = errors.New("pcmd: NATS connection closed")

func (c *Config) setDefaults() error {
	if err := job.ValidateNode(c.Node); err != nil {
		return fmt.Errorf("pcmd: %w", job.TrimPrefix(err))
	}
	if c.Slots == 0 {
		c.Slots = runtime.NumCPU()
	}
	if c.Advertise == "" {
		c.Advertise = DefaultAdvertise
	}
	if strings.ContainsAny(c.Advertise, " \t\n/") {
		return fmt.Errorf("pcmd: advertise address %q: want a host name or IP address", c.Advertise)
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
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.AuthorizedLaunchers == "" && !c.InsecureOpen {
		return spawner.ErrNoLauncherPolicy
	}
	if err := (spawner.Config{Slots: c.Slots, Allow: c.Allow, PinArgs: c.PinArgs, KillGrace: c.KillGrace, MaxLease: c.Lease, Open: true}).Validate(); err != nil {
		return err
	}
	for _, name := range c.PassEnv {
		if name == "" || strings.ContainsAny(name, "= \t\n\x00") || strings.HasPrefix(name, "MPIOS_") {
			return fmt.Errorf("pcmd: --pass-env %q: want the name of a variable, not MPIOS_*", name)
		}
	}
	if err := c.checkStoreConfig(); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = log.New(os.Stderr, "pcmd["+c.Node+"] ", log.LstdFlags)
	}
	if c.NATS.Name == "" {
		c.NATS.Name = "pcmd " + c.Node
	}
	return c.IOS.Validate()
}

// server is a running pcmd.
type server struct {
	cfg     Config
	log     *log.Logger
	nc      *nats.Conn
	store   string   // absolute store root, or ""
	baseEnv []string // the variables of pcmd's environment that the ranks inherit
	ranks   *spawner.Manager
	card    []byte              // the signed key card, in every NodeInfo
	signer  *ctlauth.KeyWrapper // the node's key: signs its heartbeats, info and control requests
	pins    *ctlauth.NodePins   // the peers' keys (--known-nodes, or the first each used)
	jobKeys *ctlauth.JobKeyring // the keys of the jobs this node started ranks of
	beats   *ctlauth.KeyVerifier
	drains  *ctlauth.KeyVerifier // drain requests: the node's own key only
	agent   *agentdriver.Agent   // nil when the IOS agent is disabled

	drained chan struct{} // closed when a drained node runs no rank any more

	mu       sync.Mutex
	peers    *peerTable
	seq      uint64
	draining bool                 // a drain was asked for (pcmd drain)
	drainWhy string               // the reason of the first drain request, for its retries
	retry    drainRetry           // when the drain is planned again (drain.go)
	forged   map[string]time.Time // when noteForged last logged, per kind
	left     map[string]string    // the key each peer that said it was leaving left under

	// watch keeps an outage of the node's own NATS connection from expiring the leases of
	// launchers it cannot hear.
	watch *ctlplane.Watch

	// evictor makes room in the memory store (--ckpt-store mem); nil for none.
	evictor *memEvictor
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
		peers:   newPeerTable(cfg.Node, os.Getpid()),
		drained: make(chan struct{}),
	}
	s.baseEnv = spawner.BaseEnv(os.Environ(), cfg.PassEnv)
	if cfg.Store != "" {
		// Opening creates the root (0700) and checks it is usable before any rank needs it.
		st, err := ckptstore.Open(cfg.Store, &ckptstore.Options{Node: cfg.Node})
		if err != nil {
			return fmt.Errorf("pcmd: --store: %w", err)
		}
		// The store's byte count may be off if a process crashed while changing it.
		if _, err := st.Recount(); err != nil {
			return fmt.Errorf("pcmd: --store: %w", err)
		}
		s.store = st.Dir()
	}
	if cfg.CkptStore == StoreMem {
		mem, err := openMemStore(cfg.Node)
		if err != nil {
			return err
		}
		defer mem.close()
		s.store = mem.dir
		st, err := ckptstore.Open(mem.dir, &ckptstore.Options{Node: cfg.Node})
		if err != nil {
			return fmt.Errorf("pcmd: --ckpt-store mem: %w", err)
		}
		s.evictor = &memEvictor{store: st, capacity: cfg.CkptMemCap, log: s.log, now: time.Now}
		defer s.evictor.wait() // before the store goes
		// The memory of pcmds killed on this machine is held until someone frees it.
		dirs, n, err := reclaimMemStores(memRoot, time.Now())
		if len(dirs) > 0 {
			s.log.Printf("reclaimed %d bytes of memory stores left by dead pcmds: %s", n, strings.Join(dirs, " "))
		}
		if err != nil {
			s.log.Printf("could not reclaim all memory stores left by dead pcmds: %v", err)
		}
	}

	var launchers *ctlauth.AuthorizedKeys
	if cfg.AuthorizedLaunchers != "" {
		var err error
		if launchers, err = ctlauth.LoadAuthorizedKeys(cfg.AuthorizedLaunchers); err != nil {
			return fmt.Errorf("pcmd: --authorized-launchers: %w", err)
		}
	}
	keys, err := nodeKeys(cfg.Node, cfg.NodeKey)
	if err != nil {
		return err
	}
	if s.card, err = signedCard(keys); err != nil {
		return err
	}
	// Numbered from the clock: a restarted pcmd with the same --node-key does not reuse
	// numbers the jobs have seen.
	if s.signer, err = ctlauth.NewKeyWrapper(keys.Signing, ctlauth.Sender{Role: ctlauth.RoleNode, Node: cfg.Node}, uint64(time.Now().UnixNano())); err != nil {
		return fmt.Errorf("pcmd: %w", err)
	}
	var known *ctlauth.KnownNodes
	if cfg.KnownNodes != "" {
		if known, err = ctlauth.LoadKnownNodes(cfg.KnownNodes); err != nil {
			return fmt.Errorf("pcmd: --known-nodes: %w", err)
		}
		if name, ok := known.Node(s.signer.PublicKey()); ok && name != cfg.Node {
			return fmt.Errorf("pcmd: --known-nodes: this node's key %s is listed for node %q, not %q", s.signer.PublicKey(), name, cfg.Node)
		}
	}
	s.pins, s.forged, s.left = ctlauth.NewNodePins(cfg.Node, known), map[string]time.Time{}, map[string]string{}
	if s.drains, err = ctlauth.NewKeyVerifier(ctlauth.NodeKey{Node: cfg.Node, Key: s.signer.PublicKey()}, ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)}); err != nil {
		return fmt.Errorf("pcmd: %w", err)
	}
	if s.beats, err = ctlauth.NewKeyVerifier(s.pins, ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)}); err != nil {
		return fmt.Errorf("pcmd: %w", err)
	}

	closed := make(chan struct{})
	var closeOnce sync.Once
	grace, err := ctlplane.GraceFromEnv(nil)
	if err != nil {
		return fmt.Errorf("pcmd: %w", err)
	}
	s.watch = &ctlplane.Watch{Grace: grace}
	nc, err := cfg.NATS.Connect(s.log, s.watch, func() { closeOnce.Do(func() { close(closed) }) })
	if err != nil {
		return err
	}
	defer nc.Close()
	s.nc = nc
	if err := s.checkUnique(); err != nil {
		return err
	}
	// One keyring per node: the spawner learns each job's key from its verified spawns, the
	// piece server verifies the job's requests with it.
	jobKeys, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: cfg.Node}, 0, time.Now())
	if err != nil {
		return err
	}
	if s.store != "" && cfg.CkptStore != StoreMem {
		// Beside the checkpoints they open: a restarted pcmd still serves its pieces.
		if err := jobKeys.Persist(filepath.Join(s.store, JobKeysDir)); err != nil {
			return fmt.Errorf("pcmd: --store: %w", err)
		}
	}
	s.jobKeys = jobKeys
	s.ranks, err = spawner.Start(nc, spawner.Config{
		Node: cfg.Node, Allow: cfg.Allow, PinArgs: cfg.PinArgs, Slots: cfg.Slots, KillGrace: cfg.KillGrace, MaxLease: cfg.Lease,
		Env: s.baseEnv, NodeEnv: s.nodeEnv, Log: s.log,
		Launchers: launchers, Open: cfg.InsecureOpen, Curve: keys.Curve, Keys: jobKeys, Signer: s.signer,
	})
	if err != nil {
		return err
	}
	var makeRoom func(int64) bool
	if s.evictor != nil {
		s.evictor.ranks, makeRoom = s.ranks.Ranks, s.evictor.makeRoom
	}
	if err := s.subscribe(); err != nil {
		s.ranks.Shutdown()
		return err
	}
	if !cfg.IOS.Disabled {
		// Before the first heartbeat: a node that hears of us can reach our agent at once.
		ios := cfg.IOS
		ios.Key, ios.Peers, ios.Jobs = s.signer, s.pins, jobKeys
		if ios.Slots == 0 {
			ios.Slots = cfg.Slots
		}
		if ios.FreeSlots == nil {
			ios.FreeSlots = s.freeSlots
		}
		if s.agent, err = agentdriver.Start(ios, cfg.Node, nc, s.log, s.ranks.Ranks, s.alivePeers); err != nil {
			s.ranks.Shutdown()
			return err
		}
	}

	// Ranks restarting elsewhere read this node's checkpoint pieces through it.
	// Its buddy copies are the bulk transfers between the nodes: the agent measures its
	// links' bandwidth with them.
	var transfer func(string, int64, time.Duration)
	if s.agent != nil {
		transfer = s.agent.ObserveTransfer
	}
	pieces, err := pieceserver.Start(nc, pieceserver.Config{Node: cfg.Node, Store: s.store, Advertise: cfg.Advertise, Logf: s.log.Printf,
		Cap: cfg.CkptMemCap, CopyNice: cfg.CopyNice, Keys: jobKeys, Transfer: transfer, MakeRoom: makeRoom})
	if err != nil {
		if s.agent != nil {
			s.agent.Stop()
		}
		s.ranks.Shutdown()
		return err
	}
	defer pieces.Stop()

	allow := "no --allow given: this node refuses to run any program"
	if len(cfg.Allow) > 0 {
		allow = "runs programs matching " + strings.Join(cfg.Allow, " ")
	}
	store := "no --store"
	if s.store != "" {
		store = "store " + s.store
	}
	if cfg.CkptStore == StoreMem {
		store = fmt.Sprintf("checkpoints in memory (%s, cap %d MiB)", s.store, cfg.CkptMemCap>>20)
	}
	s.log.Printf("node %s up: %d slots, advertise %s, %s, nats %s, pid %d, version %s",
		cfg.Node, cfg.Slots, cfg.Advertise, store, natsconn.RedactURL(nc.ConnectedUrl()), os.Getpid(), Version())
	s.log.Print(allow)
	for _, p := range cfg.PinArgs {
		s.log.Printf("pins the arguments of %s", p)
	}

	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	go s.heartbeatLoop(stopBeat, beatDone)

	var runErr error
	leave := cfg.Leave
	for running := true; running; {
		select {
		case <-ctx.Done():
			s.log.Printf("shutting down")
			running = false
		case <-closed:
			runErr = ErrConnectionClosed
			s.log.Printf("%v, stopping", runErr)
			running = false
		case <-s.drained:
			s.log.Printf("drained: no rank left, shutting down")
			running = false
		case <-leave:
			leave = nil
			// The jobs' answers take up to the control timeout: a second SIGTERM must be
			// heard meanwhile.
			go s.leave()
		}
	}
	if s.agent != nil {
		s.agent.Stop() // leave the peer network first: no migrations of ranks being stopped
	}
	s.ranks.Shutdown()
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
	// A pcmd answers with its signed description; anyone else can answer first, and what
	// does not verify is skipped.
	var other job.NodeInfo
	err := ctlplane.Request(s.nc, job.NodeInfoSubject(s.cfg.Node), nil, time.Second, func(msg *nats.Msg) error {
		info, err := ctlauth.VerifyNodeInfo(msg.Subject, msg.Data, ctlauth.AnyKey{})
		if err == nil && info.Name != s.cfg.Node {
			err = fmt.Errorf("it describes node %q", info.Name)
		}
		if err != nil {
			s.log.Printf("ignoring an answer on %s that is not a node's description: %v", job.NodeInfoSubject(s.cfg.Node), err)
			return err
		}
		other = info
		return nil
	})
	if err != nil {
		return nil // no responders, no answer, or none that verifies: the name is free
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
		{job.NodeInfoSubject(name), func(m *nats.Msg) { s.respondSigned(m, s.info()) }},
		{job.NodesDiscoverSubject, func(m *nats.Msg) { s.respondSigned(m, s.view()) }},
		{job.NodesHeartbeatSubject, s.onHeartbeat},
		{job.NodeDrainSubject(name), s.onDrain},
	}
	for _, sb := range subs {
		if _, err := s.nc.Subscribe(sb.subj, sb.fn); err != nil {
			return fmt.Errorf("pcmd: subscribe to %s: %w", sb.subj, err)
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

// respondSigned answers a request with v signed by the node's key for the requester's
// inbox (its info: launchers and peers act on what it says).
func (s *server) respondSigned(m *nats.Msg, v any) {
	if m.Reply == "" {
		return
	}
	data, err := s.sign(m.Reply, v)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.log.Printf("reply on %s: %v", m.Subject, err)
	}
}

// sign encodes v signed by the node's key for publication on subject.
func (s *server) sign(subject string, v any) ([]byte, error) {
	body, err := job.Encode(v)
	if err != nil {
		return nil, err
	}
	return s.signer.Wrap(subject, body, time.Now())
}

// publish publishes v on subject signed by the node's key (its heartbeats).
func (s *server) publish(subject string, v any) {
	data, err := s.sign(subject, v)
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
	seq, draining := s.seq, s.draining
	s.mu.Unlock()
	return job.NodeInfo{
		Name: s.cfg.Node, Slots: s.cfg.Slots, Used: s.ranks.Used(), Load: loadAvg(),
		Advertise: s.cfg.Advertise, PID: os.Getpid(), Version: Version(),
		Interval: s.cfg.Heartbeat, Seq: seq, Draining: draining, Ranks: s.ranks.Ranks(), Card: s.card,
	}
}

// freeSlots is the free slots of this node and of its alive peers, from their heartbeats:
// where the hierarchical manager may grow a job.
func (s *server) freeSlots() map[string]int {
	free := map[string]int{s.cfg.Node: max(0, s.cfg.Slots-s.ranks.Used())}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.peers.aliveInfos(time.Now()) {
		free[p.Name] = max(0, p.Slots-p.Used)
	}
	return free
}

// alivePeers names the peers whose heartbeats are current, sorted.
func (s *server) alivePeers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peers.alive(time.Now())
}

// view is the node's answer to discovery: itself and every peer it remembers.
func (s *server) view() job.NodeView {
	v := job.NodeView{Self: s.info()}
	s.mu.Lock()
	v.Peers = s.peers.view(time.Now())
	s.mu.Unlock()
	return v
}

// onHeartbeat takes a peer's heartbeat signed by the key pinned for its name (the first it
// used, or its key in --known-nodes): a forged one, saying a node is leaving or has free
// slots, is dropped.
func (s *server) onHeartbeat(m *nats.Msg) {
	msg, err := s.beats.Verify(m.Subject, m.Data, time.Now())
	if errors.Is(err, ctlauth.ErrUntrusted) && s.unpinLeft(m.Data) {
		msg, err = s.beats.Verify(m.Subject, m.Data, time.Now())
	}
	if err != nil {
		s.noteForged("heartbeat", err)
		return
	}
	pinned, _ := s.pins.Key(msg.From.Node)
	info, err := ctlauth.PinnedNodeInfo(msg, pinned)
	if err != nil {
		s.noteForged("heartbeat", err)
		return
	}
	if !s.pins.Pin(info.Name, msg.Key) {
		return // a concurrent first heartbeat with another key won
	}
	s.mu.Lock()
	twin := s.peers.heard(info, time.Now())
	switch {
	case info.Leaving && len(s.left) < maxLeft:
		s.left[info.Name] = msg.Key
	case !info.Leaving:
		// Back (a --node-key node keeps its key): its pinned key is its own again, which
		// no later heartbeat under another key may unpin.
		delete(s.left, info.Name)
	}
	s.mu.Unlock()
	if info.Leaving {
		s.pins.Unpin(info.Name) // its next pcmd may have a new key
	}
	if twin {
		s.log.Printf("warning: another pcmd (pid %d, advertise %s) also uses node name %s", info.PID, info.Advertise, info.Name)
	}
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
			s.ranks.CheckLeases(time.Now(), s.watch.Silence)
			s.checkDrained()
			s.retryDrain(time.Now())
			s.forgetPeers()
			s.evictor.check()
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
	gone := s.peers.forget(time.Now())
	s.mu.Unlock()
	for _, name := range gone {
		s.pins.Unpin(name)
	}
}

// maxLeft bounds the peers whose leaving key a node remembers (unpinLeft).
const maxLeft = 4096

// unpinLeft forgets the key pinned for the node whose heartbeat data claims to be from, if
// that node said it was leaving under that very key: a message its last pcmd sent before
// leaving (an IOS agent's steal request, handled on another goroutine than the heartbeats)
// may have pinned the old key again after the "leaving" heartbeat unpinned it, and would
// shut the node's next pcmd, with a fresh key, out for good. It reports whether it did.
func (s *server) unpinLeft(data []byte) bool {
	e, err := ctlauth.DecodeEnvelope(data)
	if err != nil || e.From.Role != ctlauth.RoleNode {
		return false
	}
	node := e.From.Node
	pinned, ok := s.pins.Key(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || s.left[node] != pinned {
		return false
	}
	delete(s.left, node)
	s.pins.Unpin(node)
	return true
}

// noteForged logs a message of the peer network that failed authentication, at most once a
// minute per kind: an attacker must not flood the log.
func (s *server) noteForged(what string, err error) {
	now := time.Now()
	s.mu.Lock()
	last := s.forged[what]
	if now.Sub(last) >= time.Minute {
		s.forged[what] = now
	}
	s.mu.Unlock()
	if now.Sub(last) >= time.Minute {
		s.log.Printf("ignoring a %s that does not verify (more are not logged for a minute): %v", what, err)
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

// JobKeysDir is the directory of a disk store (--store) that keeps the keys of the jobs the
// node learned (ctlauth.JobKeyring.Persist), private like the store.
const JobKeysDir = ".jobkeys"

// nodeEnv is what the node sets in the environment of the rank that req starts, overriding
// the request: the address the rank listens on, the node's name, its count of ranks here
// (same of its job, other of others) and, with --store, the checkpoint store. It uses
// only the configuration: the spawner may call it before Serve has all its parts.
func (s *server) nodeEnv(req job.SpawnRequest, same, other int) []string {
	env := []string{job.EnvBind + "=" + s.cfg.Advertise, job.EnvNode + "=" + s.cfg.Node, nodeRanksEnv(req, same, other)}
	if s.store != "" {
		env = append(env, job.EnvCkptDir+"="+s.store)
	}
	if s.cfg.CkptMemCap > 0 {
		env = append(env, job.EnvCkptCap+"="+strconv.FormatInt(s.cfg.CkptMemCap, 10))
	}
	return env
}
