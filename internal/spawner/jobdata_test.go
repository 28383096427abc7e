package spawner

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

func secretEnvOf(b byte) []string {
	return []string{job.EnvSecret + "=" + hex.EncodeToString(bytes.Repeat([]byte{b}, 32))}
}

// "A spawn with another job's id and checkpoint variables pruned that job's committed
// checkpoints" (issue 14, item 5): a job id the node knows stays with its secret, and a
// job restarts only from a job its own launcher started.
func TestAJobIdStaysWithItsSecretAndRestartsStayWithTheirLauncher(t *testing.T) {
	ring, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{Keys: ring}}
	if why := m.learnJob(job.SpawnRequest{Job: "victim", Rank: 0}, "UALICE", secretEnvOf(1)); why != "" {
		t.Fatal(why)
	}
	if why := m.learnJob(job.SpawnRequest{Job: "victim", Rank: 1}, "UALICE", secretEnvOf(1)); why != "" {
		t.Errorf("the job's next rank: %s", why)
	}
	if why := m.learnJob(job.SpawnRequest{Job: "victim", Rank: 0}, "UMALLORY", secretEnvOf(2)); !strings.Contains(why, "knows job victim under another secret") {
		t.Errorf("another secret for the victim's id: %q", why)
	}
	if why := m.learnJob(job.SpawnRequest{Job: "evil", Restart: "victim"}, "UMALLORY", secretEnvOf(3)); !strings.Contains(why, "another launcher started") {
		t.Errorf("a restart from another launcher's job: %q", why)
	}
	if ring.MayRead("evil", "victim") {
		t.Error("evil may read victim's checkpoints")
	}
	if why := m.learnJob(job.SpawnRequest{Job: "again", Restart: "victim"}, "UALICE", secretEnvOf(4)); why != "" {
		t.Errorf("the owner's restart: %q", why)
	}
	if !ring.MayRead("again", "victim") {
		t.Error("the owner's restart may not read the checkpoints it restarts from")
	}
}

func TestTypedFieldsSetTheRanksCheckpointEnvironment(t *testing.T) {
	req := job.SpawnRequest{Job: "j", Rank: 3, Restart: "old", CkptKeep: 4, CkptDir: "/scratch/ckpt"}
	env := typedEnv(req, nil)
	for _, want := range []string{"MPIOS_JOB_ID=j", "MPIOS_RANK=3", "MPIOS_RESTART=old", "MPIOS_CKPT_KEEP=4", "MPIOS_CKPT_DIR=/scratch/ckpt"} {
		if !slices.Contains(env, want) {
			t.Errorf("%q lacks %s", env, want)
		}
	}
	// The node's own store wins over the request's directory.
	env = typedEnv(req, []string{job.EnvCkptDir + "=/var/lib/mpios"})
	if _, set := Lookup(env, job.EnvCkptDir); set {
		t.Errorf("the request's directory is set beside the node's store: %q", env)
	}
	for _, name := range job.TypedEnv {
		bad := job.SpawnRequest{Job: "j", Path: "/bin/true", Env: []string{name + "=x"}}
		if err := bad.Validate(); err == nil {
			t.Errorf("%s accepted in the request's environment", name)
		}
	}
	for name, bad := range map[string]job.SpawnRequest{
		"relative directory": {Job: "j", Path: "/bin/true", CkptDir: "ckpt"},
		"bad restart id":     {Job: "j", Path: "/bin/true", Restart: "../x"},
		"negative keep":      {Job: "j", Path: "/bin/true", CkptKeep: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSealedEnvironmentHoldsOnlyNATSVariables(t *testing.T) {
	keys, _ := ctlauth.NewNodeKeys("n1", rand.Reader)
	card, _ := keys.Card()
	launcher, _ := nkeys.CreateCurveKeys()
	from, _ := launcher.PublicKey()
	a, _ := newAuthorizer(Config{Open: true, Curve: keys.Curve}, time.Now())
	seal := func(env ...string) job.SpawnRequest {
		box, err := ctlauth.SealEnv("j", env, launcher, card, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return job.SpawnRequest{Job: "j", SealedEnv: box, SealedFrom: from}
	}
	env, err := a.sealedEnv(seal("MPIOS_NATS_TOKEN=t0k", "MPIOS_NATS_URL=nats://u:p@h:4222"))
	if err != nil || len(env) != 2 || env[0] != "MPIOS_NATS_TOKEN=t0k" {
		t.Fatalf("opened %q, %v", env, err)
	}
	if _, err := a.sealedEnv(seal("LD_PRELOAD=/tmp/evil.so")); err == nil {
		t.Error("a sealed LD_PRELOAD was opened")
	}
	if _, err := a.sealedEnv(seal("MPIOS_CKPT_DIR=/victim")); err == nil {
		t.Error("a sealed checkpoint directory was opened")
	}
	// The secret of the job restarted from travels sealed, for a request that restarts
	// from a job, and never in clear.
	secret := job.EnvRestartSecret + "=0123456789abcdef0123456789abcdef"
	if _, err := a.sealedEnv(seal(secret)); err == nil {
		t.Error("a restart secret was opened for a request that restarts from no job")
	}
	req := seal(secret, "MPIOS_NATS_TOKEN=t0k")
	req.Restart = "old"
	if env, err := a.sealedEnv(req); err != nil || !slices.Contains(env, secret) {
		t.Errorf("the sealed restart secret: %v", err)
	}
	clear := job.SpawnRequest{Job: "j", Path: "/bin/true", Restart: "old", Env: []string{secret}}
	if err := clear.Validate(); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Errorf("a restart secret in clear: %v; want it refused", err)
	}
}

// "Spawned processes without a lease hold slots forever" (issue 14, item 8): a lease is
// renewed only by keepalives under the job's key, so nobody else keeps a dead launcher's
// ranks holding the node's slots.
func TestOnlyTheJobsKeepalivesRenewItsLease(t *testing.T) {
	ring, _ := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	m := &Manager{cfg: Config{Keys: ring}}
	subject := job.KeepAliveSubject("j")
	msg := func(data []byte) *nats.Msg { return &nats.Msg{Subject: subject, Data: data} }
	if !m.keepAliveOK("j", msg(nil)) {
		t.Error("a job without a key (started without a secret) is not renewed")
	}
	if why := m.learnJob(job.SpawnRequest{Job: "j"}, "", secretEnvOf(1)); why != "" {
		t.Fatal(why)
	}
	launcher, _ := ctlauth.NewJobChannel("j", bytes.Repeat([]byte{1}, 32), ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: "j"}, time.Now())
	evil, _ := ctlauth.NewJobChannel("j", bytes.Repeat([]byte{2}, 32), ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: "j"}, time.Now())
	forged, _ := evil.Encode(subject, job.KeepAlive{}, time.Now())
	moved, _ := launcher.Encode(job.KeepAliveSubject("other"), job.KeepAlive{}, time.Now())
	for name, data := range map[string][]byte{"empty": nil, "under another key": forged, "of another subject": moved} {
		if m.keepAliveOK("j", msg(data)) {
			t.Errorf("a keepalive %s renewed the lease", name)
		}
	}
	good, _ := launcher.Encode(subject, job.KeepAlive{}, time.Now())
	if !m.keepAliveOK("j", msg(good)) {
		t.Error("the launcher's keepalive did not renew the lease")
	}
	if m.keepAliveOK("j", msg(good)) {
		t.Error("a replayed keepalive renewed the lease")
	}
}
