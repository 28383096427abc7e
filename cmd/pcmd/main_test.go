package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
)

// bin holds the pcmd, mpirun and heat2d binaries built by TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) { bin = dir }, "./cmd/pcmd", "./cmd/mpirun", "./heat2d"))
}

// debianNATS is the nats-server of Debian's package, tested when installed.
const debianNATS = "/usr/sbin/nats-server"

// TestCluster runs two pcmd nodes against an in-process NATS server and, if installed,
// the real nats-server binary.
func TestCluster(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testCluster(t, testbin.NATSServer(t, "", "")) })
	t.Run("nats-server", func(t *testing.T) {
		if _, err := os.Stat(debianNATS); err != nil {
			t.Skipf("%s not installed", debianNATS)
		}
		testCluster(t, binaryServer(t))
	})
}

func binaryServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(debianNATS, "-a", "127.0.0.1", "-p", port)
	var out testbin.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if nc, err := nats.Connect("nats://" + addr); err == nil {
			nc.Close()
			return "nats://" + addr
		}
	}
	t.Fatalf("%s did not start:\n%s", debianNATS, out.String())
	return ""
}

// proc is a started binary.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr testbin.Buffer
	done           chan struct{}
	code           int
}

func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(bin, name), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits up to limit for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(limit):
		t.Fatalf("%v did not exit within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, limit, p.stdout.String(), p.stderr.String())
	}
	return 0
}

// run runs a binary to completion.
func run(t *testing.T, limit time.Duration, env []string, name string, args ...string) *proc {
	t.Helper()
	p := startProc(t, env, name, args...)
	p.wait(t, limit)
	return p
}

func startNode(t *testing.T, url, name string, args ...string) *proc {
	t.Helper()
	args = append([]string{"serve", "--insecure-open", "--node", name, "--nats", url, "--heartbeat", "250ms",
		"--kill-grace", "1s", "--advertise", "127.0.0.1"}, args...)
	p := startProc(t, nil, "pcmd", args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pcmd %s log:\n%s", name, p.stderr.String())
		}
	})
	return p
}

func status(t *testing.T, url string) nodestatus.Status {
	t.Helper()
	p := run(t, 10*time.Second, nil, "pcmd", "status", "--json", "--nats", url, "--wait", "300ms")
	var st nodestatus.Status
	if p.code != 0 || json.Unmarshal([]byte(p.stdout.String()), &st) != nil {
		t.Fatalf("pcmd status: exit %d\nstdout:\n%s\nstderr:\n%s", p.code, p.stdout.String(), p.stderr.String())
	}
	return st
}

