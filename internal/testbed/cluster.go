package testbed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
)

// ErrNotIsolated is returned by operations that need cgroups when the cluster runs in
// loopback mode.
var ErrNotIsolated = errors.New("testbed: the cluster is not isolated (loopback mode): no cgroups")

// ErrClosed is returned by operations on a closed cluster.
var ErrClosed = errors.New("testbed: cluster is closed")

// Cluster is a running emulated cluster. Its methods are safe for concurrent use; AddNode,
// RemoveNode, SetLoad and Close run one at a time.
type Cluster struct {
	opts     Options
	log      *log.Logger
	isolated bool
	cg       *cgroupFS // nil unless isolated
	workDir  string
	ownWork  bool // workDir was made by Start and is removed by Close
	binDir   string
	natsURL  string
	srv      *natsserver.Server
	sites    map[string]*site // Options.Sites' servers; fixed after Start
	nc       *nats.Conn
	lock     *machineLock

	bridgeMade bool
	cgTopMade  bool

	opMu sync.Mutex // serializes AddNode, RemoveNode, SetLoad and Close

	mu    sync.Mutex // guards the fields below
	nodes map[string]*node
	beats map[string]beat
	links map[linkKey]Link // SetLink's links between pairs of nodes

	// How link delays are made, chosen by the first delayed SetLink (under opMu): netem,
	// or the userspace delay router.
	netem  bool
	router *delayRouter
	closed bool
}

// beat is the last heartbeat heard from a node.
type beat struct {
	info job.NodeInfo
	at   time.Time
}

// node is one emulated node.
type node struct {
	name    string
	cpus    float64
	idx     int    // address index: the node's address is nodeIP(idx) when isolated
	addr    string // advertise address
	cg      *nodeCgroup
	logPath string
	logFile *os.File

	pcmd *proc

	load        *proc
	share       float64
	loadThreads int
}

// proc is a child process and its exit.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // its Wait error, valid after done
}

func startProc(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends sig and waits up to grace for the process to exit, then kills it.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("pid %d did not stop within %v of signal %v and was killed", p.cmd.Process.Pid, grace, sig)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pid %d survives SIGKILL", p.cmd.Process.Pid)
	}
}

// Node describes a node of the cluster.
type Node struct {
	Name string
	CPUs float64 // the node's CPU quota; 0 = none
	Addr string  // the address its pcmd advertises and its ranks listen on
	// NetNS is the node's network namespace ("" in loopback mode).
	NetNS string
	// Cgroup is the node's cgroup directory in the cpu controller's hierarchy, where its
	// quota is set ("" in loopback mode); CgroupVersion is 1 or 2 (0 in loopback mode).
	Cgroup        string
	CgroupVersion int
	PID           int     // pcmd's pid
	Load          float64 // the share of SetLoad in force
	Log           string  // the file receiving pcmd's and the load generator's output
}

