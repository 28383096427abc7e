package ctlauth

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// signedInfo returns info signed by keys as the node publishes it on subject, and the
// node's signer.
func signedInfo(t testing.TB, keys NodeKeys, subject string, info job.NodeInfo) []byte {
	t.Helper()
	card, err := keys.SignedCard(t0)
	if err != nil {
		t.Fatal(err)
	}
	info.Card = card
	w, err := NewKeyWrapper(keys.Signing, Sender{Role: RoleNode, Node: keys.Node}, 0)
	if err != nil {
		t.Fatal(err)
	}
	body, err := job.Encode(info)
	if err != nil {
		t.Fatal(err)
	}
	data, err := w.Wrap(subject, body, t0)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func nodeKeysFor(t testing.TB, node string) NodeKeys {
	t.Helper()
	k, err := NewNodeKeys(node, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const beatSubject = job.NodesHeartbeatSubject

var n1Info = job.NodeInfo{Name: "n1", Slots: 2, Interval: time.Second, PID: 7}

func TestNodeInfoVerifiesOnlyUnderTheKeyItsCardNames(t *testing.T) {
	n1, other := nodeKeysFor(t, "n1"), nodeKeysFor(t, "n1")
	good := signedInfo(t, n1, beatSubject, n1Info)
	if info, err := VerifyNodeInfo(beatSubject, good, AnyKey{}); err != nil || info.Name != "n1" {
		t.Fatalf("a node's own signed heartbeat: %+v, %v", info, err)
	}
	if _, err := VerifyNodeInfo(job.NodeInfoSubject("n1"), good, AnyKey{}); !errors.Is(err, ErrForged) {
		t.Errorf("a heartbeat moved to another subject: %v, want ErrForged", err)
	}
	// Signed by one key with the card of another (a forger pasting n1's real card).
	card, _ := n1.SignedCard(t0)
	info := n1Info
	info.Card = card
	w, _ := NewKeyWrapper(other.Signing, Sender{Role: RoleNode, Node: "n1"}, 0)
	forged, _ := w.Wrap(beatSubject, mustEncode(t, info), t0)
	if _, err := VerifyNodeInfo(beatSubject, forged, AnyKey{}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("signed under a key its card does not name: %v, want ErrUntrusted", err)
	}
	// Describing another node than the signer.
	n2 := n1Info
	n2.Name = "n2"
	if _, err := VerifyNodeInfo(beatSubject, signedInfo(t, n1, beatSubject, n2), AnyKey{}); err == nil {
		t.Error("n1's key vouched for n2's description")
	}
	// Pinned: the first key a name used is the only one taken for it.
	pins := NewNodePins("me", nil)
	if !pins.Pin("n1", mustCard(t, n1).SigningKey) {
		t.Fatal("first pin refused")
	}
	if _, err := VerifyNodeInfo(beatSubject, signedInfo(t, other, beatSubject, n1Info), pins); !errors.Is(err, ErrUntrusted) {
		t.Errorf("another key for a pinned node: %v, want ErrUntrusted", err)
	}
	pins.Unpin("n1")
	if _, err := VerifyNodeInfo(beatSubject, signedInfo(t, other, beatSubject, n1Info), pins); err != nil {
		t.Errorf("a new key once the node was forgotten: %v", err)
	}
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := job.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustCard(t testing.TB, k NodeKeys) NodeCard {
	t.Helper()
	c, err := k.Card()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func FuzzVerifyNodeInfo(f *testing.F) {
	n1 := nodeKeysFor(f, "n1")
	f.Add(signedInfo(f, n1, beatSubject, n1Info))
	f.Add(mustEncode(f, n1Info))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := VerifyNodeInfo(beatSubject, data, AnyKey{})
		if err != nil {
			return
		}
		// Whatever verifies is a valid description with a card naming its own signer.
		if err := info.Validate(); err != nil {
			t.Fatalf("verified an invalid description: %v", err)
		}
		m, err := VerifyStatement(job.NodeCardSubject(info.Name), info.Card, AnyKey{})
		if err != nil {
			t.Fatalf("verified a description whose card does not verify: %v", err)
		}
		if card, err := CardFromMessage(m); err != nil || card.Node != info.Name {
			t.Fatalf("card %+v, %v for node %s", card, err, info.Name)
		}
	})
}
