// Package nodeclient is mpirun's client of the pcmd node agents: it parses --hosts and
// --hostfile, discovers the nodes on the control plane, places a job's ranks on them, and is
// the rankproc.NodeStarter that spawns ranks there, relays their output and exit status, and
// watches the nodes' heartbeats.
package nodeclient

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/rankproc"
)

// HostSlots is one entry of mpirun's --hosts or --hostfile: a pcmd node and how many ranks
// to place on it.
type HostSlots struct {
	Node  string
	Slots int // 0 = all the node's free slots
}

// String returns "node:slots", or "node" when Slots is 0.
func (h HostSlots) String() string {
	if h.Slots == 0 {
		return h.Node
	}
	return h.Node + ":" + strconv.Itoa(h.Slots)
}

// ParseHosts parses a comma-separated list of NODE[:SLOTS], as given to --hosts. A node
// named twice is an error (its slots would be ambiguous).
func ParseHosts(s string) ([]HostSlots, error) {
	var hosts []HostSlots
	for _, f := range strings.Split(s, ",") {
		h, err := parseHost(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, checkHosts(hosts)
}

// ParseHostfile reads one NODE[:SLOTS] per line; blank lines and everything from a '#' on
// are ignored. Errors name the line.
func ParseHostfile(r io.Reader) ([]HostSlots, error) {
	var hosts []HostSlots
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		h, err := parseHost(line)
		if err != nil {
			return nil, fmt.Errorf("nodeclient: line %d: %s", n, strings.TrimPrefix(err.Error(), "nodeclient: "))
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("nodeclient: hostfile: %w", err)
	}
	if len(hosts) == 0 {
		return nil, errors.New("nodeclient: hostfile names no node")
	}
	return hosts, checkHosts(hosts)
}

func parseHost(s string) (HostSlots, error) {
	name, slots, hasSlots := strings.Cut(s, ":")
	if err := job.ValidateNode(name); err != nil {
		return HostSlots{}, fmt.Errorf("nodeclient: host %q: %w", s, job.TrimPrefix(err))
	}
	h := HostSlots{Node: name}
	if hasSlots {
		n, err := strconv.Atoi(slots)
		if err != nil || n < 1 || n > job.MaxSlots {
			return HostSlots{}, fmt.Errorf("nodeclient: host %q: slots %q: want an integer in [1,%d]", s, slots, job.MaxSlots)
		}
		h.Slots = n
	}
	return h, nil
}

func checkHosts(hosts []HostSlots) error {
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if seen[h.Node] {
			return fmt.Errorf("nodeclient: host %s is named twice", h.Node)
		}
		seen[h.Node] = true
	}
	return nil
}

// Errors of NewRemote, wrapped with details; test with errors.Is.
var (
	ErrUnknownNode    = errors.New("unknown node")
	ErrNodeGone       = rankproc.ErrHostGone
	ErrNodeClosed     = rankproc.ErrHostClosed // a spawn refused: the node drains or shuts down
	ErrNotEnoughSlots = errors.New("not enough slots")
)

// NodeGoneError is the error Wait returns for a remote rank whose node stopped responding,
// restarted or shut down: the rank's fate is unknown, and it is presumed dead (pcmd's ranks
// die with it).
type NodeGoneError struct {
	Node   string
	Reason string // e.g. "node n1 stopped responding (no heartbeat for 3s)"
}

// Error returns the reason, prefixed with "nodeclient: ".
func (e *NodeGoneError) Error() string { return "nodeclient: " + e.Reason }

// Is makes errors.Is(err, ErrNodeGone) true.
func (e *NodeGoneError) Is(target error) bool { return target == ErrNodeGone }

// SpawnError reports that a node refused to start a rank or could not.
type SpawnError struct {
	Node    string
	Rank    int
	Refusal job.SpawnRefusal // "" if the node did not answer
	Reason  string
	// Gone says the node is gone (declared so before, or nobody listens for it any more):
	// the rank's program is not at fault.
	Gone bool
}

// Is makes errors.Is(err, ErrNodeGone) true when the node is gone, and errors.Is(err,
// ErrNodeClosed) when it refused because it takes no new ranks (job.RefuseStopping).
func (e *SpawnError) Is(target error) bool {
	return e.Gone && target == ErrNodeGone || e.Refusal == job.RefuseStopping && target == ErrNodeClosed
}

// Error returns the reason (the node's own message for a refusal), prefixed with "nodeclient: ".
func (e *SpawnError) Error() string { return "nodeclient: " + e.Reason }

// RemoteConfig configures NewRemote.
type RemoteConfig struct {
	NATSURL string      // the NATS server the pcmd nodes are registered on (credentials may be embedded)
	Hosts   []HostSlots // where ranks may go, in placement order
	NP      int         // ranks to place; 0 = as many as Hosts offers

	// Logf receives the starter's own messages (lost nodes, lost output), without trailing
	// newline; nil writes them to stderr prefixed with "mpirun: ".
	Logf func(format string, args ...any)

	RequestTimeout time.Duration // for each request to a node; 0 = 5s
	DiscoverWait   time.Duration // how long to collect node replies when a node is missing; 0 = 500ms
	// KeepAlive is the lease given to the nodes: they stop the job's ranks when mpirun has
	// been silent for that long (it died). 0 = 10s.
	KeepAlive time.Duration

	// NATSAuth authenticates to NATSURL (credentials, TLS); its URL and Name are not used.
	NATSAuth natsconn.Options

	// Launcher, if not nil, is the launcher's NKey user key pair (mpirun --launcher-key):
	// spawn and signal requests are signed with it, for nodes that list it in their
	// authorized launchers. Nil: requests go unsigned, which only open nodes take.
	Launcher nkeys.KeyPair
	// KnownNodes, if not nil, are the only nodes ranks may go to, initially or by migration
	// or resize: a node must present a key card signed by its key there (ErrUntrustedNode).
	// Nil: each node's own card is believed (its secrets are still sealed for it).
	KnownNodes *ctlauth.KnownNodes
}

// Remote is a Starter that runs ranks on pcmd nodes over NATS. Ranks are placed round-robin
// over RemoteConfig.Hosts, each node taking at most its slots. The program path is passed
// as is: on a cluster the executable must exist at the same path on every node (shared file
// system, or installed there), and it must match the nodes' --allow patterns.
//
// A Remote watches the heartbeats of its nodes; when one stops beating (job.MissedBeats
// intervals), restarts or shuts down, the Wait of each of its ranks returns a
// *NodeGoneError. Nodes also join the job (join.go); Events tells both. Close it once the
// job is over.
type Remote struct {
	cfg   RemoteConfig
	nc    *nats.Conn
	place []string // node of each rank
	slots map[string]int

	mu    sync.Mutex
	nodes map[string]*remoteNode
	jobs  map[string]bool // job ids to send keepalives for
	auth  map[string]*jobAuth
	beats *ctlauth.KeyVerifier // the nodes' heartbeats
	// placed: the hosts were asked and the ranks placed; heartbeats count from then on.
	placed bool
	quit   chan struct{}
	// events: nodes gone and joined, in order (see Events)
	events  chan NodeEvent
	started time.Time // heartbeats of unknown nodes begun later are of pcmds started after the job
	// bystanders are the nodes (and their pcmd's pid) that were there before the job and
	// are not its; refused, the pcmds whose join was refused (their key card).
	bystanders map[string]int
	refused    map[string]int
	// watch keeps an outage of r's own connection from counting as the nodes' silence.
	watch ctlplane.Watch
	wg    sync.WaitGroup
	close sync.Once
}

type remoteNode struct {
	name     string
	pid      int // pcmd's pid when placement was decided; another means it restarted
	interval time.Duration
	last     time.Time
	card     *ctlauth.NodeCard // its verified key card; nil: an older pcmd, secrets go in clear
	gone     *NodeGoneError
	draining bool // it takes no new ranks (its heartbeats say so, or it refused a spawn)
	joined   bool // it joined after the start: watched even while it runs no rank
	procs    map[*remoteProcess]bool
}

// NewRemote connects to NATS, asks every node in cfg.Hosts for its state and places the
// ranks. It fails, wrapping ErrUnknownNode, ErrNodeGone or ErrNotEnoughSlots, if a node does
// not answer or has too few free slots.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("nodeclient: remote starter: no hosts")
	}
	if err := checkHosts(cfg.Hosts); err != nil {
		return nil, err
	}
	if cfg.NP < 0 {
		return nil, fmt.Errorf("nodeclient: number of ranks is %d", cfg.NP)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "mpirun: "+format+"\n", args...)
		}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.DiscoverWait <= 0 {
		cfg.DiscoverWait = 500 * time.Millisecond
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	r := &Remote{cfg: cfg, nodes: make(map[string]*remoteNode), jobs: make(map[string]bool), auth: make(map[string]*jobAuth),
		quit: make(chan struct{}), events: make(chan NodeEvent, eventBacklog), started: time.Now(),
		bystanders: make(map[string]int), refused: make(map[string]int)}
	grace, err := ctlplane.GraceFromEnv(nil)
	if err != nil {
		return nil, err
	}
	r.watch.Grace = grace
	auth, err := cfg.NATSAuth.AuthOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.NATSURL, append(append(auth, ctlplane.Options(&r.watch, nil)...),
		nats.Name("mpirun remote starter"),
		nats.Timeout(5*time.Second),
		nats.NoCallbacksAfterClientClose(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("nodeclient: connect to NATS at %s: %w", natsconn.RedactURL(cfg.NATSURL), err)
	}
	r.nc = nc
	// Heartbeats count only signed (onHeartbeat checks whose key).
	if r.beats, err = ctlauth.NewKeyVerifier(ctlauth.AnyKey{}, ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nodeclient: %w", err)
	}
	if err := r.setup(); err != nil {
		nc.Close()
		return nil, err
	}
	r.wg.Add(2)
	go r.monitor()
	go r.keepAlive()
	return r, nil
}

func (r *Remote) setup() error {
	// Subscribe before asking, so no heartbeat after a node's answer is missed.
	if _, err := r.nc.Subscribe(job.NodesHeartbeatSubject, r.onHeartbeat); err != nil {
		return fmt.Errorf("nodeclient: subscribe to %s: %w", job.NodesHeartbeatSubject, err)
	}
	caps := make([]int, len(r.cfg.Hosts))
	names := make([]string, len(r.cfg.Hosts))
	for i, h := range r.cfg.Hosts {
		info, err := r.nodeInfo(h.Node)
		if err != nil {
			return err
		}
		free := max(info.Slots-info.Used, 0)
		switch {
		case h.Slots == 0 && free == 0:
			return fmt.Errorf("nodeclient: node %s has no free slot (%d in use): %w", h.Node, info.Used, ErrNotEnoughSlots)
		case h.Slots > free:
			return fmt.Errorf("nodeclient: node %s has %d free slots (%d total, %d in use), --hosts asks for %d: %w",
				h.Node, free, info.Slots, info.Used, h.Slots, ErrNotEnoughSlots)
		case h.Slots == 0:
			caps[i] = free
		default:
			caps[i] = h.Slots
		}
		names[i] = h.Node
		r.mu.Lock()
		card, err := r.nodeCard(info)
		if err != nil {
			return err
		}
		r.nodes[h.Node] = &remoteNode{name: h.Node, pid: info.PID, interval: info.Interval, card: card,
			last: time.Now(), procs: make(map[*remoteProcess]bool)}
		r.mu.Unlock()
	}
	place, err := Place(names, caps, r.cfg.NP)
	if err != nil {
		return err
	}
	r.place = place
	r.slots = make(map[string]int, len(names))
	for i, n := range names {
		r.slots[n] += caps[i]
	}
	r.mu.Lock()
	r.placed = true
	r.mu.Unlock()
	return nil
}

// nodeInfo asks a node for its NodeInfo; if it does not answer, the other nodes are asked
// whether they know it, to tell an unknown node from a gone one.
func (r *Remote) nodeInfo(node string) (job.NodeInfo, error) {
	var info job.NodeInfo
	var keys ctlauth.KeySet = ctlauth.AnyKey{}
	if r.cfg.KnownNodes != nil {
		keys = r.cfg.KnownNodes
	}
	// Signed by the key its own card names (and the known-nodes file lists): a forged
	// answer must not place ranks on a node, nor pin another key for it. Anyone can answer
	// first: answers that do not verify are skipped while the wait lasts, and are the error
	// only if none does.
	var refused error
	err := ctlplane.Request(r.nc, job.NodeInfoSubject(node), nil, r.cfg.RequestTimeout, func(msg *nats.Msg) error {
		got, err := ctlauth.VerifyNodeInfo(msg.Subject, msg.Data, keys)
		if err == nil && got.Name != node {
			err = fmt.Errorf("it describes node %q", got.Name)
		}
		if err != nil {
			if refused == nil || errors.Is(err, ctlauth.ErrUntrusted) {
				refused = err
			}
			return err
		}
		info = got
		return nil
	})
	switch {
	case err == nil:
		return info, nil
	case refused != nil && errors.Is(refused, ctlauth.ErrUntrusted) && r.cfg.KnownNodes != nil:
		return info, fmt.Errorf("nodeclient: node %s: its description is not signed by its key in the known-nodes file: %w", node, ErrUntrustedNode)
	case refused != nil:
		return info, fmt.Errorf("nodeclient: node %s answered with an invalid node description: %v", node, refused)
	}
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
		return info, fmt.Errorf("nodeclient: ask node %s: %w", node, err)
	}
	views, _ := DiscoverNodes(r.nc, r.cfg.DiscoverWait, keys)
	var known []string
	var age time.Duration = -1
	for _, v := range views {
		known = append(known, v.Self.Name)
		for _, p := range v.Peers {
			if p.Info.Name == node && (age < 0 || p.Age < age) {
				age = p.Age
			}
		}
	}
	if age >= 0 {
		return info, fmt.Errorf("nodeclient: node %s does not answer, its last heartbeat was %v ago: %w",
			node, age.Round(100*time.Millisecond), ErrNodeGone)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return info, fmt.Errorf("nodeclient: node %s: no pcmd serves it on NATS server %s (nodes answering: %s): %w",
		node, natsconn.RedactURL(r.cfg.NATSURL), list, ErrUnknownNode)
}

// Place assigns np ranks round-robin to nodes, node i taking at most caps[i]; np 0 takes
// every slot. It returns the node of each rank.
func Place(nodes []string, caps []int, np int) ([]string, error) {
	if len(nodes) != len(caps) {
		return nil, errors.New("nodeclient: place: nodes and capacities differ in length")
	}
	total := 0
	for _, c := range caps {
		total += c
	}
	if np == 0 {
		np = total
	}
	if np > total || np == 0 {
		return nil, fmt.Errorf("nodeclient: %d ranks requested, the hosts offer %d slots: %w", np, total, ErrNotEnoughSlots)
	}
	out := make([]string, 0, np)
	used := make([]int, len(nodes))
	for len(out) < np {
		for i := range nodes {
			if used[i] < caps[i] && len(out) < np {
				out = append(out, nodes[i])
				used[i]++
			}
		}
	}
	return out, nil
}

// NP returns the number of ranks placed.
func (r *Remote) NP() int { return len(r.place) }

// Slots returns how many ranks the job may run on each of its nodes (--hosts NODE:SLOTS, or
// the free slots a node had at placement): where a recovered job's ranks may restart.
func (r *Remote) Slots() map[string]int { return maps.Clone(r.slots) }

// Placement returns the node of each rank.
func (r *Remote) Placement() []string { return slices.Clone(r.place) }

// Start implements Starter: it asks the rank's node to spawn it.
func (r *Remote) Start(spec rankproc.Spec) (rankproc.Process, error) {
	if spec.Rank < 0 || spec.Rank >= len(r.place) {
		return nil, fmt.Errorf("nodeclient: start rank %d: only %d ranks were placed", spec.Rank, len(r.place))
	}
	return r.start(r.place[spec.Rank], spec)
}

// CheckNode implements NodeStarter. Nodes that were not among the hosts are learned here
// and watched from then on.
func (r *Remote) CheckNode(name string, leaving int) error {
	if err := job.ValidateNode(name); err != nil {
		return fmt.Errorf("nodeclient: %w", job.TrimPrefix(err))
	}
	r.mu.Lock()
	node := r.nodes[name]
	r.mu.Unlock()
	if node != nil && node.gone != nil {
		return node.gone
	}
	info, err := r.nodeInfo(name)
	if err != nil && node != nil && errors.Is(err, ErrUnknownNode) && r.provenGone(name) {
		// A node this job used that nobody answers for any more is gone, not unknown.
		r.nodeGone(name, fmt.Sprintf("node %s stopped responding (no pcmd listens on %s)", name, job.NodeInfoSubject(name)))
		r.mu.Lock()
		gone := node.gone
		r.mu.Unlock()
		return gone
	}
	if err != nil {
		return err
	}
	if info.Slots-info.Used+max(leaving, 0) <= 0 {
		return fmt.Errorf("nodeclient: node %s has no free slot (%d of %d in use): %w", name, info.Used, info.Slots, ErrNotEnoughSlots)
	}
	card, err := r.nodeCard(info)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodes[name] == nil {
		r.nodes[name] = &remoteNode{name: name, pid: info.PID, interval: info.Interval, card: card, last: time.Now(), procs: make(map[*remoteProcess]bool)}
	}
	return nil
}

// StartOn implements NodeStarter.
func (r *Remote) StartOn(node string, spec rankproc.Spec) (rankproc.Process, error) {
	if err := r.CheckNode(node, len(spec.Replaces)); err != nil {
		return nil, err
	}
	return r.start(node, spec)
}

func (r *Remote) start(name string, spec rankproc.Spec) (rankproc.Process, error) {
	if spec.Output == nil {
		return nil, fmt.Errorf("nodeclient: start rank %d: Spec.Output is nil", spec.Rank)
	}
	env := mpiosEnv(spec.Env)
	jobID := rankproc.EnvValue(env, job.EnvJobID)
	if err := job.ValidateID(jobID); err != nil {
		return nil, fmt.Errorf("nodeclient: start rank %d: environment has no valid %s", spec.Rank, job.EnvJobID)
	}
	dir := spec.Dir
	if dir == "" {
		// The rank runs where mpirun runs, as local ranks do; pcmd refuses if that
		// directory does not exist on its node.
		if wd, err := os.Getwd(); err == nil {
			dir = wd
		}
	}
	p := &remoteProcess{r: r, node: name, rank: spec.Rank, job: jobID, output: spec.Output, done: make(chan struct{})}

	r.mu.Lock()
	node := r.nodes[name]
	if node.gone != nil {
		r.mu.Unlock()
		return nil, &SpawnError{Node: name, Rank: spec.Rank, Reason: node.gone.Reason, Gone: true}
	}
	auth, err := r.jobAuthLocked(jobID, env)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	card := node.card
	node.procs[p] = true
	p.auth, p.keyed = auth, card != nil
	if !r.jobs[jobID] {
		r.jobs[jobID] = true
		r.publishKeepAlive(jobID) // the lease starts at spawn time anyway
	}
	r.mu.Unlock()

	fail := func(err error) (rankproc.Process, error) {
		p.finish(rankproc.Exit{Code: -1}, err)
		return nil, err
	}
	// One subscription for output and exit keeps them in publication order. Later
	// incarnations of a rank (after migrations) get subjects of their own.
	outSubj, exitSubj, allSubj := "", "", job.RankSubjects(jobID, spec.Rank)
	if spec.Incarnation > 0 {
		outSubj, exitSubj, allSubj = job.IncarnationSubjects(jobID, spec.Rank, spec.Incarnation)
	}
	p.out = outSubj
	if p.out == "" {
		p.out = job.RankOutSubject(jobID, spec.Rank)
	}
	sub, err := r.nc.Subscribe(allSubj, p.onMsg)
	if err != nil {
		return fail(fmt.Errorf("nodeclient: start rank %d: subscribe: %w", spec.Rank, err))
	}
	p.mu.Lock()
	p.sub = sub
	p.mu.Unlock()
	req := job.SpawnRequest{
		Job: jobID, Rank: spec.Rank, Path: spec.Path, Args: spec.Args, Env: env, Dir: dir,
		Out: outSubj, Exit: exitSubj, KeepAlive: r.cfg.KeepAlive, Replaces: spec.Replaces,
	}
	if err := typedFields(&req); err != nil {
		return fail(fmt.Errorf("nodeclient: start rank %d: %w", spec.Rank, err))
	}
	if card != nil {
		if err := auth.seal(&req, card); err != nil {
			return fail(fmt.Errorf("nodeclient: start rank %d: %w", spec.Rank, err))
		}
	} else {
		dropRestartSecret(&req)
	}
	data, err := auth.encode(job.NodeSpawnSubject(name), req)
	if err != nil {
		return fail(fmt.Errorf("nodeclient: start rank %d: %w", spec.Rank, err))
	}
	answer, err := r.askNode(name, job.NodeSpawnSubject(name), data, r.cfg.RequestTimeout, nil)
	if err != nil {
		reason, gone := fmt.Sprintf("node %s did not answer the spawn request for rank %d: %v", name, spec.Rank, err), false
		if errors.Is(err, nats.ErrNoResponders) {
			reason = fmt.Sprintf("node %s stopped responding (no pcmd listens on %s)", name, job.NodeSpawnSubject(name))
			gone = r.provenGone(name)
		}
		return fail(&SpawnError{Node: name, Rank: spec.Rank, Reason: reason, Gone: gone})
	}
	var rep job.SpawnReply
	if err := job.Decode(answer, &rep); err != nil {
		return fail(&SpawnError{Node: name, Rank: spec.Rank, Reason: fmt.Sprintf("node %s: malformed spawn reply: %v", name, job.TrimPrefix(err))})
	}
	if rep.Error != "" || rep.Refusal != "" || rep.PID <= 0 {
		reason := rep.Error
		if reason == "" {
			reason = fmt.Sprintf("node %s did not start rank %d (refusal %q, pid %d)", name, spec.Rank, rep.Refusal, rep.PID)
		}
		if rep.Refusal == job.RefuseStopping {
			r.closedNode(name)
		}
		return fail(&SpawnError{Node: name, Rank: spec.Rank, Refusal: rep.Refusal, Reason: reason})
	}
	p.mu.Lock()
	p.pid = rep.PID
	p.mu.Unlock()
	return p, nil
}

// typedFields moves the checkpoint settings out of req.Env into the request's typed fields,
// and drops the variables the node sets itself (job.TypedEnv): a node takes them only typed.
func typedFields(req *job.SpawnRequest) error {
	var env []string
	for _, kv := range req.Env {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case job.EnvRestart:
			req.Restart = value
		case job.EnvCkptDir:
			req.CkptDir = value
		case job.EnvCkptKeep:
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return fmt.Errorf("%s=%q: want an integer >= 1", job.EnvCkptKeep, value)
			}
			req.CkptKeep = n
		default:
			if !slices.Contains(job.TypedEnv, name) {
				env = append(env, kv)
			}
		}
	}
	req.Env = env
	return nil
}