// Start starts a cluster: it builds pcmd and the load generator if needed, decides the
// isolation mode, removes leftovers of crashed runs, makes the bridge and the NATS server,
// and starts Options.Nodes. ctx bounds the start (including waiting for the machine-wide
// lock), not the cluster's life: call Close to stop it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, log: opts.Log, nodes: map[string]*node{}, beats: map[string]beat{}}
	if err := c.start(ctx); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = fmt.Errorf("%w (and while cleaning up: %v)", err, cerr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	o := &c.opts
	c.workDir = o.WorkDir
	if c.workDir == "" {
		dir, err := os.MkdirTemp("", "mpios-testbed-")
		if err != nil {
			return fmt.Errorf("testbed: work directory: %w", err)
		}
		c.workDir, c.ownWork = dir, true
	}
	c.binDir = filepath.Join(c.workDir, "bin")
	for _, d := range []string{c.binDir, filepath.Join(c.workDir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
	}
	if o.StoreDir == "" {
		o.StoreDir = filepath.Join(c.workDir, "store")
	}
	if len(o.Allow) == 0 {
		o.Allow = []string{filepath.Join(c.binDir, "*")}
	}
	for _, b := range []struct {
		path *string
		name string
		pkg  string
	}{{&o.PCMD, "pcmd", "./cmd/pcmd"}, {&o.LoadGen, "loadgen", "./internal/testbed/loadgen"},
		{&o.NodeExec, "nodeexec", "./internal/testbed/nodeexec"}, {&o.NATSD, "natsd", "./internal/testbed/natsd"}} {
		if b.name == "natsd" && len(o.Sites) == 0 {
			continue
		}
		if *b.path != "" {
			if _, err := os.Stat(*b.path); err != nil {
				return fmt.Errorf("testbed: %s binary: %w", b.name, err)
			}
			continue
		}
		out := filepath.Join(c.binDir, b.name)
		if err := testbin.BuildE(out, b.pkg); err != nil {
			return fmt.Errorf("testbed: build %s: %w", b.name, err)
		}
		*b.path = out
	}

	reason := c.isolationUnavailable()
	if reason != "" {
		if o.Isolation == IsolationNetns {
			return fmt.Errorf("testbed: isolation %q is not possible: %s", IsolationNetns, reason)
		}
		if o.Isolation == IsolationAuto {
			c.log.Printf("NOT ISOLATED: %s; falling back to loopback: all nodes on 127.0.0.1, no CPU quotas, no namespaces", reason)
		}
	} else {
		if err := c.setupIsolation(ctx); err != nil {
			if o.Isolation == IsolationNetns || ctx.Err() != nil {
				return err
			}
			c.log.Printf("NOT ISOLATED: %v; falling back to loopback: all nodes on 127.0.0.1, no CPU quotas, no namespaces", err)
			if terr := c.teardownIsolation(); terr != nil {
				c.log.Printf("warning: undoing the isolation setup: %v", terr)
			}
		}
	}

	if len(o.Sites) > 0 && !c.isolated {
		if reason == "" {
			reason = "setting it up failed (see the log)"
		}
		return errors.New("testbed: Options.Sites needs an isolated cluster (network namespaces): " + reason)
	}
	if err := c.startNATS(); err != nil {
		return err
	}
	mode := "loopback (127.0.0.1, no quotas)"
	if c.isolated {
		mode = fmt.Sprintf("isolated (bridge %s %s/%d, cgroup v%d at %s)", BridgeName, BridgeIP, SubnetPrefix, c.cg.version, c.cg.cpuRoot)
	}
	c.log.Printf("cluster up: %s, nats %s, work dir %s", mode, redact(c.natsURL), c.workDir)
	for _, n := range o.Nodes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("testbed: start: %w", err)
		}
		if err := c.AddNode(n.Name, n.CPUs); err != nil {
			return err
		}
	}
	return nil
}

// isolationUnavailable says why nodes cannot be isolated, or "" if they may be.
func (c *Cluster) isolationUnavailable() string {
	if c.opts.Isolation == IsolationLoopback {
		return "loopback mode requested"
	}
	if runtime.GOOS != "linux" {
		return "network namespaces and cgroups need Linux"
	}
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip command (iproute2) is not installed"
	}
	if c.opts.NATSURL != "" && loopbackHost(c.opts.NATSURL) {
		return "the NATS URL " + redact(c.opts.NATSURL) + " is a loopback address, which the node namespaces cannot reach"
	}
	if _, err := detectCgroups(); err != nil {
		return err.Error()
	}
	return ""
}

// setupIsolation takes the machine lock, removes stale leftovers and makes the bridge and
// the parent cgroup.
func (c *Cluster) setupIsolation(ctx context.Context) error {
	fs, err := detectCgroups()
	if err != nil {
		return err
	}
	lock, err := acquireLock(ctx, c.log)
	if err != nil {
		return err
	}
	c.lock = lock
	if err := cleanupLocked(c.log, fs); err != nil {
		return fmt.Errorf("testbed: removing leftovers of an earlier run: %w", err)
	}
	c.bridgeMade = true // from now on, teardownIsolation removes whatever part was made
	if err := setupBridge(); err != nil {
		return fmt.Errorf("testbed: bridge: %w", err)
	}
	c.cg, c.cgTopMade = fs, true
	if err := fs.prepare(); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	c.isolated = true
	return nil
}

// teardownIsolation undoes setupIsolation.
func (c *Cluster) teardownIsolation() error {
	var errs []error
	if c.bridgeMade {
		if err := teardownBridge(); err != nil {
			errs = append(errs, err)
		}
		c.bridgeMade = false
	}
	if c.cgTopMade && c.cg != nil {
		if err := c.cg.removeTop(); err != nil {
			errs = append(errs, err)
		}
		c.cgTopMade = false
	}
	c.isolated, c.cg = false, nil
	if c.lock != nil {
		c.lock.release()
		c.lock = nil
	}
	return errors.Join(errs...)
}