// waitStatus polls pcmd status until ok accepts it.
func waitStatus(t *testing.T, url string, limit time.Duration, what string, ok func(nodestatus.Status) bool) nodestatus.Status {
	t.Helper()
	var st nodestatus.Status
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		if st = status(t, url); ok(st) {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("status never showed %s; last: %+v", what, st)
	return st
}

func nodeOf(st nodestatus.Status, name string) (nodestatus.NodeStatus, bool) {
	for _, n := range st.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return nodestatus.NodeStatus{}, false
}

var (
	refOnce sync.Once
	refDump []byte
)

// reference is the heat2d dump of a plain local run, computed once.
func reference(t *testing.T) []byte {
	refOnce.Do(func() {
		path := filepath.Join(bin, "local.bin")
		p := run(t, 60*time.Second, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "mpirun",
			"-np", "4", filepath.Join(bin, "heat2d"), "-n", "67", "-iters", "50", "-dump", path)
		if p.code != 0 {
			t.Fatalf("local mpirun: exit %d\n%s", p.code, p.stderr.String())
		}
		refDump, _ = os.ReadFile(path)
	})
	if len(refDump) != 67*67*8 {
		t.Fatalf("local reference dump has %d bytes", len(refDump))
	}
	return refDump
}

func testCluster(t *testing.T, url string) {
	dir := t.TempDir()
	heat2d := filepath.Join(bin, "heat2d")
	n1 := startNode(t, url, "n1", "--slots", "2", "--allow", heat2d)
	n2 := startNode(t, url, "n2", "--slots", "2", "--allow", heat2d, "--store", filepath.Join(dir, "store2"))
	mpienv := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}

	// Registration: both nodes alive with their slots, pids and address.
	st := waitStatus(t, url, 10*time.Second, "n1 and n2 alive", func(st nodestatus.Status) bool {
		a, ok1 := nodeOf(st, "n1")
		b, ok2 := nodeOf(st, "n2")
		return ok1 && ok2 && a.State == nodestatus.StateAlive && b.State == nodestatus.StateAlive
	})
	for _, n := range st.Nodes {
		want := map[string]int{"n1": n1.cmd.Process.Pid, "n2": n2.cmd.Process.Pid}[n.Name]
		if n.Slots != 2 || n.Used != 0 || n.PID != want || n.Advertise != "127.0.0.1" || n.Version == "" {
			t.Errorf("node %+v, want 2 free slots, pid %d", n, want)
		}
	}
	// Their IOS agents become neighbours through the heartbeats and sample this machine.
	waitStatus(t, url, 15*time.Second, "the IOS agents of n1 and n2 as neighbours", func(st nodestatus.Status) bool {
		a, _ := nodeOf(st, "n1")
		b, _ := nodeOf(st, "n2")
		return a.IOS != nil && b.IOS != nil && len(a.IOS.Peers) == 1 && a.IOS.Peers[0] == "n2" &&
			len(b.IOS.Peers) == 1 && b.IOS.EffectiveCPUs > 0 && a.IOS.Policy == "mpiios"
	})
	if !strings.Contains(n1.stderr.String(), "runs programs matching "+heat2d) {
		t.Errorf("n1 does not state its --allow policy:\n%s", n1.stderr.String())
	}

	// Hostile spawn requests are refused, and the node survives them.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	refusals := map[string]string{
		"/bin/sh":      "pcmd: node n1 refuses to run /bin/sh: not allowed by --allow",
		"../../bin/sh": "pcmd: node n1 refuses to run ../../bin/sh: not an absolute path",
		bin + strings.Repeat("/..", strings.Count(bin, "/")) + "/bin/sh": "refuses to run /bin/sh (given as",
		heat2d + "/../../../bin/sh":                                      "not allowed by --allow",
	}
	for path, want := range refusals {
		data, _ := job.Encode(job.SpawnRequest{Job: "evil", Rank: 0, Path: path})
		if rep := spawnReply(t, nc, data); rep.Refusal != job.RefuseNotAllowed || !strings.Contains(rep.Error, want) {
			t.Errorf("spawn %s: %+v, want %q", path, rep, want)
		}
	}
	for _, garbage := range [][]byte{[]byte("\xc1\xc1\xc1"), []byte("\x92\x01"), bytes.Repeat([]byte{0xdc, 0xff, 0xff}, 100), {}} {
		if rep := spawnReply(t, nc, garbage); rep.Refusal != job.RefuseInvalid {
			t.Errorf("garbage %q: %+v", garbage, rep)
		}
	}
	select {
	case <-n1.done:
		t.Fatalf("pcmd n1 died of bad requests:\n%s", n1.stderr.String())
	default:
	}
	if _, err := nc.Request(job.NodeInfoSubject("n1"), nil, 2*time.Second); err != nil {
		t.Fatalf("n1 no longer answers after bad requests: %v", err)
	}

	// A job over both nodes computes exactly what a local run does.
	remote := filepath.Join(dir, "remote.bin")
	p := run(t, 60*time.Second, mpienv, "mpirun", "--nats", url, "--hosts", "n1:2,n2:2",
		heat2d, "-n", "67", "-iters", "50", "-dump", remote)
	if p.code != 0 || !strings.Contains(p.stdout.String(), "checksum ") {
		t.Fatalf("remote mpirun: exit %d\nstdout:\n%s\nstderr:\n%s", p.code, p.stdout.String(), p.stderr.String())
	}
	if got, err := os.ReadFile(remote); err != nil || !bytes.Equal(got, reference(t)) {
		t.Errorf("remote dump (%d bytes, %v) differs from the local one", len(got), err)
	}
	for _, n := range []*proc{n1, n2} {
		if c := strings.Count(n.stderr.String(), "exited with status 0"); c != 2 {
			t.Errorf("node ran %d ranks to success, want 2:\n%s", c, n.stderr.String())
		}
	}

	// Status without --nats finds the server through the newest mpirun record.
	rt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rt, "mpios"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(jobrecord.Record{JobID: "fake-job", NATSURL: url, PID: os.Getpid(), Started: time.Now()})
	if err := os.WriteFile(filepath.Join(rt, "mpios", "fake-job.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	p = run(t, 10*time.Second, []string{"XDG_RUNTIME_DIR=" + rt}, "pcmd", "status")
	if p.code != 0 || !strings.Contains(p.stderr.String(), "pcmd: using NATS "+url+" of mpirun job fake-job (pid "+strconv.Itoa(os.Getpid())) ||
		!strings.Contains(p.stdout.String(), "n2    alive  0/2") {
		t.Errorf("status via record: exit %d\nstdout:\n%s\nstderr:\n%s", p.code, p.stdout.String(), p.stderr.String())
	}

	// Killing a node fails the job running on it, promptly and clearly.
	long := startProc(t, mpienv, "mpirun", "--nats", url, "--hosts", "n1:2,n2:2",
		heat2d, "-n", "300", "-iters", "100000000")
	st = waitStatus(t, url, 20*time.Second, "4 ranks running", func(st nodestatus.Status) bool { return len(st.Ranks) == 4 })
	var n1pids []int
	for _, r := range st.Ranks {
		if r.Node == "n1" {
			n1pids = append(n1pids, r.PID)
		}
	}
	killed := time.Now()
	if err := n1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := long.wait(t, 15*time.Second); code == 0 || !strings.Contains(long.stderr.String(), "mpirun: node n1 stopped responding") {
		t.Errorf("job on a killed node: exit %d after %v\nstderr:\n%s", code, time.Since(killed), long.stderr.String())
	}
	t.Logf("job failed %v after its node was killed", time.Since(killed))
	waitStatus(t, url, 5*time.Second, "n1 gone", func(st nodestatus.Status) bool {
		n, ok := nodeOf(st, "n1")
		return ok && n.State == nodestatus.StateGone && n.LastBeat >= 0.75
	})
	for _, pid := range n1pids {
		if running(pid, 2*time.Second) {
			t.Errorf("rank pid %d survived its pcmd", pid)
		}
	}

	// mpirun refuses to place ranks on the gone node, which its peer n2 still remembers.
	p = run(t, 30*time.Second, mpienv, "mpirun", "--nats", url, "--hosts", "n1,n2", heat2d)
	if p.code != 1 || !strings.Contains(p.stderr.String(), "mpirun: node n1 does not answer, its last heartbeat was ") {
		t.Errorf("mpirun on a gone node: exit %d\nstderr:\n%s", p.code, p.stderr.String())
	}

	// SIGTERM: pcmd exits cleanly and deregisters.
	if err := n2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := n2.wait(t, 10*time.Second); code != 0 || !strings.Contains(n2.stderr.String(), "node n2 down") {
		t.Errorf("pcmd n2 after SIGTERM: exit %d\n%s", code, n2.stderr.String())
	}
	if _, ok := nodeOf(status(t, url), "n2"); ok {
		t.Error("n2 is still listed after it deregistered")
	}
}

// running reports whether pid is still running (not a zombie) after up to limit: the ranks
// of a killed pcmd are orphans, which the container's init may not reap.
func running(pid int, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the parenthesized command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
	}
}