// mpiosEnv keeps the MPIOS_* entries of env, the last of each name, in order: only those
// describe the job (pcmd refuses others), the rest of mpirun's environment is local.
func mpiosEnv(env []string) []string {
	last := make(map[string]int)
	for i, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "MPIOS_") {
			last[name] = i
		}
	}
	var out []string
	for i, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok && last[name] == i && strings.HasPrefix(name, "MPIOS_") {
			out = append(out, kv)
		}
	}
	return out
}

// onHeartbeat refreshes a node's liveness; a node that restarted or is leaving is gone, one
// that is not the job's may join it (join.go).
func (r *Remote) onHeartbeat(m *nats.Msg) {
	// Signed by the key its own card names, and not replayed; a joining node's card is
	// then checked as at placement (maybeJoin), a watched node's key must be the pinned one.
	msg, err := r.beats.Verify(m.Subject, m.Data, time.Now())
	if err != nil {
		return // a forgery or a replay: a forged "leaving" must not end ranks
	}
	pinned, _ := r.NodeSigningKey(msg.From.Node)
	info, err := ctlauth.PinnedNodeInfo(msg, pinned)
	if err != nil {
		return
	}
	r.mu.Lock()
	node := r.nodes[info.Name]
	if !r.placed {
		// Placement is still asking the hosts: a host's heartbeat is not a join.
		r.mu.Unlock()
		return
	}
	if node == nil || node.gone != nil {
		r.mu.Unlock()
		r.maybeJoin(info, node)
		return
	}
	if node.card == nil || node.card.SigningKey != msg.Key {
		r.mu.Unlock()
		return // not the key the node was placed with: someone else's, or a forgery
	}
	switch {
	case info.Leaving:
		r.mu.Unlock()
		r.nodeGone(info.Name, fmt.Sprintf("pcmd on node %s shut down", info.Name))
		return
	case info.PID != node.pid:
		r.mu.Unlock()
		r.nodeGone(info.Name, fmt.Sprintf("pcmd on node %s restarted (pid %d, was %d)", info.Name, info.PID, node.pid))
		return
	}
	node.last, node.interval = time.Now(), info.Interval
	if info.Draining != node.draining {
		node.draining = info.Draining
		r.sendEvent(NodeEvent{Draining: &NodeDrain{Node: info.Name, Draining: info.Draining}})
	}
	// A rank the node no longer lists, whose exit never arrived, had its exit message lost:
	// the node is asked for it again. Several beats in a row are needed: a beat can overtake
	// the exit on our side.
	var lost []*remoteProcess
	for p := range node.procs {
		p.mu.Lock()
		if p.pid > 0 && !p.recovering {
			listed := slices.ContainsFunc(info.Ranks, func(ri job.RankInfo) bool { return ri.Job == p.job && ri.Rank == p.rank })
			if listed {
				p.unlisted = 0
			} else if p.unlisted++; p.unlisted >= job.MissedBeats {
				p.recovering = true
				lost = append(lost, p)
			}
		}
		p.mu.Unlock()
	}
	r.mu.Unlock()
	for _, p := range lost {
		go p.recoverExit() // a request: not on the heartbeat's goroutine
	}
}

