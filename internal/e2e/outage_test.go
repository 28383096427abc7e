package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// restartableNATS is an in-process NATS server on a fixed loopback port, which a test can
// stop and start again: a control-plane outage.
type restartableNATS struct {
	t    *testing.T
	port int
	srv  *natsserver.Server
}

func newRestartableNATS(t *testing.T) *restartableNATS {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &restartableNATS{t: t, port: l.Addr().(*net.TCPAddr).Port}
	l.Close()
	n.start()
	t.Cleanup(func() {
		if n.srv != nil {
			n.srv.Shutdown()
		}
	})
	return n
}

func (n *restartableNATS) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

func (n *restartableNATS) start() {
	n.t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true})
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("NATS server not ready")
	}
	n.srv = srv
}

func (n *restartableNATS) stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// TestNATSOutageDoesNotStopAMultiNodeJob: the control plane going away for a few seconds
// under a running job on two pcmd nodes leaves ranks, nodes and mpirun waiting for it to
// come back; the job finishes with the result of an undisturbed run.
func TestNATSOutageDoesNotStopAMultiNodeJob(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "2500"}
	want := referenceDump(t, args...)
	ns := newRestartableNATS(t)
	c := newClusterAt(t, ns.url(), "n1", "n2")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "outage", nil, "--hosts", "n1:2,n2:2", prog("heat2d"), "-n", "48", "-iters", "2500", "-dump", dump, "-pace", "2ms")
	c.waitRunning(t, "outage")
	ns.stop()
	time.Sleep(4 * time.Second) // the outage
	ns.start()
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d after a 4 s NATS outage\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}

// TestNATSOutageLosesNoOutputNorExit: ranks that print through a NATS outage and end while
// it lasts. NATS drops what a node publishes before mpirun has reconnected; pcmd keeps each
// rank's latest output and its exit, and mpirun asks for them again (job.NodeReplaySubject):
// the job ends well and prints every line once. Without that, mpirun reported the ranks'
// exits lost and failed the job.
func TestNATSOutageLosesNoOutputNorExit(t *testing.T) {
	const lines = 30
	ns := newRestartableNATS(t)
	c := newClusterAt(t, ns.url(), "n1", "n2")
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "rank $MPIOS_RANK line $i"; sleep 0.1; done`, lines)
	// failsucc runs the shell as the rank (pcmd allows only the test binaries).
	j := c.start(t, "quiet", nil, "--hosts", "n1:2,n2:2", prog("failsucc"), "exit-at-start", "/bin/sh", "-c", script)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(j.stdout.String(), " line ") < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("no output within 30 s\nstderr:\n%s", j.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ns.stop()
	time.Sleep(time.Duration(lines) * 100 * time.Millisecond * 3 / 2) // the ranks end meanwhile
	ns.start()
	if code := j.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after a NATS outage\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	out := j.stdout.String()
	for r := range 4 {
		for i := 1; i <= lines; i++ {
			if n := strings.Count(out, fmt.Sprintf("rank %d line %d\n", r, i)); n != 1 {
				t.Errorf("rank %d line %d printed %d times", r, i, n)
			}
		}
	}
}

// natsCluster is three of Debian's nats-server clustered on loopback.
type natsCluster struct {
	urls     []string
	monitors []string // each server's monitoring endpoint
	procs    []*exec.Cmd
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func startNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	if _, err := os.Stat(debianNATS); err != nil {
		t.Skipf("%s not installed", debianNATS)
	}
	ports := freePorts(t, 9)
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	nc := &natsCluster{}
	for i := range 3 {
		cmd := exec.Command(debianNATS, "-a", "127.0.0.1", "-p", fmt.Sprint(ports[i]), "-m", fmt.Sprint(ports[6+i]),
			"--cluster_name", "mpios", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		nc.procs = append(nc.procs, cmd)
		nc.urls = append(nc.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		nc.monitors = append(nc.monitors, fmt.Sprintf("http://127.0.0.1:%d/varz", ports[6+i]))
	}
	// The cluster is formed when a message published on one server reaches the others.
	deadline := time.Now().Add(20 * time.Second)
	for !nc.routed() {
		if time.Now().After(deadline) {
			t.Fatal("the three nats-servers did not form a cluster within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nc
}

// busiest returns the server with the most client connections: killing it disturbs the
// most processes.
func (c *natsCluster) busiest(t *testing.T) int {
	t.Helper()
	best, most := 0, -1
	for i, u := range c.monitors {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var varz struct {
			Connections int `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&varz)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if varz.Connections > most {
			best, most = i, varz.Connections
		}
	}
	t.Logf("killing NATS server %d, which serves %d connections", best, most)
	return best
}

func (c *natsCluster) routed() bool {
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for _, u := range c.urls {
		nc, err := nats.Connect(u)
		if err != nil {
			return false
		}
		conns = append(conns, nc)
	}
	for i, sub := range conns {
		s, err := sub.SubscribeSync("probe." + fmt.Sprint(i))
		if err != nil || sub.Flush() != nil {
			return false
		}
		for j, pub := range conns {
			if j == i {
				continue
			}
			pub.Publish("probe."+fmt.Sprint(i), nil)
			pub.Flush()
			if _, err := s.NextMsg(300 * time.Millisecond); err != nil {
				return false
			}
		}
	}
	return true
}

// TestKillingOneServerOfANATSClusterDoesNotDisturbTheJob: on a three-server NATS cluster,
// with every process given the three URLs, a server killed mid-job moves its clients to the
// others; the job finishes with the result of an undisturbed run.
func TestKillingOneServerOfANATSClusterDoesNotDisturbTheJob(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "2500"}
	want := referenceDump(t, args...)
	ns := startNATSCluster(t)
	c := newClusterAt(t, strings.Join(ns.urls, ","), "n1", "n2")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "clustered", nil, "--hosts", "n1:2,n2:2", prog("heat2d"), "-n", "48", "-iters", "2500", "-dump", dump, "-pace", "2ms")
	c.waitRunning(t, "clustered")
	ns.procs[ns.busiest(t)].Process.Kill()
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d after a NATS server was killed\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}