func spawnReply(t *testing.T, nc *nats.Conn, data []byte) job.SpawnReply {
	t.Helper()
	m, err := nc.Request(job.NodeSpawnSubject("n1"), data, 5*time.Second)
	if err != nil {
		t.Fatalf("spawn request: %v", err)
	}
	var rep job.SpawnReply
	testbin.NodeAnswer(t, m, &rep)
	return rep
}

// TestFrozenNode: a node whose pcmd hangs (SIGSTOP: its NATS subscriptions stay, but it
// stops beating) is declared gone after 3 missed heartbeats, failing the job.
func TestFrozenNode(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	heat2d := filepath.Join(bin, "heat2d")
	n1 := startNode(t, url, "n1", "--slots", "1", "--allow", heat2d)
	startNode(t, url, "n2", "--slots", "1", "--allow", heat2d)
	waitStatus(t, url, 10*time.Second, "2 nodes", func(st nodestatus.Status) bool { return len(st.Nodes) == 2 })
	long := startProc(t, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "mpirun", "--nats", url, "--hosts", "n1,n2",
		heat2d, "-n", "200", "-iters", "100000000")
	waitStatus(t, url, 20*time.Second, "2 ranks running", func(st nodestatus.Status) bool { return len(st.Ranks) == 2 })
	if err := n1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n1.cmd.Process.Signal(syscall.SIGCONT) })
	frozen := time.Now()
	code := long.wait(t, 15*time.Second)
	took := time.Since(frozen)
	if code == 0 || !strings.Contains(long.stderr.String(), "mpirun: node n1 stopped responding (no heartbeat for") {
		t.Errorf("job on a frozen node: exit %d\nstderr:\n%s", code, long.stderr.String())
	}
	// The last beat came up to one period before the freeze; the silence is what counts.
	if m := regexp.MustCompile(`no heartbeat for (\S+)\)`).FindStringSubmatch(long.stderr.String()); m != nil {
		if silent, err := time.ParseDuration(m[1]); err != nil || silent < 750*time.Millisecond {
			t.Errorf("node declared gone after %s without heartbeat, before 3 of them (750ms) were missed", m[1])
		}
	}
	t.Logf("job failed %v after its node froze", took)
}

