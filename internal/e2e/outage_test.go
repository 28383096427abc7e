package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
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