// monitor declares nodes gone that missed job.MissedBeats heartbeats.
func (r *Remote) monitor() {
	defer r.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case now := <-t.C:
			var gone []string
			var reasons []string
			outage, grace := r.watch.Outage(now)
			r.mu.Lock()
			for _, n := range r.nodes {
				if n.gone == nil && (len(n.procs) > 0 || n.joined) {
					if silent := r.watch.Silence(now, n.last); silent > job.MissedBeats*n.interval {
						gone = append(gone, n.name)
						why := fmt.Sprintf("node %s stopped responding (no heartbeat for %v)", n.name, silent.Round(100*time.Millisecond))
						if outage > 0 {
							why = fmt.Sprintf("node %s unheard while mpirun's own NATS connection has been down for %v, longer than the grace (%s=%v)",
								n.name, outage.Round(100*time.Millisecond), ctlplane.EnvGrace, grace)
						}
						reasons = append(reasons, why)
					}
				}
			}
			r.mu.Unlock()
			for i := range gone {
				r.nodeGone(gone[i], reasons[i])
			}
		}
	}
}

// nodeGone fails every rank on the node; the node cannot be used again by this starter.
func (r *Remote) nodeGone(name, reason string) {
	r.mu.Lock()
	node := r.nodes[name]
	if node == nil || node.gone != nil {
		r.mu.Unlock()
		return
	}
	node.gone = &NodeGoneError{Node: name, Reason: reason}
	r.sendEvent(NodeEvent{Gone: node.gone})
	var procs []*remoteProcess
	var ranks []int
	for p := range node.procs {
		procs = append(procs, p)
		ranks = append(ranks, p.rank)
	}
	r.mu.Unlock()
	if len(procs) > 0 {
		slices.Sort(ranks)
		if len(ranks) == 1 {
			r.cfg.Logf("%s; its rank %d is lost", reason, ranks[0])
		} else {
			r.cfg.Logf("%s; its ranks %s are lost", reason, joinInts(ranks))
		}
	}
	for _, p := range procs {
		p.finish(rankproc.Exit{Code: -1, At: time.Now()}, node.gone)
	}
}

