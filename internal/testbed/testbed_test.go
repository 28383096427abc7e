//go:build linux

package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

// bin holds mpirun, heat2d, pcmd and loadgen, built once for all tests.
var bin string

func TestMain(m *testing.M) {
	// The test binary doubles as a helper run inside nodes (see helperMain).
	if os.Getenv("TESTBED_HELPER") != "" || os.Getenv("MPIOS_JOB_ID") != "" {
		os.Exit(helperMain())
	}
	os.Exit(testbin.Main(m, func(dir string) { bin = dir },
		"./cmd/mpirun", "./heat2d", "./cmd/pcmd", "./internal/testbed/loadgen", "./internal/testbed/nodeexec",
		"./internal/testbed/natsd"))
}

// helperMain is the test binary started inside a node. TESTBED_HELPER=listen listens on
// TESTBED_ADDR, prints the port and greets two connections; TESTBED_HELPER=dial connects to
// TESTBED_TARGET and prints the greeting. Started as a rank (MPIOS_JOB_ID set), it prints
// where it runs: its network namespace, its cpu cgroup and MPIOS_BIND.
func helperMain() int {
	switch os.Getenv("TESTBED_HELPER") {
	case "listen":
		ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("TESTBED_ADDR"), "0"))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("port", ln.Addr().(*net.TCPAddr).Port)
		go func() { time.Sleep(time.Minute); os.Exit(3) }()
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
			c.Close()
		}
		return 0
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("TESTBED_TARGET"), 10*time.Second)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		return 0
	}
	ns, _ := os.Readlink("/proc/self/ns/net")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	cpu := ""
	for _, l := range strings.Split(string(cg), "\n") {
		// v1 "N:cpu:/path" (or "N:cpu,cpuacct:/path"); v2 "0::/path"
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (strings.Contains(","+parts[1]+",", ",cpu,") || parts[1] == "" && cpu == "") {
			cpu = parts[2]
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	fmt.Printf("netns %s cgroup %s bind %s cgroupfs %v\n", ns, cpu, os.Getenv("MPIOS_BIND"), bytes.Contains(mounts, []byte(" - cgroup")))
	return 0
}

func testOptions(t *testing.T, iso Isolation) Options {
	t.Helper()
	return Options{
		PCMD: filepath.Join(bin, "pcmd"), LoadGen: filepath.Join(bin, "loadgen"), NodeExec: filepath.Join(bin, "nodeexec"),
		NATSD:     filepath.Join(bin, "natsd"),
		Allow:     []string{filepath.Join(bin, "*")},
		Isolation: iso, Heartbeat: 250 * time.Millisecond, KillGrace: time.Second,
		WorkDir: t.TempDir(),
		Log:     log.New(testWriter{t}, "testbed: ", 0),
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and cgroups")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	if _, err := detectCgroups(); err != nil {
		t.Skipf("needs the cgroup cpu controller: %v", err)
	}
}

func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"isolation", func(o *Options) { o.Isolation = "vm" }, "isolation"},
		{"slots", func(o *Options) { o.Slots = -1 }, "slots"},
		{"relative allow", func(o *Options) { o.Allow = []string{"bin/*"} }, "absolute"},
		{"bad allow", func(o *Options) { o.Allow = []string{"/bin/["} }, "allow pattern"},
		{"period", func(o *Options) { o.CFSPeriod = time.Hour }, "CFS period"},
		{"heartbeat", func(o *Options) { o.Heartbeat = time.Microsecond }, "heartbeat"},
		{"env", func(o *Options) { o.ExtraEnv = []string{"NOEQUALS"} }, "KEY=VALUE"},
		{"node name", func(o *Options) { o.Nodes = []NodeSpec{{Name: "a.b", CPUs: 1}} }, "node name"},
		{"node cpus", func(o *Options) { o.Nodes = []NodeSpec{{Name: "a", CPUs: -1}} }, "CPUs"},
		{"twice", func(o *Options) { o.Nodes = []NodeSpec{{Name: "a"}, {Name: "a"}} }, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Log: log.New(io.Discard, "", 0)}
			tc.edit(&o)
			_, err := Start(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLoopback(t *testing.T) {
	opts := testOptions(t, IsolationLoopback)
	opts.Nodes = []NodeSpec{{"a", 0.5}, {"b", 1}}
	c := startCluster(t, opts)
	if c.Isolated() {
		t.Fatal("Isolated() = true in loopback mode")
	}
	for _, name := range []string{"a", "b"} {
		info, _, ok := c.Heartbeat(name)
		if !ok || info.Advertise != "127.0.0.1" {
			t.Fatalf("node %s: heartbeat %+v (%v), want one advertising 127.0.0.1", name, info, ok)
		}
	}
	if _, err := c.CPUUsage("a"); !errors.Is(err, ErrNotIsolated) {
		t.Fatalf("CPUUsage in loopback mode: %v, want ErrNotIsolated", err)
	}
	if err := c.SetLoad("a", 0.2); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Node("a"); n.Load != 0.2 {
		t.Fatalf("node a: load %v after SetLoad 0.2", n.Load)
	}
	if err := c.SetLoad("a", 1.5); err == nil {
		t.Fatal("SetLoad 1.5 accepted")
	}
	if err := c.SetLoad("a", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNode("a", 1); err == nil {
		t.Fatal("AddNode accepted a second node a")
	}
}

// readQuota returns a cgroup's CPU quota in CPUs (0: none).
func readQuota(t *testing.T, dir string, version int) float64 {
	t.Helper()
	var quota, period string
	if version == 2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			t.Fatalf("cpu.max: %q", b)
		}
		quota, period = f[0], f[1]
	} else {
		q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		quota, period = strings.TrimSpace(string(q)), strings.TrimSpace(string(p))
	}
	if quota == "max" || quota == "-1" {
		return 0
	}
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err := errors.Join(err1, err2); err != nil || p == 0 {
		t.Fatalf("quota %q period %q: %v", quota, period, err)
	}
	return q / p
}