// startNATS starts the embedded server unless a URL was given, and subscribes to the nodes'
// heartbeats.
func (c *Cluster) startNATS() error {
	c.natsURL = c.opts.NATSURL
	if len(c.opts.Sites) > 0 {
		if err := c.startSites(); err != nil {
			return err
		}
	} else if c.natsURL == "" {
		host := "127.0.0.1"
		if c.isolated {
			host = BridgeIP
		}
		user, pass := randomHex(8), randomHex(16)
		srv, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: natsserver.RANDOM_PORT,
			NoLog: true, NoSigs: true, Username: user, Password: pass})
		if err != nil {
			return fmt.Errorf("testbed: NATS server: %w", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			srv.Shutdown()
			return fmt.Errorf("testbed: NATS server on %s not ready after 10s", host)
		}
		c.srv = srv
		c.natsURL = strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+pass+"@", 1)
	}
	nc, err := nats.Connect(c.natsURL, nats.Name("testbed"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("testbed: connect to NATS %s: %w", redact(c.natsURL), err)
	}
	c.nc = nc
	if _, err := nc.Subscribe(job.NodesHeartbeatSubject, c.onHeartbeat); err != nil {
		return fmt.Errorf("testbed: subscribe to heartbeats: %w", err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("testbed: NATS flush: %w", err)
	}
	return nil
}

func (c *Cluster) onHeartbeat(m *nats.Msg) {
	info, err := ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{})
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if info.Leaving {
		delete(c.beats, info.Name)
		return
	}
	c.beats[info.Name] = beat{info: info, at: time.Now()}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	return hex.EncodeToString(b)
}

// redact removes the password from a NATS URL for logging.
func redact(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	user := u[scheme+3 : at]
	if name, _, ok := strings.Cut(user, ":"); ok {
		user = name + ":xxx"
	}
	return u[:scheme+3] + user + u[at:]
}

// NATSURL is the control plane's URL, credentials included: give it to mpirun --nats.
func (c *Cluster) NATSURL() string { return c.natsURL }

// Isolated reports whether nodes have their own network namespaces and CPU quotas (false:
// loopback mode).
func (c *Cluster) Isolated() bool { return c.isolated }

// BinDir is the directory of the built pcmd and load generator. The nodes may run any
// program in it unless Options.Allow says otherwise.
func (c *Cluster) BinDir() string { return c.binDir }

// WorkDir is the cluster's working directory (binaries, logs, checkpoint stores).
func (c *Cluster) WorkDir() string { return c.workDir }

// PCMD is the pcmd binary the nodes run.
func (c *Cluster) PCMD() string { return c.opts.PCMD }

// AddNode starts node name with a quota of cpus CPUs (0: none) and waits until its
// heartbeat arrives. It may be called while jobs run: the node joins the cluster.
func (c *Cluster) AddNode(name string, cpus float64) error {
	if err := validateNodeSpec(name, cpus); err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if _, dup := c.nodes[name]; dup {
		c.mu.Unlock()
		return fmt.Errorf("testbed: node %s already exists", name)
	}
	used := map[int]bool{}
	for _, n := range c.nodes {
		used[n.idx] = true
	}
	for _, s := range c.sites {
		used[s.idx] = true
	}
	c.mu.Unlock()
	idx := 0
	for used[idx] {
		idx++
	}
	if idx >= MaxNodes {
		return fmt.Errorf("testbed: node %s: the cluster already has %d nodes", name, MaxNodes)
	}
	n := &node{name: name, cpus: cpus, idx: idx, addr: "127.0.0.1",
		logPath: filepath.Join(c.workDir, "logs", name+".log")}
	if err := c.startNode(n); err != nil {
		if terr := c.teardownNode(n); terr != nil {
			err = fmt.Errorf("%w (and while cleaning up: %v)", err, terr)
		}
		return err
	}
	c.mu.Lock()
	c.nodes[name] = n
	c.mu.Unlock()
	quota := "no quota"
	if c.isolated && cpus > 0 {
		quota = fmt.Sprintf("%g CPUs", cpus)
	}
	c.log.Printf("node %s up: %s, %s, pcmd pid %d", name, n.addr, quota, n.pcmd.cmd.Process.Pid)
	return nil
}