// probeNodes asks the nodes other than except that still run ranks whether their pcmd is
// there, and declares gone those that NATS says nobody listens for (a dead pcmd's
// subscriptions vanish with its connection, long before its heartbeats are missed).
func (r *Remote) probeNodes(except string) {
	r.mu.Lock()
	var names []string
	for _, n := range r.nodes {
		if n.name != except && n.gone == nil && len(n.procs) > 0 {
			names = append(names, n.name)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.askNode(name, job.NodeInfoSubject(name), nil, 250*time.Millisecond, nil)
			if errors.Is(err, nats.ErrNoResponders) && r.provenGone(name) {
				r.nodeGone(name, fmt.Sprintf("node %s stopped responding (no pcmd listens on %s)", name, job.NodeInfoSubject(name)))
			}
		}()
	}
	wg.Wait()
}

// provenGone reports whether nobody listening for node's subjects proves its pcmd dead: not
// while r's own connection is down or came back too recently for the node to have
// reconnected and subscribed again (its heartbeats decide then).
func (r *Remote) provenGone(node string) bool {
	r.mu.Lock()
	window := job.MissedBeats * time.Second
	if n := r.nodes[node]; n != nil {
		window = job.MissedBeats * n.interval
	}
	r.mu.Unlock()
	return !r.watch.Settling(time.Now(), window)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// publishKeepAlive renews the lease of job id on its nodes: under the job key when the
// job has one (the nodes learned it from the spawns and take no other), else empty. r.mu
// held.
func (r *Remote) publishKeepAlive(id string) {
	subject := job.KeepAliveSubject(id)
	var data []byte
	if a := r.auth[id]; a != nil && a.relay != nil {
		var err error
		if data, err = a.relay.Encode(subject, job.KeepAlive{}, time.Now()); err != nil {
			return
		}
	}
	_ = r.nc.Publish(subject, data)
}

// keepAlive publishes the lease renewals of the jobs started through r.
func (r *Remote) keepAlive() {
	defer r.wg.Done()
	t := time.NewTicker(job.KeepAliveInterval)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			r.mu.Lock()
			for id := range r.jobs {
				r.publishKeepAlive(id) // a missed one is renewed next tick
			}
			r.mu.Unlock()
		}
	}
}