// usageRate measures a node's CPU use, in CPUs, over d.
func usageRate(t *testing.T, c *Cluster, node string, d time.Duration) float64 {
	t.Helper()
	u0, err := c.CPUUsage(node)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(d)
	u1, err := c.CPUUsage(node)
	if err != nil {
		t.Fatal(err)
	}
	return (u1 - u0).Seconds() / time.Since(start).Seconds()
}

// runHelper starts the test binary on a node with the helper environment and returns its
// first output line and the command.
func runHelper(t *testing.T, c *Cluster, node string, env ...string) (string, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.Command(node, self)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper on %s: %v", node, err)
	}
	return strings.TrimSpace(line), cmd
}

func TestIsolated(t *testing.T) {
	needRoot(t)
	opts := testOptions(t, IsolationNetns)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Allow = append(opts.Allow, filepath.Join(filepath.Dir(self), "*"))
	opts.Nodes = []NodeSpec{{"a", 0.5}, {"b", 1}}
	c := startCluster(t, opts)
	if !c.Isolated() {
		t.Fatal("Isolated() = false")
	}

	t.Run("registered", func(t *testing.T) {
		seen := map[string]bool{}
		for _, n := range c.Nodes() {
			info, _, ok := c.Heartbeat(n.Name)
			if !ok || info.PID != n.PID || info.Advertise != n.Addr {
				t.Errorf("node %s: heartbeat %+v, want pid %d advertising %s", n.Name, info, n.PID, n.Addr)
			}
			if seen[n.Addr] || !strings.HasPrefix(n.Addr, "10.77.0.") {
				t.Errorf("node %s: address %s, want its own in 10.77.0.0/24", n.Name, n.Addr)
			}
			seen[n.Addr] = true
			if _, err := os.Stat("/run/netns/" + n.NetNS); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
			}
		}
		if len(seen) != 2 {
			t.Fatalf("%d nodes, want 2", len(seen))
		}
	})

	t.Run("quotas", func(t *testing.T) {
		for name, want := range map[string]float64{"a": 0.5, "b": 1} {
			n, _ := c.Node(name)
			if got := readQuota(t, n.Cgroup, n.CgroupVersion); got != want {
				t.Errorf("node %s: quota %v CPUs in %s, want %v", name, got, n.Cgroup, want)
			}
		}
	})

	t.Run("addresses reachable", func(t *testing.T) {
		a, _ := c.Node("a")
		line, listener := runHelper(t, c, "a", "TESTBED_HELPER=listen", "TESTBED_ADDR="+a.Addr)
		port, ok := strings.CutPrefix(line, "port ")
		if !ok {
			t.Fatalf("listener on a: %q", line)
		}
		target := net.JoinHostPort(a.Addr, port)
		// From the root namespace (where mpirun runs) ...
		conn, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			t.Fatalf("root namespace to node a: %v", err)
		}
		greeting, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.Contains(greeting, a.Addr) {
			t.Fatalf("greeting %q, want one from %s", greeting, a.Addr)
		}
		// ... and from node b, across the bridge.
		line, _ = runHelper(t, c, "b", "TESTBED_HELPER=dial", "TESTBED_TARGET="+target)
		if !strings.Contains(line, "hello from "+target) {
			t.Fatalf("node b to node a: %q", line)
		}
		if err := listener.Wait(); err != nil {
			t.Fatalf("listener: %v", err)
		}
	})

	t.Run("ranks inside nodes", func(t *testing.T) {
		rt := t.TempDir()
		cmd := exec.Command(filepath.Join(bin, "mpirun"), "--nats", c.NATSURL(), "--hosts", "a:1,b:1", "--tag-output", "--timeout", "60s", self)
		cmd.Env = testbin.IsolatedEnv(rt)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mpirun: %v\n%s%s", err, out, stderr.String())
		}
		for rank, name := range []string{"a", "b"} {
			n, _ := c.Node(name)
			nsLink, err := os.Readlink("/proc/" + strconv.Itoa(n.PID) + "/ns/net")
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("[%d] netns %s cgroup /%s/%s/%s bind %s cgroupfs true", rank, nsLink, CgroupName, name, subWork, n.Addr)
			if !strings.Contains(string(out), want) {
				t.Errorf("rank %d: want %q in mpirun's output:\n%s", rank, want, out)
			}
		}
	})

	t.Run("load", func(t *testing.T) {
		idle := usageRate(t, c, "a", time.Second)
		if err := c.SetLoad("a", 0.8); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		loaded := usageRate(t, c, "a", 1500*time.Millisecond)
		t.Logf("node a (0.5 CPUs): %.3f CPUs idle, %.3f CPUs with load 0.8 (expected 0.4)", idle, loaded)
		// Generous bounds: the quota caps the node at 0.5 CPUs; the load should take
		// noticeably more than an idle pcmd, even on a busy machine.
		if loaded < idle+0.1 || loaded > 0.65 {
			t.Errorf("load 0.8 on a 0.5-CPU node: %.3f CPUs (idle %.3f), want more than idle+0.1 and at most the quota", loaded, idle)
		}
		n, _ := c.Node("a")
		if got := readQuota(t, filepath.Join(n.Cgroup, subLoad), n.CgroupVersion); got < 0.39 || got > 0.41 {
			t.Errorf("load cgroup quota %v CPUs, want 0.4", got)
		}
		if err := c.SetLoad("a", 0.4); err != nil { // adjusts in place
			t.Fatal(err)
		}
		if got := readQuota(t, filepath.Join(n.Cgroup, subLoad), n.CgroupVersion); got < 0.19 || got > 0.21 {
			t.Errorf("load cgroup quota after SetLoad 0.4: %v CPUs, want 0.2", got)
		}
		if err := c.SetLoad("a", 0); err != nil {
			t.Fatal(err)
		}
		if pids := treePids(filepath.Join(n.Cgroup, subLoad)); len(pids) != 0 {
			t.Errorf("load cgroup still has processes %v after SetLoad 0", pids)
		}
	})

	t.Run("load competes with ranks", func(t *testing.T) {
		// Two busy threads in the work cgroup stand for two CPU-bound ranks.
		ranks, err := c.Command("a", filepath.Join(bin, "loadgen"), "-threads", "2", "-for", "30s")
		if err != nil {
			t.Fatal(err)
		}
		if err := ranks.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ranks.Process.Kill(); _ = ranks.Wait() }()
		if err := c.SetLoad("a", 0.8); err != nil {
			t.Fatal(err)
		}
		defer c.SetLoad("a", 0)
		time.Sleep(300 * time.Millisecond)
		c.mu.Lock()
		cg := c.nodes["a"].cg
		c.mu.Unlock()
		w0, err1 := cg.usage(subWork)
		l0, err2 := cg.usage(subLoad)
		start := time.Now()
		time.Sleep(1500 * time.Millisecond)
		w1, err3 := cg.usage(subWork)
		l1, err4 := cg.usage(subLoad)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		secs := time.Since(start).Seconds()
		work, load := (w1-w0).Seconds()/secs, (l1-l0).Seconds()/secs
		t.Logf("node a (0.5 CPUs), load 0.8 against 2 busy threads: load %.3f CPUs, work %.3f CPUs (expected 0.4 and 0.1)", load, work)
		// Generous bounds (other programs may keep this machine's CPUs busy): the "ranks" get
		// no more than the fifth of the quota the load leaves them, the load more than that.
		if work > 0.13 || load <= work || load+work > 0.6 {
			t.Errorf("load %.3f CPUs, work %.3f CPUs: want work <= 0.13 < load, sum <= 0.6", load, work)
		}
	})

	t.Run("join and leave", func(t *testing.T) {
		if err := c.AddNode("c", 0.25); err != nil {
			t.Fatal(err)
		}
		b, _ := c.Node("b")
		if err := c.RemoveNode("b"); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Node("b"); ok {
			t.Error("node b still listed after RemoveNode")
		}
		if _, err := os.Stat("/run/netns/" + b.NetNS); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace of b after RemoveNode: %v", err)
		}
		if _, err := os.Stat(b.Cgroup); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup of b after RemoveNode: %v", err)
		}
		if err := syscall.Kill(b.PID, 0); err == nil {
			t.Errorf("pcmd of b (pid %d) still runs", b.PID)
		}
		// The others keep beating: a beat newer than b's removal arrives from each (a
		// loaded machine may delay one, so wait for it rather than expect it on time).
		removed := time.Now()
		for _, name := range []string{"a", "c"} {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, at, ok := c.Heartbeat(name); ok && at.After(removed) {
					break
				}
				if time.Now().After(deadline) {
					_, at, _ := c.Heartbeat(name)
					t.Errorf("node %s: no heartbeat since b left (last %v ago)", name, time.Since(at))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		// b may come back, and gets a free address.
		if err := c.AddNode("b", 0.5); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("close leaves nothing", func(t *testing.T) {
		if err := c.SetLoad("c", 1); err != nil {
			t.Fatal(err)
		}
		nodes := c.Nodes()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if ns := testbedNetns(); len(ns) != 0 {
			t.Errorf("namespaces left: %v", ns)
		}
		if links := testbedLinks(); len(links) != 0 {
			t.Errorf("links left: %v", links)
		}
		for _, r := range c.cgRoots() {
			if _, err := os.Stat(filepath.Join(r, CgroupName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s: %v", filepath.Join(r, CgroupName), err)
			}
		}
		for _, n := range nodes {
			if err := syscall.Kill(n.PID, 0); err == nil {
				t.Errorf("pcmd of %s (pid %d) still runs", n.Name, n.PID)
			}
		}
	})
}

// cgRoots lists the cgroup hierarchies the cluster used (the detected ones once closed).
func (c *Cluster) cgRoots() []string {
	fs, err := detectCgroups()
	if err != nil {
		return nil
	}
	return fs.roots()
}

func TestCleanupRemovesLeftovers(t *testing.T) {
	needRoot(t)
	// A crashed run: a namespace, a bridge and a cgroup with a process in it, ...
	fs, err := detectCgroups()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := acquireLock(ctx, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(setupBridge(), fs.prepare(), setupNetns("stale", 7)); err != nil {
		lock.release()
		t.Fatal(err)
	}
	// and the namespace and veth of a delay router whose process died.
	r, err := startRouter()
	if err != nil {
		lock.release()
		t.Fatal(err)
	}
	if err := r.close(); err != nil {
		lock.release()
		t.Fatal(err)
	}
	if !netnsExists(routerNetns) || !linkExists(routerVeth) {
		lock.release()
		t.Fatal("the delay router left no namespace or veth to clean up")
	}
	cg := &nodeCgroup{fs: fs, name: "stale"}
	if err := cg.create(0.1, DefaultCFSPeriod); err != nil {
		lock.release()
		t.Fatal(err)
	}
	sleeper := exec.Command(filepath.Join(bin, "nodeexec"), "-cgroup", filepath.Join(cg.cpuDir(subWork), "cgroup.procs"),
		"-netns", netnsPath("stale"), "--", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		lock.release()
		t.Fatal(err)
	}
	go sleeper.Wait()
	lock.release()

	if err := Cleanup(ctx, log.New(testWriter{t}, "", 0)); err != nil {
		t.Fatal(err)
	}
	if ns := testbedNetns(); len(ns) != 0 {
		t.Errorf("namespaces left: %v", ns)
	}
	if links := testbedLinks(); len(links) != 0 {
		t.Errorf("links left: %v", links)
	}
	if _, err := os.Stat(filepath.Join(fs.cpuRoot, CgroupName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup left: %v", err)
	}
}

// TestHeat2dAcrossNodes runs heat2d with two ranks on each of two nodes and checks that the
// result is bitwise that of a local run. Isolated when possible, in loopback mode otherwise.
func TestHeat2dAcrossNodes(t *testing.T) {
	opts := testOptions(t, IsolationAuto)
	opts.Nodes = []NodeSpec{{"a", 1}, {"b", 1}}
	c := startCluster(t, opts)
	t.Logf("isolated: %v", c.Isolated())
	dir := t.TempDir()
	mpirun := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "mpirun"), args...)
		cmd.Env = testbin.IsolatedEnv(t.TempDir())
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mpirun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	heat := filepath.Join(bin, "heat2d")
	remote, local := filepath.Join(dir, "remote.bin"), filepath.Join(dir, "local.bin")
	mpirun("--nats", c.NATSURL(), "--hosts", "a:2,b:2", "--timeout", "90s", heat, "-n", "64", "-iters", "50", "-dump", remote)
	mpirun("-np", "4", "--timeout", "90s", heat, "-n", "64", "-iters", "50", "-dump", local)
	rb, err1 := os.ReadFile(remote)
	lb, err2 := os.ReadFile(local)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if len(rb) != 64*64*8 || !bytes.Equal(rb, lb) {
		t.Fatalf("dump across nodes (%d bytes) differs from the local one (%d bytes)", len(rb), len(lb))
	}
}