// TestKilledNodesMemoryIsReclaimed: the memory store of a pcmd killed with SIGKILL outlives
// it; the next pcmd with a memory store started on the machine removes it and says so,
// and leaves the store of a live pcmd alone.
func TestKilledNodesMemoryIsReclaimed(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	// /dev/shm is the machine's: names of this run's own.
	tag := fmt.Sprintf("reclaim%d-", os.Getpid())
	storeOf := func(p *proc) string {
		t.Helper()
		m := waitLog(t, p, 20*time.Second, regexp.MustCompile(`checkpoints in memory \((\S+), cap`))
		return m[1]
	}
	live := startNode(t, url, tag+"live", "--ckpt-store", "mem")
	liveDir := storeOf(live)
	killed := startNode(t, url, tag+"killed", "--ckpt-store", "mem")
	killedDir := storeOf(killed)
	if err := os.WriteFile(filepath.Join(killedDir, "piece"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.wait(t, 10*time.Second)
	if _, err := os.Stat(killedDir); err != nil {
		t.Fatalf("store of the killed pcmd: %v; want it left behind", err)
	}

	next := startNode(t, url, tag+"next", "--ckpt-store", "mem")
	nextDir := storeOf(next)
	m := waitLog(t, next, 20*time.Second, regexp.MustCompile(`reclaimed (\d+) bytes of memory stores left by dead pcmds: (.*)`))
	if n, _ := strconv.ParseInt(m[1], 10, 64); n < 1<<20 || !slices.Contains(strings.Fields(m[2]), killedDir) {
		t.Fatalf("reclaimed %s bytes of %s; want at least the %d of %s", m[1], m[2], 1<<20, killedDir)
	}
	if _, err := os.Stat(killedDir); !os.IsNotExist(err) {
		t.Fatalf("store of the killed pcmd after the next start: %v; want it gone", err)
	}
	for _, dir := range []string{liveDir, nextDir} {
		if _, err := os.Stat(filepath.Join(dir, ".owner")); err != nil {
			t.Errorf("store of a live pcmd: %v", err)
		}
	}
	// A pcmd that stops removes its store itself.
	for _, p := range []*proc{live, next} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%v after SIGTERM: exit %d\n%s", p.cmd.Args, code, p.stderr.String())
		}
	}
	for _, dir := range []string{liveDir, nextDir} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("store of a stopped pcmd: %v; want it gone", err)
		}
	}
}

