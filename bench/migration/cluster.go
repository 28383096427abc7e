package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
)

// debianNATS is Debian's nats-server, used when installed.
const debianNATS = "/usr/sbin/nats-server"

// buffer is a bytes.Buffer that may be read while a process writes to it.
type buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// isolatedEnv is the environment without MPIOS_ variables and with private XDG directories,
// so job records and default checkpoint stores stay under dir.
func isolatedEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MPIOS_") || strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") || strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
}

// cluster is a NATS server and pcmd nodes on loopback.
type cluster struct {
	dir, bin string
	url      string
	natsDesc string
	nc       *nats.Conn
	env      []string
	stops    []func()
	nodes    map[string]string // node -> store directory
	logs     map[string]string // node -> log file
	procs    map[string]*node  // node -> its pcmd serve process

	hasPolicy bool     // pcmd serve knows --policy
	hasOpen   bool     // pcmd serve knows --insecure-open (takes no unsigned spawns without it)
	memStore  bool     // the nodes keep checkpoints in memory (pcmd serve --ckpt-store mem)
	extra     []string // further options of every node's pcmd serve
}

func startCluster(dir, bin string, env []string, nodes ...string) (*cluster, error) {
	return startClusterStore(dir, bin, env, false, nodes...)
}

// startClusterStore is startCluster with the nodes' checkpoints in memory if mem.
func startClusterStore(dir, bin string, env []string, mem bool, nodes ...string) (*cluster, error) {
	return startClusterOpts(dir, bin, env, mem, nil, nodes...)
}

// startClusterOpts is startClusterStore with extra options of pcmd serve for every node.
func startClusterOpts(dir, bin string, env []string, mem bool, extra []string, nodes ...string) (*cluster, error) {
	c := &cluster{extra: extra, dir: dir, bin: bin, env: env, nodes: map[string]string{}, logs: map[string]string{}, procs: map[string]*node{}, memStore: mem}
	help, _ := exec.Command(filepath.Join(bin, "pcmd"), "serve", "--help").CombinedOutput()
	c.hasPolicy = bytes.Contains(help, []byte("--policy"))
	c.hasOpen = bytes.Contains(help, []byte("--insecure-open"))
	if err := c.startNATS(); err != nil {
		c.stop()
		return nil, err
	}
	nc, err := nats.Connect(c.url)
	if err != nil {
		c.stop()
		return nil, err
	}
	c.nc = nc
	c.stops = append(c.stops, nc.Close)
	for _, n := range nodes {
		if err := c.startNode(n); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *cluster) stop() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
	c.stops = nil
}

