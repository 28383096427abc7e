//go:build linux

package testbed

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// nodeAddr is node name's address in c.
func nodeAddr(t *testing.T, c *Cluster, name string) string {
	t.Helper()
	n, ok := c.Node(name)
	if !ok {
		t.Fatalf("no node %s", name)
	}
	return n.Addr
}

// roundTrips echoes one byte rounds times over one TCP connection from node from to node
// to, and returns each round trip.
func roundTrips(t *testing.T, c *Cluster, from, to string, rounds int) []time.Duration {
	t.Helper()
	var ln net.Listener
	var err error
	inNetns(t, netnsName(to), func() { ln, err = net.Listen("tcp", nodeAddr(t, c, to)+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, conn)
	}()
	var conn net.Conn
	inNetns(t, netnsName(from), func() { conn, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var rtts []time.Duration
	b := []byte{0}
	for i := 0; i < rounds; i++ {
		began := time.Now()
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(began))
	}
	return rtts
}

func routesVia(t *testing.T, node string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", netnsName(node), "route", "show", "proto", routeProto).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// Without netem, a delayed link between two groups runs through the userspace delay
// router: a TCP round trip between the groups takes at least twice the one-way delay,
// traffic inside a group never passes the router, the router reorders nothing, and Close
// removes it with the cluster.
func TestDelayRouterDelaysTrafficBetweenGroups(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs the tc command (iproute2)")
	}
	opts := testOptions(t, IsolationNetns)
	opts.UserspaceDelay = true // the router even where netem exists
	opts.Nodes = []NodeSpec{{"ra", 0.5}, {"rb", 0.5}, {"rc", 0.5}}
	c := startCluster(t, opts)

	const delay = 20 * time.Millisecond
	if err := c.SetLink([]string{"ra", "rb"}, []string{"rc"}, Link{Delay: delay}); err != nil {
		t.Fatal(err)
	}
	if c.router == nil {
		t.Fatal("no delay router after a delayed SetLink with UserspaceDelay")
	}
	across := roundTrips(t, c, "ra", "rc", 5)
	t.Logf("across the link, ra <-> rc: %v", across)
	for _, rtt := range across {
		if rtt < 2*delay {
			t.Errorf("ra <-> rc: round trip %v, less than twice the %v one-way delay", rtt, delay)
		}
	}
	// rc -> rb crosses too, from the other side.
	for _, rtt := range roundTrips(t, c, "rc", "rb", 3) {
		if rtt < 2*delay {
			t.Errorf("rc <-> rb: round trip %v, less than twice the %v one-way delay", rtt, delay)
		}
	}
	flowOf := func(a, b string) flow {
		return flow{netip.MustParseAddr(nodeAddr(t, c, a)), netip.MustParseAddr(nodeAddr(t, c, b))}
	}
	inside := roundTrips(t, c, "ra", "rb", 5)
	t.Logf("inside the group, ra <-> rb: %v", inside)
	if n := c.router.routed(flowOf("ra", "rb")) + c.router.routed(flowOf("rb", "ra")); n != 0 {
		t.Errorf("%d packets between ra and rb (one group) passed the delay router", n)
	}
	if c.router.routed(flowOf("ra", "rc")) == 0 || c.router.routed(flowOf("rc", "ra")) == 0 {
		t.Error("no packet between ra and rc passed the delay router")
	}

	// Datagrams numbered in order arrive in order, also when the delay shrinks while
	// some are in flight (which would let later ones overtake).
	var ln net.PacketConn
	var err error
	inNetns(t, netnsName("rc"), func() { ln, err = net.ListenPacket("udp", nodeAddr(t, c, "rc")+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got []uint32
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			_ = ln.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			if n == 4 {
				got = append(got, binary.BigEndian.Uint32(buf))
			}
		}
	})
	var conn net.Conn
	inNetns(t, netnsName("ra"), func() { conn, err = net.Dial("udp", ln.LocalAddr().String()) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const datagrams = 600
	for i := uint32(0); i < datagrams; i++ {
		if i == datagrams/2 {
			if err := c.SetLink([]string{"ra", "rb"}, []string{"rc"}, Link{Delay: time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = conn.Write(binary.BigEndian.AppendUint32(nil, i))
		time.Sleep(100 * time.Microsecond) // pacing, so the receiver's buffer does not overflow
	}
	wg.Wait()
	if len(got) < datagrams/2 {
		t.Errorf("only %d of %d datagrams arrived", len(got), datagrams)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("datagram %d arrived after %d: reordered", got[i], got[i-1])
		}
	}

	// The zero link removes the routes via the router.
	if err := c.SetLink([]string{"ra", "rb"}, []string{"rc"}, Link{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ra", "rb", "rc"} {
		if r := routesVia(t, n); r != "" {
			t.Errorf("node %s still routes via the delay router:\n%s", n, r)
		}
	}

	r := c.router
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	default:
		t.Error("router not stopped by Close")
	}
	if netnsExists(routerNetns) || linkExists(routerVeth) {
		t.Errorf("router namespace or veth left after Close: netns %v, veth %v", netnsExists(routerNetns), linkExists(routerVeth))
	}
}
