//go:build linux

package testbed

import (
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// inNetns runs fn on a thread that entered network namespace ns: sockets fn creates live
// there. The thread goes back to its own namespace afterwards: a thread left in ns could be
// the process's main thread, which Go never ends, and the whole test process would then count
// as one of ns's processes (and be killed with them). If going back fails the thread stays
// locked and dies with its goroutine.
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	if err := inNetnsDo("/run/netns/"+ns, func() error { fn(); return nil }); err != nil {
		t.Fatalf("enter %s: %v", ns, err)
	}
}

// send copies size bytes from node from to node to over TCP and returns how long until
// the receiver had them all.
func send(t *testing.T, c *Cluster, from, to string, size int) time.Duration {
	t.Helper()
	var ln net.Listener
	var err error
	addr := ""
	for _, n := range c.Nodes() {
		if n.Name == to {
			addr = n.Addr
		}
	}
	inNetns(t, netnsName(to), func() { ln, err = net.Listen("tcp", addr+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer conn.Close()
		n, _ := io.Copy(io.Discard, conn)
		got <- n
	}()
	var conn net.Conn
	inNetns(t, netnsName(from), func() { conn, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	if n := <-got; n != int64(size) {
		t.Fatalf("%s -> %s: received %d of %d bytes", from, to, n, size)
	}
	return time.Since(began)
}

func tcShow(t *testing.T, node string) string {
	t.Helper()
	out, err := exec.Command("tc", "-n", netnsName(node), "qdisc", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("tc qdisc show: %v: %s", err, out)
	}
	return string(out)
}

// Two groups of nodes become two "clusters": what a node of one sends to a node of the
// other is limited to the link's rate, inside a group it is not shaped; a delay is made by
// netem, or without it by the delay router.
func TestSetLinkShapesTrafficBetweenGroups(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs the tc command (iproute2)")
	}
	opts := testOptions(t, IsolationNetns)
	opts.Nodes = []NodeSpec{{"la", 0.5}, {"lb", 0.5}, {"lc", 0.5}}
	c := startCluster(t, opts)

	const rate = 64 << 10
	if err := c.SetLink([]string{"la"}, []string{"lb", "lc"}, Link{RateBytes: rate}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"la", "lb", "lc"} {
		if !strings.Contains(tcShow(t, n), "htb") {
			t.Errorf("node %s is not shaped:\n%s", n, tcShow(t, n))
		}
	}
	// 256 KiB at 64 KiB/s cannot arrive in less than about 4 s (less htb's small burst); a
	// busy machine only makes it slower.
	const size = 256 << 10
	if d := send(t, c, "la", "lb", size); d < 3*time.Second {
		t.Errorf("la -> lb: %d bytes in %v, faster than the link's %d B/s", size, d, rate)
	}
	t.Logf("inside the group, lb -> lc: %d bytes in %v", size, send(t, c, "lb", "lc", size))

	err := c.SetLink([]string{"la"}, []string{"lb"}, Link{RateBytes: rate, Delay: 20 * time.Millisecond})
	switch {
	case errors.Is(err, ErrNoNetem):
		t.Logf("no netem on this kernel: %v", err)
	case err != nil:
		t.Fatal(err)
	case c.router != nil:
		if r := routesVia(t, "la"); !strings.Contains(r, nodeAddr(t, c, "lb")) {
			t.Errorf("delay set without netem but la does not route lb via the delay router:\n%s", r)
		}
	default:
		if !strings.Contains(tcShow(t, "la"), "netem") {
			t.Errorf("delay set but no netem qdisc:\n%s", tcShow(t, "la"))
		}
	}
	if err := c.SetLink([]string{"la"}, []string{"lb"}, Link{Delay: -time.Second}); err == nil {
		t.Error("negative delay accepted")
	}
	if err := c.SetLink([]string{"la"}, []string{"la"}, Link{RateBytes: 1}); err == nil {
		t.Error("a node in both groups accepted")
	}

	// The zero link removes the shaping.
	if err := c.SetLink([]string{"la"}, []string{"lb", "lc"}, Link{}); err != nil {
		t.Fatal(err)
	}
	if s := tcShow(t, "la"); strings.Contains(s, "htb") {
		t.Errorf("la still shaped:\n%s", s)
	}
	// A removed node's peers lose their filters for it.
	if err := c.SetLink([]string{"la"}, []string{"lc"}, Link{RateBytes: rate}); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveNode("lc"); err != nil {
		t.Fatal(err)
	}
	if s := tcShow(t, "la"); strings.Contains(s, "htb") {
		t.Errorf("la still shaped after its only linked peer left:\n%s", s)
	}
}