// Close stops watching the nodes and disconnects. Ranks still running are not stopped (the
// nodes stop them when their keepalive lease expires); their Wait returns an error.
func (r *Remote) Close() error {
	r.close.Do(func() {
		close(r.quit)
		r.wg.Wait()
		r.mu.Lock()
		var procs []*remoteProcess
		for _, n := range r.nodes {
			for p := range n.procs {
				procs = append(procs, p)
			}
		}
		r.mu.Unlock()
		for _, p := range procs {
			p.finish(rankproc.Exit{Code: -1, At: time.Now()}, errors.New("nodeclient: the remote starter was closed"))
		}
		r.nc.Close()
	})
	return nil
}

// remoteProcess is a rank on a pcmd node.
type remoteProcess struct {
	r      *Remote
	node   string
	rank   int
	job    string
	out    string   // the subject of its output, which names the process in a replay
	auth   *jobAuth // set before the spawn request goes out
	keyed  bool     // its node relays output and exit under the job key
	output func(rankproc.Stream, []byte)

	mu         sync.Mutex
	pid        int
	sub        *nats.Subscription
	unlisted   int  // heartbeats in a row that did not list the rank
	recovering bool // asking its node for the exit it missed

	// The output and exit received, by onMsg and by replays (replay.go).
	outMu    sync.Mutex
	received uint64
	seen     uint64      // highest Seq received
	gaps     [][2]uint64 // Seq ranges (inclusive) below seen not received
	exited   bool        // its exit was taken
	filling  bool        // a replay of the gaps is under way
	partial  [3][]byte   // by stream: pieces of a long line

	once sync.Once
	done chan struct{}
	exit rankproc.Exit
	err  error
}