// waitLog waits up to limit for a line of p's log that matches re and returns its
// submatches.
func waitLog(t *testing.T, p *proc, limit time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			return m
		}
	}
	t.Fatalf("%v logged no %q within %v:\n%s", p.cmd.Args, re, limit, p.stderr.String())
	return nil
}

// TestMpirunHostsErrors: placement problems stop mpirun before anything starts.
func TestMpirunHostsErrors(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	n := startNode(t, url, "n1", "--slots", "1", "--allow", filepath.Join(bin, "heat2d"))
	waitStatus(t, url, 10*time.Second, "n1", func(st nodestatus.Status) bool { return len(st.Nodes) == 1 })
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
	heat2d := filepath.Join(bin, "heat2d")
	hostfile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostfile, []byte("# test\nn1:1\nn7 # not running\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--nats", url, "--hosts", "n1:2", heat2d}, 1, "node n1 has 1 free slots (1 total, 0 in use), --hosts asks for 2"},
		{[]string{"--nats", url, "--hosts", "n1", "-np", "3", heat2d}, 1, "3 ranks requested, the hosts offer 1 slots"},
		{[]string{"--nats", url, "--hostfile", hostfile, heat2d}, 1, "node n7: no pcmd serves it"},
		{[]string{"--hosts", "n1", heat2d}, 2, "--hosts and --hostfile need --nats URL"},
		{[]string{"--nats", url, "--hosts", "n1:x", heat2d}, 2, "--hosts: host \"n1:x\""},
		{[]string{"--nats", url, "--hosts", "n1", "/bin/sh", "-c", "true"}, 1, "cannot start rank 0: pcmd: node n1 refuses to run /bin/sh: not allowed by --allow"},
	}
	for _, c := range cases {
		p := run(t, 30*time.Second, env, "mpirun", c.args...)
		if p.code != c.code || !strings.Contains(p.stderr.String(), c.want) {
			t.Errorf("mpirun %q: exit %d, want %d and %q\nstderr:\n%s", c.args, p.code, c.code, c.want, p.stderr.String())
		}
	}
	if strings.Contains(n.stderr.String(), "started") {
		t.Errorf("a rank was started:\n%s", n.stderr.String())
	}
}

// TestDrainMovesAJobAway: "pcmd drain" of the node a job runs on moves the job's ranks to
// the node with free slots; the job's result is bitwise that of an undisturbed run, the
// drained node takes no new ranks meanwhile and its pcmd exits once its ranks left, which
// "pcmd drain --wait" waits for.
func TestDrainMovesAJobAway(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	heat2d := filepath.Join(bin, "heat2d")
	dir := t.TempDir()
	n1 := startNode(t, url, "n1", "--slots", "2", "--allow", heat2d, "--store", filepath.Join(dir, "s1"), "--no-ios")
	startNode(t, url, "n2", "--slots", "2", "--allow", heat2d, "--store", filepath.Join(dir, "s2"), "--no-ios")
	waitStatus(t, url, 10*time.Second, "n1 and n2", func(st nodestatus.Status) bool { return len(st.Nodes) == 2 })
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir(), "MPIOS_CKPT_POLL=20"}
	args := []string{heat2d, "-n", "96", "-iters", "2000"}
	ref := filepath.Join(dir, "ref.bin")
	if p := run(t, 120*time.Second, env, "mpirun", append(append([]string{"-np", "2"}, args...), "-dump", ref)...); p.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", p.code, p.stderr.String())
	}
	out := filepath.Join(dir, "out.bin")
	j := startProc(t, env, "mpirun", append(append([]string{"--nats", url, "--hosts", "n1:2"}, args...), "-dump", out, "-pace", "2ms")...)
	waitStatus(t, url, 20*time.Second, "2 ranks on n1", func(st nodestatus.Status) bool { return len(st.Ranks) == 2 })
	// The job refuses migrations until its ranks have said hello; the node stays draining
	// and plans again by itself, which --wait waits for.
	d := run(t, 90*time.Second, nil, "pcmd", "drain", "--node", "n1", "--nats", url, "--reason", "test", "--wait", "60s")
	if d.code != 0 || !strings.Contains(d.stdout.String(), "job ") || !strings.Contains(d.stdout.String(), "ranks [0 1] to n2: ") ||
		!strings.HasSuffix(d.stdout.String(), "node n1 has left\n") {
		t.Fatalf("pcmd drain --wait: exit %d\nstdout:\n%s\nstderr:\n%s\nmpirun:\n%s", d.code, d.stdout.String(), d.stderr.String(), j.stderr.String())
	}
	// --wait returned once the node had left: its pcmd has exited.
	if code := n1.wait(t, time.Second); code != 0 || !strings.Contains(n1.stderr.String(), "drained: no rank left, shutting down") {
		t.Errorf("drained pcmd n1: exit %d\n%s", code, n1.stderr.String())
	}
	if code := j.wait(t, 120*time.Second); code != 0 {
		t.Fatalf("mpirun: exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	want, _ := os.ReadFile(ref)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) || len(want) == 0 {
		t.Errorf("the drained job's result (%d bytes, %v) differs from an undisturbed run's (%d bytes)\nmpirun:\n%s",
			len(got), err, len(want), j.stderr.String())
	}
	if n := strings.Count(j.stderr.String(), "mpirun: migrated rank"); n != 2 {
		t.Errorf("%d migrations reported, want 2:\n%s", n, j.stderr.String())
	}
}