func (c *Cluster) startNode(n *node) error {
	o := &c.opts
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: node %s: log: %w", n.name, err)
	}
	n.logFile = f
	store := filepath.Join(o.StoreDir, n.name)
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("testbed: node %s: store: %w", n.name, err)
	}
	if c.isolated {
		n.addr = nodeIP(n.idx)
		if err := setupNetns(n.name, n.idx); err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		n.cg = &nodeCgroup{fs: c.cg, name: n.name}
		if err := n.cg.create(n.cpus, o.CFSPeriod); err != nil {
			return fmt.Errorf("testbed: node %s: %w", n.name, err)
		}
	}
	natsURL := c.natsURL
	if s := c.siteOf(n.name); s != "" {
		natsURL = c.sites[s].url // its own site's server
	}
	args := []string{"serve", "--node", n.name, "--nats", natsURL, "--advertise", n.addr,
		"--slots", strconv.Itoa(o.Slots), "--store", store}
	if help, _ := exec.Command(o.PCMD, "serve", "--help").CombinedOutput(); bytes.Contains(help, []byte("--insecure-open")) {
		// The testbed's NATS server is private to it; older pcmds have no such flag.
		args = append(args, "--insecure-open")
	}
	for _, p := range o.Allow {
		args = append(args, "--allow", p)
	}
	if o.Heartbeat > 0 {
		args = append(args, "--heartbeat", o.Heartbeat.String())
	}
	if o.KillGrace > 0 {
		args = append(args, "--kill-grace", o.KillGrace.String())
	}
	args = append(args, o.ExtraArgs...)
	args = append(args, o.NodeArgs[n.name]...)
	cmd := c.nodeCommand(n, subWork, true, o.PCMD, args...)
	cmd.Stdout, cmd.Stderr = f, f
	setDeathSignal(cmd, syscall.SIGINT) // SIGTERM would drain the node first
	p, err := startProc(cmd)
	if err != nil {
		return fmt.Errorf("testbed: node %s: start pcmd: %w", n.name, err)
	}
	n.pcmd = p
	return c.waitHeartbeat(n)
}

// nodeCommand returns a command that runs prog inside n's cgroup child sub and, with inNetns,
// its network namespace. In loopback mode it runs prog directly.
func (c *Cluster) nodeCommand(n *node, sub string, inNetns bool, prog string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if !c.isolated {
		cmd = exec.Command(prog, args...)
	} else {
		// nodeexec joins the cgroups and the namespace, then becomes prog: one process
		// throughout, so signals to cmd.Process reach prog. ("ip netns exec" would do for the
		// namespace, but it mounts a new /sys, hiding /sys/fs/cgroup from pcmd and its ranks.)
		var argv []string
		for _, f := range n.cg.procsFiles(sub) {
			argv = append(argv, "-cgroup", f)
		}
		if inNetns {
			argv = append(argv, "-netns", netnsPath(n.name))
		}
		argv = append(argv, "--", prog)
		argv = append(argv, args...)
		cmd = exec.Command(c.opts.NodeExec, argv...)
	}
	cmd.Env = c.nodeEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C goes to the testbed, not the nodes
	return cmd
}

// nodeEnv is the environment of node processes: this process's, without MPIOS_* variables,
// plus Options.ExtraEnv.
func (c *Cluster) nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MPIOS_") {
			env = append(env, kv)
		}
	}
	return append(env, c.opts.ExtraEnv...)
}

// waitHeartbeat waits for a heartbeat of n's pcmd.
func (c *Cluster) waitHeartbeat(n *node) error {
	pid := n.pcmd.cmd.Process.Pid
	deadline := time.Now().Add(c.opts.NodeTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		b, ok := c.beats[n.name]
		c.mu.Unlock()
		if ok && b.info.PID == pid {
			if b.info.Advertise != n.addr {
				return fmt.Errorf("testbed: node %s advertises %s, want %s", n.name, b.info.Advertise, n.addr)
			}
			return nil
		}
		select {
		case <-n.pcmd.done:
			return fmt.Errorf("testbed: node %s: pcmd exited before registering (%v); its log %s ends:\n%s",
				n.name, n.pcmd.err, n.logPath, tail(n.logPath, 2048))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: node %s: no heartbeat from pcmd pid %d within %v (%s); its log %s ends:\n%s%s",
				n.name, pid, c.opts.NodeTimeout, c.heartbeatCheck(), n.logPath, tail(n.logPath, 2048), c.siteLogs())
		}
	}
}