func (p *remoteProcess) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *remoteProcess) Host() string { return p.node }

func (p *remoteProcess) Wait() (rankproc.Exit, error) {
	<-p.done
	return p.exit, p.err
}

func (p *remoteProcess) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	data, err := p.auth.encode(job.NodeSignalSubject(p.node), job.SignalRequest{Job: p.job, Rank: p.rank, Signal: int(sig)})
	if err != nil {
		return fmt.Errorf("nodeclient: signal rank %d: %w", p.rank, err)
	}
	answer, err := p.r.askNode(p.node, job.NodeSignalSubject(p.node), data, p.r.cfg.RequestTimeout, nil)
	if errors.Is(err, nats.ErrNoResponders) && p.r.provenGone(p.node) {
		// Nobody listens for the node: its pcmd is dead, and the rank with it.
		p.r.nodeGone(p.node, fmt.Sprintf("node %s stopped responding (no pcmd listens on %s)", p.node, job.NodeSignalSubject(p.node)))
		return nil
	}
	if err != nil {
		return fmt.Errorf("nodeclient: signal rank %d on node %s: %w", p.rank, p.node, err)
	}
	var rep job.SignalReply
	if err := job.Decode(answer, &rep); err != nil {
		return fmt.Errorf("nodeclient: signal rank %d on node %s: %w", p.rank, p.node, job.TrimPrefix(err))
	}
	if rep.Error != "" && !rep.NotFound {
		return fmt.Errorf("nodeclient: signal rank %d on node %s: %s", p.rank, p.node, rep.Error)
	}
	return nil // NotFound: it exited, its exit message is on its way
}

