package pcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
)

// writeSeed writes a fresh node key's seed to dir/name.nk and returns the file and the
// public key.
func writeSeed(t *testing.T, dir, name string) (file, pub string) {
	t.Helper()
	kp, _ := nkeys.CreateServer()
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	file = filepath.Join(dir, name+".nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return file, pub
}

// With --known-nodes a node believes only the peers listed there, each under its own key:
// a node the file does not name (anyone on the NATS server can start one) is never a peer,
// so never a drain target nor an IOS peer; the listed one is.
func TestWithKnownNodesOnlyListedPeersAreBelieved(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir := t.TempDir()
	seed1, pub1 := writeSeed(t, dir, "n1")
	seed2, pub2 := writeSeed(t, dir, "n2")
	known := filepath.Join(dir, "known")
	if err := os.WriteFile(known, fmt.Appendf(nil, "node=\"n1\" %s\nnode=\"n2\" %s\n", pub1, pub2), 0o644); err != nil {
		t.Fatal(err)
	}
	n1 := startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NodeKey: seed1, KnownNodes: known, NATS: NATSOptions{URL: url}, Slots: 1})
	startNode(t, nc, Config{Node: "n3", InsecureOpen: true, NATS: NATSOptions{URL: url}, Slots: 4})
	startNode(t, nc, Config{Node: "n2", InsecureOpen: true, NodeKey: seed2, NATS: NATSOptions{URL: url}, Slots: 1})
	peersOfN1 := func() []string {
		views, _ := nodeclient.DiscoverNodes(nc, 300*time.Millisecond, nil)
		for _, v := range views {
			if v.Self.Name == "n1" {
				var names []string
				for _, p := range v.Peers {
					names = append(names, p.Info.Name)
				}
				return names
			}
		}
		return nil
	}
	testbin.WaitFor(t, 5*time.Second, "n1 to hear n2", func() bool {
		return strings.Contains(strings.Join(peersOfN1(), " "), "n2")
	})
	// n3 has been beating all along, every 50 ms.
	if peers := peersOfN1(); len(peers) != 1 || peers[0] != "n2" {
		t.Errorf("n1's peers %v, want n2 alone", peers)
	}
	if !strings.Contains(n1.log.String(), "ignoring a heartbeat that does not verify") {
		t.Errorf("n1 did not note n3's heartbeat; log:\n%s", n1.log)
	}

	// Discovery (pcmd status, mpirun's diagnosis of a node that does not answer) believes a
	// view only signed by its node; with the file, only by a node it lists. An outsider's
	// answer in clear, claiming n2 is idle with 64 slots, counts in neither case.
	forged, _ := job.Encode(job.NodeView{Self: job.NodeInfo{Name: "n2", Slots: 64, Interval: time.Second}})
	sub, err := nc.Subscribe(job.NodesDiscoverSubject, func(m *nats.Msg) { _ = m.Respond(forged) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	knownKeys, err := ctlauth.LoadKnownNodes(known)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		keys ctlauth.KeySet
		want string
	}{{nil, "n1 n2 n3"}, {knownKeys, "n1 n2"}} {
		views, err := nodeclient.DiscoverNodes(nc, 300*time.Millisecond, c.keys)
		var names []string
		for _, v := range views {
			names = append(names, v.Self.Name)
			if v.Self.Slots == 64 {
				t.Errorf("the forged view counted: %+v", v.Self)
			}
		}
		slices.Sort(names)
		if got := strings.Join(names, " "); err != nil || got != c.want {
			t.Errorf("discovery with %T: views of %q, %v; want %q", c.keys, got, err, c.want)
		}
	}

	// The IOS agents' states likewise: pcmd status shows a node's state only signed by the
	// key of that node's view. The outsider answers for n2 in clear and under its own key.
	fake := job.IOSState{Node: "n2", Policy: "none", CPUs: 999, EffectiveCPUs: 999, Availability: 1, Peers: []string{}}
	fakeBody, _ := job.Encode(fake)
	outsider, _ := nkeys.CreateServer()
	outsiderSigner, err := ctlauth.NewKeyWrapper(outsider, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n2"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	iosSub, err := nc.Subscribe(job.IOSDiscoverSubject, func(m *nats.Msg) {
		_ = m.Respond(fakeBody)
		if signed, err := outsiderSigner.Wrap(m.Reply, fakeBody, time.Now()); err == nil {
			_ = m.Respond(signed)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = iosSub.Unsubscribe() }()
	testbin.WaitFor(t, 5*time.Second, "n2's own IOS state in pcmd status", func() bool {
		st, err := nodestatus.DiscoverStatus(nc, 300*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Nodes {
			if n.Name == "n2" && n.IOS != nil {
				if n.IOS.CPUs == 999 {
					t.Fatalf("the outsider's IOS state for n2 is shown: %+v", n.IOS)
				}
				return true
			}
		}
		return false
	})
}

// A known-nodes file that lists this node's own key under another name is a mistake the
// node refuses to start with.
func TestAKnownNodesFileNamingThisKeyOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	dir := t.TempDir()
	seed, pub := writeSeed(t, dir, "n1")
	known := filepath.Join(dir, "known")
	if err := os.WriteFile(known, fmt.Appendf(nil, "node=\"n9\" %s\n", pub), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := Serve(ctx, Config{Node: "n1", InsecureOpen: true, NodeKey: seed, KnownNodes: known, NATS: NATSOptions{URL: url}})
	if err == nil || !strings.Contains(err.Error(), `listed for node "n9", not "n1"`) {
		t.Fatalf("Serve: %v", err)
	}
}
