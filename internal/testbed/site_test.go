//go:build linux

package testbed

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A grid whose sites each run their own NATS server, joined by routes: every node still
// registers (its heartbeat reaches the testbed through the routes), a node talks only to
// its own site's server, and with the two sites' nodes and servers on either side of a
// delayed link, a request from one site's server to a responder at the other's takes at
// least the link's round trip: the control plane crosses the emulated wide area as the
// data does. This is what lets NRS's pings tell the sites apart.
func TestSitesRouteTheControlPlaneThroughTheLink(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs the tc command (iproute2)")
	}
	opts := testOptions(t, IsolationNetns)
	opts.UserspaceDelay = true
	opts.Nodes = []NodeSpec{{"sa1", 0.5}, {"sa2", 0.5}, {"sb1", 0.5}}
	opts.Sites = map[string][]string{"sa": {"sa1", "sa2"}, "sb": {"sb1"}}
	c := startCluster(t, opts)
	for _, n := range []string{"sa1", "sa2", "sb1"} {
		if _, _, ok := c.Heartbeat(n); !ok {
			t.Errorf("no heartbeat of %s at the testbed (site sa's server)", n)
		}
	}
	// The bridge kept its address while the nodes' veths joined it (else the root
	// namespace's connections to the sites' servers stall on stale ARP entries).
	if mac, err := os.ReadFile("/sys/class/net/" + BridgeName + "/address"); err != nil || strings.TrimSpace(string(mac)) != BridgeMAC {
		t.Errorf("bridge address %q (%v), want %s", mac, err, BridgeMAC)
	}
	if c.NATSURL() != c.SiteURL("sa") {
		t.Errorf("NATSURL is not the first site's server")
	}

	const delay = 20 * time.Millisecond
	if err := c.SetLink([]string{"sa1", "sa2", SiteServer("sa")}, []string{"sb1", SiteServer("sb")}, Link{Delay: delay}); err != nil {
		t.Fatal(err)
	}
	at := func(site string) *nats.Conn {
		nc, err := nats.Connect(c.SiteURL(site), nats.Timeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ncA, ncB := at("sa"), at("sb")
	subj := "_test.echo." + randomHex(8)
	if _, err := ncB.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := ncB.Flush(); err != nil {
		t.Fatal(err)
	}
	// The subscription reaches site sa's server through the route, which is now delayed:
	// until it has, a request finds no responder.
	for i := 0; ; i++ {
		_, err := ncA.Request(subj, nil, 2*time.Second)
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("no answer across the route: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 5 {
		began := time.Now()
		if _, err := ncA.Request(subj, []byte("ping"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(began); rtt < 2*delay {
			t.Errorf("request from site sa to a responder at site sb answered in %v, less than twice the %v one-way delay", rtt, delay)
		}
	}

	addr := func(name string) netip.Addr {
		a, _, err := c.endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		return netip.MustParseAddr(a)
	}
	flowOf := func(a, b string) uint64 { return c.router.routed(flow{addr(a), addr(b)}) }
	if flowOf(SiteServer("sa"), SiteServer("sb"))+flowOf(SiteServer("sb"), SiteServer("sa")) == 0 {
		t.Error("nothing between the sites' servers passed the delay router")
	}
	// Each node talks to its own site's server only: nothing from a node to the other
	// site's server crossed the link.
	if n := flowOf("sa1", SiteServer("sb")) + flowOf("sa2", SiteServer("sb")) + flowOf("sb1", SiteServer("sa")); n != 0 {
		t.Errorf("%d packets from a node to the other site's server", n)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range testbedNetns() {
		if strings.Contains(ns, siteHostPrefix) {
			t.Errorf("site namespace %s left after Close", ns)
		}
	}
}

func TestSitesRejected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sites map[string][]string
		url   string
		want  string
	}{
		{"node in two sites", map[string][]string{"x": {"n1"}, "y": {"n1"}}, "", "is in sites"},
		{"bad site name", map[string][]string{"a.b": {"n1"}}, "", "site name"},
		{"with a NATS URL", map[string][]string{"x": {"n1"}}, "nats://10.0.0.1:4222", "NATSURL must be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Sites: tc.sites, NATSURL: tc.url}
			err := o.setDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("setDefaults: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
