package nodeclient_test

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/rankproc"
	"github.com/mpios/mpios/internal/testbin"
)

// nextEvent waits for the Remote's next node event.
func nextEvent(t *testing.T, r *nodeclient.Remote) nodeclient.NodeEvent {
	t.Helper()
	select {
	case ev := <-r.Events():
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no node event within 10s")
	}
	return nodeclient.NodeEvent{}
}

func wantJoin(t *testing.T, ev nodeclient.NodeEvent, node string, free int, reason string) {
	t.Helper()
	if j := ev.Joined; j == nil || j.Node != node || j.Free != free || j.Reason != reason {
		t.Fatalf("event %+v (joined %+v), want %s joined with %d free slots: %s", ev, ev.Joined, node, free, reason)
	}
}

func wantGone(t *testing.T, ev nodeclient.NodeEvent, node string) {
	t.Helper()
	if g := ev.Gone; g == nil || g.Node != node {
		t.Fatalf("event %+v, want %s gone", ev, node)
	}
}

// waitBeats waits until n sent k heartbeats.
func (n *fakeNode) waitBeats(k uint64) {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		seq := n.seq
		n.mu.Unlock()
		if seq >= k {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %s sent %d heartbeats in 10s, want %d", n.name, seq, k)
		}
		time.Sleep(fastBeat / 2)
	}
}

// startRank starts rank 0 of a job on r's first placed node.
func startRank(t *testing.T, r *nodeclient.Remote, jobID string) rankproc.Process {
	t.Helper()
	p, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=" + jobID, testSecret}, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Both kinds of join, from the heartbeats: a pcmd started after the job, and a node
// declared gone whose pcmd comes back. A node that was there before the job and is not one
// of its hosts does not join.
func TestNodesJoinFromTheirHeartbeats(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	before := startFakeNode(t, url, "n3", 2, fastBeat)
	before.waitBeats(5)
	n1 := startFakeNode(t, url, "n1", 2, fastBeat)
	r, _, err := newRemote(t, url, "n1:1", 1)
	if err != nil {
		t.Fatal(err)
	}
	startRank(t, r, "joins")
	startFakeNodeAs(t, url, "n2", 3, fastBeat, 5151, nil)
	wantJoin(t, nextEvent(t, r), "n2", 3, "a pcmd started after the job (pid 5151)")

	n1.die()
	wantGone(t, nextEvent(t, r), "n1")
	back := startFakeNodeAs(t, url, "n1", 2, fastBeat, 4343, nil)
	wantJoin(t, nextEvent(t, r), "n1", 2, "pcmd on node n1 came back (pid 4343, a new key)")
	if err := r.CheckNode("n1", 0); err != nil {
		t.Errorf("CheckNode of the returned node: %v", err)
	}
	// Joined nodes are watched like the others, ranks or not.
	back.die()
	wantGone(t, nextEvent(t, r), "n1")
	before.mu.Lock()
	seen := before.seq
	before.mu.Unlock()
	before.waitBeats(seen + 3) // beats after the job began: still no join
	select {
	case ev := <-r.Events():
		t.Errorf("unexpected event %+v (joined %+v)", ev, ev.Joined)
	default:
	}
}

// nodeKeys returns fresh keys of a node, and their known-nodes line.
func nodeKeys(t *testing.T, node string) (*ctlauth.NodeKeys, string) {
	t.Helper()
	keys, err := ctlauth.NewNodeKeys(node, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	card, err := keys.Card()
	if err != nil {
		t.Fatal(err)
	}
	return &keys, `node="` + node + `" ` + card.SigningKey
}

// A returning pcmd with a new key joins only if --known-nodes lists that key for the node;
// one with an unknown key is refused, and said so once.
func TestReturningNodeWithANewKeyJoinsOnlyIfKnown(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	cardA, lineA := nodeKeys(t, "n1")
	cardB, lineB := nodeKeys(t, "n1")
	cardX, _ := nodeKeys(t, "n1")
	known, err := ctlauth.ParseKnownNodes(strings.NewReader(lineA+"\n"+lineB+"\n"), "known")
	if err != nil {
		t.Fatal(err)
	}
	n1 := startFakeNodeAs(t, url, "n1", 2, fastBeat, 100, cardA)
	h, _ := nodeclient.ParseHosts("n1:1")
	logs := &logBuffer{}
	r, err := nodeclient.NewRemote(nodeclient.RemoteConfig{NATSURL: url, Hosts: h, NP: 1, Logf: logs.logf,
		RequestTimeout: 2 * time.Second, DiscoverWait: 200 * time.Millisecond, KnownNodes: known})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	startRank(t, r, "keys")
	n1.die()
	wantGone(t, nextEvent(t, r), "n1")

	stranger := startFakeNodeAs(t, url, "n1", 2, fastBeat, 200, cardX)
	stranger.waitBeats(5)
	if n := strings.Count(logs.String(), "node n1 (pcmd pid 200) cannot join the job: node n1: its key card is not signed by its key in the known-nodes file"); n != 1 {
		t.Errorf("%d refusals logged, want 1:\n%s", n, logs)
	}
	stranger.die()
	startFakeNodeAs(t, url, "n1", 2, fastBeat, 300, cardB)
	wantJoin(t, nextEvent(t, r), "n1", 2, "pcmd on node n1 came back (pid 300, a new key)")
}