// onMsg handles the rank's output and exit messages. They come from the network: anything
// malformed is reported and dropped.
func (p *remoteProcess) onMsg(m *nats.Msg) {
	leaf := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	data, err := p.open(m)
	if err != nil {
		// Forged or replayed: another client of the server must not fake a rank's exit.
		p.r.cfg.Logf("ignoring a message on %s: %v", m.Subject, err)
		return
	}
	switch leaf {
	case "out":
		var o job.RankOutput
		if err := job.Decode(data, &o); err != nil || !validOutput(o) {
			p.r.cfg.Logf("ignoring a malformed output message for rank %d", p.rank)
			return
		}
		p.outMu.Lock()
		p.takeOutput(o)
		p.outMu.Unlock()
	case "exit":
		var e job.RankExit
		if err := job.Decode(data, &e); err != nil || !validExit(e) {
			p.r.cfg.Logf("ignoring a malformed exit message for rank %d", p.rank)
			return
		}
		p.takeExit(e)
	}
}

func validOutput(o job.RankOutput) bool {
	return o.Stream == job.StreamStdout || o.Stream == job.StreamStderr
}

func validExit(e job.RankExit) bool { return e.Signal >= 0 && e.Signal <= 64 }

// takeOutput delivers an output message unless it was delivered before (a replay overlaps
// what arrived). p.outMu must be held.
func (p *remoteProcess) takeOutput(o job.RankOutput) {
	if p.exited {
		return
	}
	switch {
	case o.Seq > p.seen:
		if o.Seq > p.seen+1 {
			p.gaps = append(p.gaps, [2]uint64{p.seen + 1, o.Seq - 1})
			if !p.filling {
				p.filling = true
				go p.fillGaps() // a request: not on the subscription's goroutine
			}
		}
		p.seen = o.Seq
	case !p.fillGap(o.Seq):
		return // delivered before
	}
	p.received++
	if o.Partial {
		if len(p.partial[o.Stream])+len(o.Line) < rankproc.MaxLine {
			p.partial[o.Stream] = append(p.partial[o.Stream], o.Line...)
			return
		}
		// Too long to hold: emit what we have, as a local rank's forwarder would.
	}
	line := o.Line
	if buf := p.partial[o.Stream]; buf != nil {
		line = append(buf, o.Line...)
		p.partial[o.Stream] = nil
	}
	p.output(rankproc.Stream(o.Stream), line)
}

