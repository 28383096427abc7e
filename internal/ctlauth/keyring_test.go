package ctlauth

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

const pieceSubject = "mpios.node.n1.piece.job1"

type pieceReq struct {
	Job  string `msgpack:"job"`
	Rank int    `msgpack:"rank"`
}

func newRing(t *testing.T, max int) *JobKeyring {
	t.Helper()
	r, err := NewJobKeyring(Sender{Role: RoleNode, Node: "n1"}, max, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKeyringVerifiesAJobsMessagesOnlyUnderItsLearnedKey(t *testing.T) {
	r := newRing(t, 0)
	rank, err := NewJobChannel("job1", testSecret(1), Sender{Role: RoleRank, Rank: 2}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := rank.Encode(pieceSubject, pieceReq{Job: "job1", Rank: 2}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got pieceReq
	if _, err := r.Decode("job1", pieceSubject, data, &got, time.Now()); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("before the key is learned: %v, want ErrUnknownJob", err)
	}
	if err := r.Learn("job1", testSecret(1), "UOWNER"); err != nil {
		t.Fatal(err)
	}
	from, err := r.Decode("job1", pieceSubject, data, &got, time.Now())
	if err != nil || from.Rank != 2 || got.Rank != 2 {
		t.Fatalf("verified %+v from %v: %v", got, from, err)
	}
	if _, err := r.Decode("job1", pieceSubject, data, &got, time.Now()); !errors.Is(err, ErrReplay) {
		t.Errorf("replayed: %v, want ErrReplay", err)
	}
	// An attacker's message under its own secret, claiming the job.
	evil, _ := NewJobChannel("job1", testSecret(2), Sender{Role: RoleRank, Rank: 2}, time.Now())
	forged, _ := evil.Encode(pieceSubject, pieceReq{Job: "job1"}, time.Now())
	if _, err := r.Decode("job1", pieceSubject, forged, &got, time.Now()); !errors.Is(err, ErrForged) {
		t.Errorf("forged: %v, want ErrForged", err)
	}
	if owner, ok := r.Owner("job1"); !ok || owner != "UOWNER" {
		t.Errorf("owner %q %v", owner, ok)
	}
}

func TestKeyringPinsAJobIdToItsFirstKey(t *testing.T) {
	r := newRing(t, 0)
	if err := r.Learn("job1", testSecret(1), "A"); err != nil {
		t.Fatal(err)
	}
	if err := r.Learn("job1", testSecret(1), "B"); err != nil {
		t.Errorf("same secret again: %v", err)
	}
	if err := r.Learn("job1", testSecret(2), "B"); !errors.Is(err, ErrKeyConflict) {
		t.Errorf("another secret for a known job: %v, want ErrKeyConflict", err)
	}
	if owner, _ := r.Owner("job1"); owner != "A" {
		t.Errorf("owner became %q", owner)
	}
	if err := r.Learn("job1", []byte("short"), "A"); err == nil {
		t.Error("learned a short secret")
	}
}

func TestKeyringForgetsTheLeastRecentlyUsedJobWhenFull(t *testing.T) {
	r := newRing(t, 2)
	r.Learn("a", testSecret(1), "")
	r.Learn("b", testSecret(2), "")
	if _, err := r.Encode("a", "s", pieceReq{}, time.Now()); err != nil { // a is used: b is older
		t.Fatal(err)
	}
	r.Learn("c", testSecret(3), "")
	if _, ok := r.Owner("b"); ok {
		t.Error("b was not forgotten")
	}
	for _, id := range []string{"a", "c"} {
		if _, ok := r.Owner(id); !ok {
			t.Errorf("%s was forgotten", id)
		}
	}
}

func TestKeyringRepliesVerifyUnderTheJobKeyAsTheNode(t *testing.T) {
	r := newRing(t, 0)
	r.Learn("job1", testSecret(1), "")
	rank, _ := NewJobChannel("job1", testSecret(1), Sender{Role: RoleRank, Rank: 0}, time.Now())
	const inbox = "_INBOX.abc.def"
	data, err := r.Encode("job1", inbox, pieceReq{Job: "job1", Rank: 5}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got pieceReq
	from, err := rank.Decode(inbox, data, &got, time.Now())
	if err != nil || from.Role != RoleNode || from.Node != "n1" || got.Rank != 5 {
		t.Fatalf("%+v from %v: %v", got, from, err)
	}
	if _, err := r.Encode("job2", inbox, pieceReq{}, time.Now()); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("reply for an unknown job: %v", err)
	}
}

func TestOfferProofNeedsTheJobKey(t *testing.T) {
	r := newRing(t, 0)
	r.Learn("job1", testSecret(1), "")
	token := []byte("0123456789abcdef")
	rank, _ := NewJobChannel("job1", testSecret(1), Sender{Role: RoleRank}, time.Now())
	if !r.CheckOfferProof("job1", token, rank.OfferProof(token)) {
		t.Fatal("the job's proof is refused")
	}
	evil, _ := NewJobChannel("job1", testSecret(2), Sender{Role: RoleRank}, time.Now())
	for name, proof := range map[string][]byte{
		"raw token":          token,
		"another key":        evil.OfferProof(token),
		"another token":      rank.OfferProof([]byte("fedcba9876543210")),
		"empty":              nil,
		"proof for job1 @j2": rank.OfferProof(token),
	} {
		job := "job1"
		if strings.HasSuffix(name, "@j2") {
			job = "job2"
		}
		if r.CheckOfferProof(job, token, proof) {
			t.Errorf("%s: accepted", name)
		}
	}
	if len(rank.OfferProof(token)) != OfferProofSize {
		t.Error("proof size")
	}
}

func TestSealedEnvironmentOpensOnlyOnItsNodeAndJobAndNotAsASecret(t *testing.T) {
	n1, _ := NewNodeKeys("n1", rand.Reader)
	n2, _ := NewNodeKeys("n2", rand.Reader)
	card, _ := n1.Card()
	launcher, _ := nkeys.CreateCurveKeys()
	lpub, _ := launcher.PublicKey()
	env := []string{"MPIOS_NATS_TOKEN=s3cr3t-token"}
	box, err := SealEnv("job1", env, launcher, card, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(box), "s3cr3t") {
		t.Fatal("the token is in the box in clear")
	}
	got, err := OpenEnv("job1", box, lpub, n1.Curve)
	if err != nil || len(got) != 1 || got[0] != env[0] {
		t.Fatalf("n1 opens %q, %v", got, err)
	}
	if _, err := OpenEnv("job1", box, lpub, n2.Curve); !errors.Is(err, ErrCannotOpen) {
		t.Errorf("another node: %v", err)
	}
	if _, err := OpenEnv("job2", box, lpub, n1.Curve); !errors.Is(err, ErrCannotOpen) {
		t.Errorf("another job: %v", err)
	}
	if _, err := OpenSecret("job1", box, lpub, n1.Curve); !errors.Is(err, ErrCannotOpen) {
		t.Errorf("opened an environment box as a secret: %v", err)
	}
	sbox, _ := SealSecret("job1", testSecret(3), launcher, card, rand.Reader)
	if _, err := OpenEnv("job1", sbox, lpub, n1.Curve); !errors.Is(err, ErrCannotOpen) {
		t.Errorf("opened a secret box as an environment: %v", err)
	}
}

func TestAJobReadsOnlyItsOwnCheckpointsAndThoseItRestartsFrom(t *testing.T) {
	r := newRing(t, 0)
	if err := r.AllowRead("job2", "job1"); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("unknown job: %v", err)
	}
	r.Learn("job2", testSecret(2), "")
	if !r.MayRead("job2", "job2") || r.MayRead("job2", "job1") || r.MayRead("job3", "job3") {
		t.Fatal("reads before AllowRead")
	}
	if err := r.AllowRead("job2", "job1"); err != nil {
		t.Fatal(err)
	}
	if !r.MayRead("job2", "job1") || r.MayRead("job1", "job2") || r.MayRead("job2", "job3") {
		t.Error("reads after AllowRead")
	}
	if err := r.AllowRead("job2", "../x"); err == nil {
		t.Error("allowed a bad job id")
	}
}

// A node that restarts with its store keeps the keys of the jobs whose checkpoints it
// holds: it still serves them, and still refuses their ids to other secrets.
func TestAPersistedKeyringSurvivesARestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	r := newRing(t, 0)
	if err := r.Persist(dir); err != nil {
		t.Fatal(err)
	}
	r.Learn("job1", testSecret(1), "UALICE")
	r.Learn("job2", testSecret(2), "UALICE")
	r.AllowRead("job2", "job1")
	if fi, err := os.Stat(filepath.Join(dir, "job1"+keyFileExt)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("key directory: %v %v", fi, err)
	}
	os.WriteFile(filepath.Join(dir, "bad"+keyFileExt), []byte("{"), 0o600)

	again := newRing(t, 0)
	if err := again.Persist(dir); err != nil {
		t.Fatal(err)
	}
	rank, _ := NewJobChannel("job1", testSecret(1), Sender{Role: RoleRank}, time.Now())
	data, _ := rank.Encode(pieceSubject, pieceReq{Job: "job1"}, time.Now())
	var got pieceReq
	if _, err := again.Decode("job1", pieceSubject, data, &got, time.Now()); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	if owner, ok := again.Owner("job1"); !ok || owner != "UALICE" || !again.MayRead("job2", "job1") {
		t.Errorf("owner %q %v, reads %v", owner, ok, again.MayRead("job2", "job1"))
	}
	if err := again.Learn("job1", testSecret(9), "UMALLORY"); !errors.Is(err, ErrKeyConflict) {
		t.Errorf("another secret after the restart: %v", err)
	}
	if _, ok := again.Owner("bad"); ok {
		t.Error("a damaged file was loaded")
	}

	small := newRing(t, 1)
	sdir := filepath.Join(t.TempDir(), "small")
	small.Persist(sdir)
	small.Learn("a", testSecret(1), "")
	small.Learn("b", testSecret(2), "")
	if _, err := os.Stat(filepath.Join(sdir, "a"+keyFileExt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the evicted job's key file stays: %v", err)
	}
}
