package spawner

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

func signedSpawn(t *testing.T, kp nkeys.KeyPair, signedJob string, req job.SpawnRequest, now time.Time) []byte {
	t.Helper()
	w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: signedJob}, uint64(now.UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := job.Encode(req)
	data, err := w.Wrap(job.NodeSpawnSubject("n1"), body, now)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSpawnRequestsNeedTheirJobsAuthorizedLauncher: a node with an authorized launchers file
// takes only requests signed by a listed key for the job the request names; an open node
// takes unsigned ones.
func TestSpawnRequestsNeedTheirJobsAuthorizedLauncher(t *testing.T) {
	now := time.Now()
	alice, _ := nkeys.CreateUser()
	mallory, _ := nkeys.CreateUser()
	pub, _ := alice.PublicKey()
	keys, err := ctlauth.ParseAuthorizedKeys(strings.NewReader(`jobs="alice-*" `+pub+"\n"), "authorized_launchers")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAuthorizer(Config{Launchers: keys}, now)
	if err != nil {
		t.Fatal(err)
	}
	req := job.SpawnRequest{Job: "alice-1", Rank: 0, Path: "/bin/true"}
	subj := job.NodeSpawnSubject("n1")
	in, err := a.open(subj, signedSpawn(t, alice, "alice-1", req, now), spawnJob, now)
	if err != nil || in.signer != pub || in.launcher.Permits("alice-1", "/bin/true") != nil {
		t.Fatalf("alice's request: %+v, %v", in, err)
	}
	if err := in.launcher.Permits("bob-1", "/bin/true"); err == nil {
		t.Errorf("alice's key may start bob's job")
	}
	plain, _ := job.Encode(req)
	for name, data := range map[string][]byte{
		"unsigned":                 plain,
		"signed by mallory":        signedSpawn(t, mallory, "alice-1", req, now),
		"signed for another job":   signedSpawn(t, alice, "alice-2", req, now),
		"signed before pcmd start": signedSpawn(t, alice, "alice-1", req, now.Add(-time.Minute)),
	} {
		if _, err := a.open(subj, data, spawnJob, now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := newAuthorizer(Config{}, now); !errors.Is(err, ErrNoLauncherPolicy) {
		t.Errorf("no launchers, not open: %v", err)
	}
	open, _ := newAuthorizer(Config{Open: true}, now)
	if in, err := open.open(subj, plain, spawnJob, now); err != nil || !bytes.Equal(in.body, plain) || in.signer != "" {
		t.Errorf("open node, unsigned request: %+v, %v", in, err)
	}
}

func TestSealedSecretReachesOnlyTheRank(t *testing.T) {
	keys, err := ctlauth.NewNodeKeys("n1", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	card, _ := keys.Card()
	launcher, _ := nkeys.CreateCurveKeys()
	from, _ := launcher.PublicKey()
	secret := bytes.Repeat([]byte{9}, 32)
	box, err := ctlauth.SealSecret("j", secret, launcher, card, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newAuthorizer(Config{Open: true, Curve: keys.Curve}, time.Now())
	env, err := a.secretEnv(job.SpawnRequest{Job: "j", SealedSecret: box, SealedFrom: from})
	if err != nil || len(env) != 1 || env[0] != job.EnvSecret+"="+hex.EncodeToString(secret) {
		t.Fatalf("opened %q, %v", env, err)
	}
	if _, err := a.secretEnv(job.SpawnRequest{Job: "other", SealedSecret: box, SealedFrom: from}); err == nil {
		t.Errorf("a secret sealed for job j opened for another job")
	}
	if _, err := (&authorizer{}).secretEnv(job.SpawnRequest{Job: "j", SealedSecret: box, SealedFrom: from}); err == nil {
		t.Errorf("a node without a curve key opened a sealed secret")
	}
}