// TestCommandLine: usage mistakes exit 2 with one clear line.
func TestCommandLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cases := map[string][]string{
		"missing command":                          {},
		"unknown command \"bogus\"":                {"bogus"},
		"serve: missing --nats URL":                {"serve", "--node", "n1"},
		"migrate: missing --to":                    {"migrate", "--job", "j", "--rank", "1"},
		"checkpoint: missing --job":                {"checkpoint", "--nats", "nats://127.0.0.1:1"},
		"a NATS user needs a password":             {"status", "--nats", "nats://127.0.0.1:1", "--nats-user", "u"},
		"--job: id \"a.b\"":                        {"checkpoint", "--job", "a.b", "--nats", "nats://127.0.0.1:1"},
		"--slots 0: want at least 1":               {"serve", "--nats", "nats://x", "--slots", "0"},
		"--copy-nice 20: want 0 to 19":             {"serve", "--nats", "nats://x", "--copy-nice", "20"},
		"flag provided but not defined: -bogus":    {"status", "--bogus"},
		"--policy: unknown policy \"roundrobin\"":  {"serve", "--nats", "nats://x", "--policy", "roundrobin"},
		"--steal-threshold 2: want more than 0":    {"serve", "--nats", "nats://x", "--steal-threshold", "2"},
		"--steal-ttl 0: want 1 to 64":              {"serve", "--nats", "nats://x", "--steal-ttl", "0"},
		"--ios-period and --ios-cooldown must be":  {"serve", "--nats", "nats://x", "--ios-period", "0s"},
		"drain: unexpected argument \"n1\"":        {"drain", "n1"},
		"--weights: weight \"0\": want a positive": {"resize", "--job", "j", "--np", "2", "--weights", "1,0", "--nats", "nats://x"},
		"resize: 2 weights for 3 ranks":            {"resize", "--job", "j", "--np", "3", "--weights", "1,2", "--nats", "nats://x"},
		"--node: node name \"a.b\"":                {"drain", "--node", "a.b", "--nats", "nats://x"},
		"--wait -1s: want 0 or more":               {"drain", "--wait", "-1s", "--nats", "nats://x"},
	}
	for want, args := range cases {
		stdout.Reset()
		stderr.Reset()
		code := run2(args, &stdout, &stderr)
		if code != statusUsage || !strings.Contains(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("pcmd %q: exit %d, stderr %q; want status 2 and one line with %q", args, code, stderr.String(), want)
		}
	}
	stdout.Reset()
	if code := run2([]string{"--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "pcmd serve --node NAME") {
		t.Errorf("--help: exit %d\n%s", code, stdout.String())
	}
}

// run2 runs pcmd in-process.
func run2(args []string, stdout, stderr *bytes.Buffer) int {
	return runMain(context.Background(), append([]string{"pcmd"}, args...), stdout, stderr)
}