// heartbeatCheck says, for an error about a missing heartbeat, what the testbed's own
// connection is doing and which nodes' heartbeats a fresh connection hears within 3 s:
// whether the heartbeats or the testbed's subscription went missing.
func (c *Cluster) heartbeatCheck() string {
	status := "testbed connection " + c.nc.Status().String()
	c.mu.Lock()
	var seen []string
	for n, b := range c.beats {
		seen = append(seen, fmt.Sprintf("%s(pid %d, %v ago)", n, b.info.PID, time.Since(b.at).Round(time.Millisecond)))
	}
	c.mu.Unlock()
	slices.Sort(seen)
	status += fmt.Sprintf(", last heard %v", seen)
	nc, err := nats.Connect(c.natsURL, nats.Name("testbed-check"), nats.Timeout(5*time.Second))
	if err != nil {
		return status + "; a new connection fails: " + err.Error()
	}
	defer nc.Close()
	heard := map[string]bool{}
	var mu sync.Mutex
	sub, err := nc.Subscribe(job.NodesHeartbeatSubject, func(m *nats.Msg) {
		if info, err := ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{}); err == nil {
			mu.Lock()
			heard[fmt.Sprintf("%s(pid %d)", info.Name, info.PID)] = true
			mu.Unlock()
		}
	})
	if err != nil {
		return status + "; subscribing on a new connection fails: " + err.Error()
	}
	time.Sleep(3 * time.Second) // the window of heartbeats to listen to
	_ = sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	return fmt.Sprintf("%s; a new connection hears heartbeats of %v", status, slices.Sorted(maps.Keys(heard)))
}

// tail returns the last max bytes of a file.
func tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// lookup returns node name, or an error naming it if there is none.
func (c *Cluster) lookup(name string) (*node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[name]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("testbed: no node %s", name)
}

// RemoveNode stops node name gracefully (SIGTERM to its pcmd, which stops its ranks and
// deregisters; SIGKILL after Options.StopTimeout) and removes its namespace and cgroups. It
// may be called while jobs run: the node leaves the cluster, and ranks running on it fail.
func (c *Cluster) RemoveNode(name string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	n, err := c.lookup(name)
	if err != nil {
		return err
	}
	err = c.teardownNode(n)
	c.mu.Lock()
	delete(c.nodes, name)
	c.mu.Unlock()
	if lerr := c.unlink(name); lerr != nil {
		err = errors.Join(err, lerr)
	}
	if err == nil {
		c.log.Printf("node %s removed", name)
	}
	return err
}

