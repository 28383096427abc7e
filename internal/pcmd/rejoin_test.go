package pcmd

import (
	"crypto/rand"
	"io"
	"log"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// beatingNode is a peer as its heartbeats show it: a fresh key for each pcmd it runs.
type beatingNode struct {
	t    *testing.T
	info job.NodeInfo
	sign *ctlauth.KeyWrapper
}

func newBeatingNode(t *testing.T, name string, pid int) *beatingNode {
	t.Helper()
	keys, err := ctlauth.NewNodeKeys(name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	card, err := keys.SignedCard(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w, err := ctlauth.NewKeyWrapper(keys.Signing, ctlauth.Sender{Role: ctlauth.RoleNode, Node: name}, uint64(time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	return &beatingNode{t: t, info: job.NodeInfo{Name: name, Slots: 2, PID: pid, Interval: time.Second, Card: card}, sign: w}
}

// beat is the node's next heartbeat, leaving or not.
func (b *beatingNode) beat(leaving bool) *nats.Msg {
	b.t.Helper()
	info := b.info
	info.Leaving = leaving
	body, err := job.Encode(info)
	if err != nil {
		b.t.Fatal(err)
	}
	data, err := b.sign.Wrap(job.NodesHeartbeatSubject, body, time.Now())
	if err != nil {
		b.t.Fatal(err)
	}
	return &nats.Msg{Subject: job.NodesHeartbeatSubject, Data: data}
}

// A peer's pcmd that leaves says so in its last heartbeat, and its next pcmd, under a fresh
// key, is a peer again: also when a message the old pcmd sent before leaving (its IOS
// agent's, handled on another goroutine) pinned the old key again after the "leaving"
// heartbeat unpinned it. Without that, the node could never rejoin: every heartbeat of its
// new pcmd was dropped as signed by another key than the pinned one.
func TestAPeerThatLeftRejoinsUnderAFreshKey(t *testing.T) {
	pins := ctlauth.NewNodePins("n2", nil)
	beats, err := ctlauth.NewKeyVerifier(pins, ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{log: log.New(io.Discard, "", 0), pins: pins, beats: beats, peers: newPeerTable("n2", 2),
		forged: map[string]time.Time{}, left: map[string]string{}}
	peers := func() []job.NodeInfo {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.peers.aliveInfos(time.Now())
	}
	old := newBeatingNode(t, "n1", 100)
	s.onHeartbeat(old.beat(false))
	if p := peers(); len(p) != 1 || p[0].PID != 100 {
		t.Fatalf("peers %+v, want n1's first pcmd", p)
	}
	s.onHeartbeat(old.beat(true))
	if p := peers(); len(p) != 0 {
		t.Fatalf("peers %+v after n1 left", p)
	}
	oldKey := old.sign.PublicKey()
	pins.Pin("n1", oldKey) // the old agent's last steal request, handled late

	next := newBeatingNode(t, "n1", 200)
	s.onHeartbeat(next.beat(false))
	if p := peers(); len(p) != 1 || p[0].PID != 200 {
		t.Fatalf("peers %+v, want n1's next pcmd", p)
	}
	// The unpinning is for a key that left, not for any other: a third key is refused.
	intruder := newBeatingNode(t, "n1", 300)
	s.onHeartbeat(intruder.beat(false))
	if p := peers(); len(p) != 1 || p[0].PID != 200 {
		t.Fatalf("peers %+v: another key took n1 over", p)
	}
	// A node that keeps its key (--node-key) leaves and comes back under it: once it is back,
	// its leaving is over, and another key cannot take its name.
	s.onHeartbeat(next.beat(true))
	s.onHeartbeat(next.beat(false))
	s.onHeartbeat(intruder.beat(false))
	if p := peers(); len(p) != 1 || p[0].PID != 200 {
		t.Fatalf("peers %+v: another key took n1 over after it came back", p)
	}
}
