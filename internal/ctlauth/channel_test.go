package ctlauth

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/job"
)

func TestJobChannelAcceptsItsJobOnceAndRefusesOthers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	secret := bytes.Repeat([]byte{1}, 32)
	rank, err := NewJobChannel("j1", secret, Sender{Role: RoleRank, Rank: 2}, now)
	if err != nil {
		t.Fatal(err)
	}
	launcher, _ := NewJobChannel("j1", secret, Sender{Role: RoleLauncher}, now)
	otherJob, _ := NewJobChannel("j2", secret, Sender{Role: RoleRank, Rank: 2}, now)
	otherSecret, _ := NewJobChannel("j1", bytes.Repeat([]byte{2}, 32), Sender{Role: RoleRank, Rank: 2}, now)

	subj := job.AbortSubject("j1")
	msg := job.Abort{Rank: 2, Code: 3, Message: "bye"}
	data, err := rank.Encode(subj, msg, now)
	if err != nil {
		t.Fatal(err)
	}
	var got job.Abort
	from, err := launcher.Decode(subj, data, &got, now)
	if err != nil || got != msg || from.Role != RoleRank || from.Rank != 2 {
		t.Fatalf("Decode = %+v from %v, %v", got, from, err)
	}
	if _, err := launcher.Decode(subj, data, &got, now); !errors.Is(err, ErrReplay) {
		t.Errorf("replayed: %v, want ErrReplay", err)
	}
	for name, d := range map[string][]byte{
		"other job":    must(otherJob.Encode(job.AbortSubject("j2"), msg, now)),
		"other secret": must(otherSecret.Encode(subj, msg, now)),
		"plain":        must(job.Encode(msg)),
	} {
		if _, err := launcher.Decode(subj, d, &got, now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A message sent well before the receiver's channel existed (a replay to a restarted
	// receiver) is refused.
	later, _ := NewJobChannel("j1", secret, Sender{Role: RoleLauncher}, now.Add(10*time.Second))
	fresh, _ := NewJobChannel("j1", secret, Sender{Role: RoleRank, Rank: 2}, now)
	if _, _, err := later.Open(subj, must(fresh.Encode(subj, msg, now)), now.Add(10*time.Second)); !errors.Is(err, ErrStale) {
		t.Errorf("message from before the receiver started: %v, want ErrStale", err)
	}
}

// TestOneLaunchersJobsAreNumberedApart: a user's concurrent mpiruns sign with one key; their
// spawn requests, interleaved at a node, are all accepted because each speaks for its job.
func TestOneLaunchersJobsAreNumberedApart(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	now := time.Now()
	v, err := NewKeyVerifier(AnyKey{}, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewKeyWrapper(kp, Sender{Role: RoleLauncher, Job: "a"}, uint64(now.UnixNano()))
	b, _ := NewKeyWrapper(kp, Sender{Role: RoleLauncher, Job: "b"}, uint64(now.Add(time.Second).UnixNano()))
	for i := 0; i < 3; i++ {
		for _, w := range []*KeyWrapper{b, a} {
			data, err := w.Wrap(spawnSubject, []byte("x"), now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(spawnSubject, data, now); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
	if err := (Sender{Role: RoleRank, Job: "a"}).Validate(); !errors.Is(err, ErrMalformed) {
		t.Errorf("a rank naming a job: %v, want ErrMalformed", err)
	}
}

func TestVerifyStatementChecksSignatureAndTrustNotFreshness(t *testing.T) {
	keys, err := NewNodeKeys("n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	card, _ := keys.Card()
	w, _ := NewKeyWrapper(keys.Signing, Sender{Role: RoleNode, Node: "n1"}, 0)
	subj := job.NodeCardSubject("n1")
	data, err := w.Wrap(subj, must(job.Encode(card)), time.Unix(0, 1)) // long ago
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // a statement may be shown again
		m, err := VerifyStatement(subj, data, AnyKey{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := CardFromMessage(m); err != nil || got != card {
			t.Fatalf("card %+v, %v", got, err)
		}
	}
	if _, err := VerifyStatement(job.NodeCardSubject("n2"), data, AnyKey{}); !errors.Is(err, ErrForged) {
		t.Errorf("card shown as another node's: %v, want ErrForged", err)
	}
	other, _ := NewNodeKeys("n1", nil)
	pub, _ := other.Signing.PublicKey()
	known, err := ParseKnownNodes(bytes.NewReader([]byte(`node="n1" `+pub+"\n")), "known_nodes")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyStatement(subj, data, known); !errors.Is(err, ErrUntrusted) {
		t.Errorf("card signed by a key the known nodes do not list: %v, want ErrUntrusted", err)
	}
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}