// teardownNode stops n's processes and removes what was made for it.
func (c *Cluster) teardownNode(n *node) error {
	var errs []error
	if err := c.stopLoad(n, false); err != nil {
		errs = append(errs, err)
	}
	if n.pcmd != nil {
		if err := n.pcmd.stop(syscall.SIGINT, c.opts.StopTimeout); err != nil {
			errs = append(errs, fmt.Errorf("pcmd %w", err))
		}
	}
	if c.isolated {
		if n.cg != nil {
			if err := n.cg.killAll(5 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		if err := teardownNetns(n.name, n.idx); err != nil {
			errs = append(errs, err)
		}
		if n.cg != nil {
			if err := n.cg.remove(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if n.logFile != nil {
		_ = n.logFile.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed: remove node %s: %w", n.name, err)
	}
	return nil
}

// SetLoad makes a CPU-bound load generator take share (0 to 1) of node name's CPU, like a
// competing user's program: 0.8 leaves the node's ranks 20% of its quota. Share 0 stops the
// load generator. When isolated, the load generator runs in the node's cgroup, whose quota
// it shares with the ranks by cgroup weights (share : 1-share) and quotas (share and 1-share
// of the node's CPUs); a node without a quota counts as having all the machine's CPUs. In loopback
// mode the load generator runs unconstrained, busy for share of every 10 ms on
// ceil(share × CPUs) threads.
func (c *Cluster) SetLoad(name string, share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("testbed: load %v on node %s: want a share from 0 to 1", share, name)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	n, err := c.lookup(name)
	if err != nil {
		return err
	}
	cpus := n.cpus
	if cpus == 0 {
		cpus = float64(runtime.NumCPU())
	}
	want := share * cpus
	threads := max(1, int(math.Ceil(want-1e-9)))
	if c.isolated {
		// The quota bounds the generator; threads on several CPUs let it spend its quota
		// even when other programs of this machine keep one CPU busy.
		threads = max(threads, min(runtime.NumCPU(), 8))
	}
	running := n.load != nil && !exited(n.load)
	// Isolated, the cgroup bounds the generator: it need not restart for a new share with
	// the same thread count. In loopback mode its duty cycle carries the share.
	restart := share > 0 && (!running || n.loadThreads != threads || !c.isolated)
	if share == 0 || restart {
		if err := c.stopLoad(n, share == 0); err != nil {
			return fmt.Errorf("testbed: node %s: %w", name, err)
		}
	}
	if share > 0 && c.isolated {
		if err := n.cg.setLoadShare(share, cpus, c.opts.CFSPeriod); err != nil {
			return fmt.Errorf("testbed: node %s: %w", name, err)
		}
	}
	if restart {
		args := []string{"-threads", strconv.Itoa(threads)}
		if !c.isolated {
			args = append(args, "-duty", strconv.FormatFloat(want/float64(threads), 'f', 4, 64))
		}
		cmd := c.nodeCommand(n, subLoad, false, c.opts.LoadGen, args...)
		cmd.Stdout, cmd.Stderr = n.logFile, n.logFile
		setDeathSignal(cmd, syscall.SIGKILL)
		p, err := startProc(cmd)
		if err != nil {
			return fmt.Errorf("testbed: node %s: start load generator: %w", name, err)
		}
		n.load, n.loadThreads = p, threads
	}
	c.mu.Lock()
	n.share = share
	c.mu.Unlock()
	if share == 0 {
		c.log.Printf("node %s: load stopped", name)
	} else {
		c.log.Printf("node %s: load %.0f%% (%.2f CPUs on %d threads)", name, 100*share, want, threads)
	}
	return nil
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stopLoad stops n's load generator, if any, and with reset restores the cgroup weights.
func (c *Cluster) stopLoad(n *node, reset bool) error {
	var err error
	if n.load != nil {
		err = n.load.stop(syscall.SIGKILL, 5*time.Second)
		n.load, n.loadThreads = nil, 0
		if err != nil {
			err = fmt.Errorf("load generator %w", err)
		}
	}
	if reset && c.isolated && n.cg != nil && n.share > 0 {
		if serr := n.cg.setLoadShare(0, 0, c.opts.CFSPeriod); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return err
}

// CPUUsage returns the CPU time node name's processes (pcmd, ranks and load generator)
// have used since it was added. It needs isolation (ErrNotIsolated otherwise).
func (c *Cluster) CPUUsage(name string) (time.Duration, error) {
	n, err := c.lookup(name)
	if err != nil {
		return 0, err
	}
	if !c.isolated {
		return 0, ErrNotIsolated
	}
	d, err := n.cg.usage("")
	if err != nil {
		return 0, fmt.Errorf("testbed: node %s: %w", name, err)
	}
	return d, nil
}

// Command returns a command that runs prog with args on node name: inside its network
// namespace and cgroup (with its ranks) when isolated. The caller starts and waits for it;
// it runs in its own process group.
func (c *Cluster) Command(name, prog string, args ...string) (*exec.Cmd, error) {
	n, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return c.nodeCommand(n, subWork, true, prog, args...), nil
}

// Node describes node name.
func (c *Cluster) Node(name string) (Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return Node{}, false
	}
	return c.describe(n), true
}

// Nodes describes every node, by name.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Node
	for _, n := range c.nodes {
		out = append(out, c.describe(n))
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (c *Cluster) describe(n *node) Node {
	d := Node{Name: n.name, CPUs: n.cpus, Addr: n.addr, PID: n.pcmd.cmd.Process.Pid, Load: n.share, Log: n.logPath}
	if c.isolated {
		d.NetNS, d.Cgroup, d.CgroupVersion = netnsName(n.name), n.cg.cpuDir(""), c.cg.version
	}
	return d
}

// Heartbeat returns the last heartbeat heard from node name (any pcmd by that name on the
// cluster's NATS server) and when it arrived.
func (c *Cluster) Heartbeat(name string) (job.NodeInfo, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.beats[name]
	return b.info, b.at, ok
}

// Close stops every node (as RemoveNode, all at once), the NATS server, and removes the
// bridge, the cgroups and the work directory if Start made it. It returns what could not be
// cleaned up. Closing twice is harmless.
func (c *Cluster) Close() error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nodes := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()

	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = c.teardownNode(n) })
	}
	wg.Wait()
	c.mu.Lock()
	clear(c.nodes)
	c.mu.Unlock()
	if c.nc != nil {
		c.nc.Close()
	}
	if c.srv != nil {
		c.srv.Shutdown()
	}
	errs = append(errs, c.stopSites())
	if c.router != nil {
		errs = append(errs, teardownRouter(c.router))
		c.router = nil
	}
	errs = append(errs, c.teardownIsolation())
	if c.ownWork {
		if err := os.RemoveAll(c.workDir); err != nil {
			errs = append(errs, fmt.Errorf("testbed: remove work directory: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.log.Printf("cluster closed")
	return nil
}