func (c *cluster) startNATS() error {
	if _, err := os.Stat(debianNATS); err != nil {
		srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			return errors.New("in-process NATS server not ready")
		}
		c.stops = append(c.stops, srv.Shutdown)
		c.url, c.natsDesc = srv.ClientURL(), "in-process nats-server "+natsserver.VERSION
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(debianNATS, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	logf, err := os.Create(filepath.Join(c.dir, "nats-server.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	c.stops = append(c.stops, func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	c.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	c.natsDesc = debianNATS
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(c.url)
		if err == nil {
			nc.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server on port %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeArgs is the pcmd command line of node name (without the program). --policy none is
// given only to a pcmd that has the IOS agent (older ones have no such option).
func (c *cluster) nodeArgs(name string) []string {
	args := []string{"serve", "--node", name, "--nats", c.url, "--allow", c.bin + "/*", "--slots", "8"}
	if c.hasPolicy {
		args = append(args, "--policy", "none")
	}
	if c.hasOpen {
		// The benchmark's NATS server is private to it; older pcmds have no such flag.
		args = append(args, "--insecure-open")
	}
	args = append(args, c.extra...)
	if c.memStore {
		return append(args, "--ckpt-store", "mem")
	}
	return append(args, "--store", c.nodes[name])
}

func (c *cluster) startNode(name string) error {
	c.nodes[name] = filepath.Join(c.dir, "store-"+name)
	c.logs[name] = filepath.Join(c.dir, "pcmd-"+name+".log")
	logf, err := os.Create(c.logs[name])
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "pcmd"), c.nodeArgs(name)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n := &node{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); n.exited = time.Now(); close(n.done) }()
	c.procs[name] = n
	c.stops = append(c.stops, func() {
		cmd.Process.Signal(syscall.SIGINT) // at once: SIGTERM would drain the node first
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-n.done
		}
		logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.nc.Request(job.NodeInfoSubject(name), nil, 200*time.Millisecond); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(c.logs[name])
			return fmt.Errorf("pcmd %s did not come up:\n%s", name, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// node is a pcmd serve process of the cluster.
type node struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed once it exited
	exited time.Time     // when it did, once done is closed
}

// bgJob is an mpirun running in the background.
type bgJob struct {
	id      string
	args    []string
	cmd     *exec.Cmd
	stdout  buffer
	stderr  buffer
	started time.Time
	ended   time.Time
	done    chan struct{}
	err     error
}

// startJob starts mpirun with args (after the program path, which args contains) on the
// cluster's NATS server as job id, with --policy none so no node moves a rank on its own.
func (c *cluster) startJob(id string, args ...string) (*bgJob, error) {
	all := append([]string{"--nats", c.url, "--job-id", id, "--policy", "none"}, args...)
	j := &bgJob{id: id, args: all, done: make(chan struct{})}
	j.cmd = exec.Command(filepath.Join(c.bin, "mpirun"), all...)
	j.cmd.Env = c.env
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	j.started = time.Now()
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		j.err = j.cmd.Wait()
		j.ended = time.Now()
		close(j.done)
	}()
	return j, nil
}

// commandLine is the job's mpirun command, for reports.
func (j *bgJob) commandLine(bin string) string {
	return shellJoin(append([]string{filepath.Join(bin, "mpirun")}, j.args...))
}

// wait waits for mpirun to end, killing it after limit, and returns its exit code.
func (j *bgJob) wait(limit time.Duration) (int, error) {
	select {
	case <-j.done:
	case <-time.After(limit):
		j.stop(syscall.SIGQUIT, 5*time.Second) // SIGQUIT: Go prints mpirun's goroutine stacks
		return -1, fmt.Errorf("job %s did not finish within %v", j.id, limit)
	}
	var ee *exec.ExitError
	if errors.As(j.err, &ee) {
		return ee.ExitCode(), nil
	}
	if j.err != nil {
		return -1, j.err
	}
	return 0, nil
}

// kill stops the job (if it runs) and waits for it.
func (j *bgJob) kill() {
	select {
	case <-j.done:
		return
	default:
	}
	j.stop(syscall.SIGTERM, 10*time.Second)
}

// stop sends mpirun sig and waits for it to end, killing it after grace.
func (j *bgJob) stop(sig syscall.Signal, grace time.Duration) {
	j.cmd.Process.Signal(sig)
	select {
	case <-j.done:
	case <-time.After(grace):
		j.cmd.Process.Kill()
		<-j.done
	}
}

// elapsed is mpirun's wall time, start to exit.
func (j *bgJob) elapsed() time.Duration { return j.ended.Sub(j.started) }

// waitMatch waits until text() matches re n times and returns the matches.
func (j *bgJob) waitMatch(text func() string, re *regexp.Regexp, n int, limit time.Duration) ([][]string, error) {
	deadline := time.Now().Add(limit)
	for {
		if m := re.FindAllStringSubmatch(text(), -1); len(m) >= n {
			return m, nil
		}
		select {
		case <-j.done:
			if m := re.FindAllStringSubmatch(text(), -1); len(m) >= n {
				return m, nil
			}
			return nil, fmt.Errorf("job %s ended before %d lines matching %q", j.id, n, re)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("job %s: no %d lines matching %q within %v", j.id, n, re, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRunning waits until mpirun takes control requests for job id (the ranks said hello).
func (c *cluster) waitRunning(ctx context.Context, id string) error {
	for {
		m, err := c.nc.Request(job.ReconfGetSubject(id), nil, time.Second)
		if err == nil && len(m.Data) > 0 {
			data, _ := c.signControl(id, job.ControlRequest{Kind: job.ControlMigrate, Rank: 1 << 20, To: "probe"})
			if r, err := c.nc.Request(job.ControlSubject(id), data, time.Second); err == nil {
				var rep job.ControlReply
				if job.Decode(r.Data, &rep) == nil && !strings.Contains(rep.Error, "not running") {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s did not start running: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// control sends a control request to job id and returns the reply.
func (c *cluster) control(id string, req job.ControlRequest) (job.ControlReply, error) {
	var rep job.ControlReply
	data, err := c.signControl(id, req)
	if err != nil {
		return rep, err
	}
	m, err := c.nc.Request(job.ControlSubject(id), data, 10*time.Second)
	if err != nil {
		return rep, fmt.Errorf("control request %+v: %w", req, err)
	}
	err = job.Decode(m.Data, &rep)
	return rep, err
}

// shellJoin quotes args for a shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$*?;&|<>()") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

// signControl encodes a control request to job id as its owner, with the job key from the
// job's record; an mpirun that writes no key (an older one) takes requests in clear.
func (c *cluster) signControl(id string, req job.ControlRequest) ([]byte, error) {
	data, err := job.Encode(req)
	if err != nil {
		return nil, err
	}
	rec, err := c.record(id)
	if err != nil {
		return nil, err
	}
	if rec.Secret == "" {
		return data, nil
	}
	w, err := rec.OwnerWrapper(time.Now())
	if err != nil {
		return nil, err
	}
	return w.Wrap(job.ControlSubject(id), data, time.Now())
}

// record reads job id's record, which mpirun writes in the cluster's runtime directory.
func (c *cluster) record(id string) (jobrecord.Record, error) {
	dir := ""
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok {
			dir = filepath.Join(v, "mpios")
		}
	}
	return jobrecord.ReadRecord(jobrecord.RecordPath(dir, id))
}
