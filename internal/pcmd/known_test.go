package pcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/nodeclient"
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
		views, _ := nodeclient.DiscoverNodes(nc, 300*time.Millisecond)
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