// fillGap removes seq from the gaps; it reports whether seq was missing.
func (p *remoteProcess) fillGap(seq uint64) bool {
	for i, g := range p.gaps {
		if seq < g[0] || seq > g[1] {
			continue
		}
		switch {
		case g[0] == g[1]:
			p.gaps = slices.Delete(p.gaps, i, i+1)
		case seq == g[0]:
			p.gaps[i][0]++
		case seq == g[1]:
			p.gaps[i][1]--
		default:
			p.gaps = slices.Insert(p.gaps, i+1, [2]uint64{seq + 1, g[1]})
			p.gaps[i][1] = seq - 1
		}
		return true
	}
	return false
}

// missing counts the output messages not received of the sent ones.
func (p *remoteProcess) missing(sent uint64) uint64 {
	var n uint64
	for _, g := range p.gaps {
		n += g[1] - g[0] + 1
	}
	if sent > p.seen {
		n += sent - p.seen
	}
	return n
}

// takeExit ends the rank with its exit message, once: first the output messages lost on the
// way are asked from the node again (replay.go).
func (p *remoteProcess) takeExit(e job.RankExit) {
	p.outMu.Lock()
	if p.exited {
		p.outMu.Unlock()
		return
	}
	if p.missing(e.Sent) > 0 {
		p.replayMissing() // its exit is this one
	}
	p.exited = true
	for s, buf := range p.partial {
		if buf != nil {
			p.output(rankproc.Stream(s), buf)
		}
	}
	if n := p.missing(e.Sent); n > 0 {
		p.r.cfg.Logf("%d output messages of rank %d on node %s were lost", n, p.rank, p.node)
	}
	p.outMu.Unlock()
	if e.Reason != "" {
		p.r.cfg.Logf("node %s stopped rank %d: %s", p.node, p.rank, e.Reason)
	}
	ex := rankproc.Exit{Code: e.Code, Signal: syscall.Signal(e.Signal), At: time.Now()}
	var err error
	if e.Error != "" {
		err = fmt.Errorf("nodeclient: node %s: %s", p.node, e.Error)
	}
	if err != nil || !ex.Success() {
		// A dead node is the likelier cause of this failure (its ranks' peers fail
		// first): its ranks are finished, with a NodeGoneError, before this exit, and the
		// supervisor blames them among the failures that arrive together.
		p.r.probeNodes(p.node)
	}
	p.finish(ex, err)
}

// finish records how the rank ended, once, and forgets it.
func (p *remoteProcess) finish(ex rankproc.Exit, err error) {
	p.once.Do(func() {
		p.exit, p.err = ex, err
		p.mu.Lock()
		sub := p.sub
		p.mu.Unlock()
		if sub != nil {
			_ = sub.Unsubscribe() // fails only if the connection is closed: nothing left to stop
		}
		p.r.mu.Lock()
		if n := p.r.nodes[p.node]; n != nil {
			delete(n.procs, p)
		}
		p.r.mu.Unlock()
		close(p.done)
	})
}

// DiscoverNodes asks every pcmd on the connection's NATS server for its view of the nodes
// (job.NodesDiscoverSubject) and collects the replies that arrive within wait. A view counts
// only signed by its node with the key its card names (ctlauth.VerifyNodeView), and only if
// keys trusts that key (nil: any, ctlauth.AnyKey); others, and malformed ones, are dropped.
func DiscoverNodes(nc *nats.Conn, wait time.Duration, keys ctlauth.KeySet) ([]job.NodeView, error) {
	if keys == nil {
		keys = ctlauth.AnyKey{}
	}
	msgs, err := ctlplane.Gather(nc, job.NodesDiscoverSubject, nil, wait)
	if err != nil {
		err = fmt.Errorf("nodeclient: discover nodes: %w", err)
	}
	var views []job.NodeView
	for _, msg := range msgs {
		v, err := ctlauth.VerifyNodeView(msg.Subject, msg.Data, keys)
		if err != nil {
			continue
		}
		peers := v.Peers[:0]
		for _, pi := range v.Peers {
			if pi.Info.Validate() == nil && pi.Age >= 0 {
				peers = append(peers, pi)
			}
		}
		v.Peers = peers
		views = append(views, v)
	}
	return views, err
}
