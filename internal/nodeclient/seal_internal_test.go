package nodeclient

import (
	"crypto/rand"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// The secret of the job a rank restarts from leaves the spawn request's environment: sealed
// for a node with a key card (only that node opens it), dropped for one without, so that it
// never travels in clear.
func TestTheRestartSecretTravelsOnlySealed(t *testing.T) {
	keys, err := ctlauth.NewNodeKeys("n1", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	card, err := keys.Card()
	if err != nil {
		t.Fatal(err)
	}
	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	secret := job.EnvRestartSecret + "=00112233445566778899aabbccddeeff"
	a := &jobAuth{curve: curve}
	req := job.SpawnRequest{Job: "rs2", Path: "/bin/true", Restart: "rs1", Env: []string{secret, "MPIOS_SIZE=4", job.EnvSecret + "=ffeeddccbbaa99887766554433221100"}}
	if err := a.seal(&req, &card); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(req.Env, func(kv string) bool { return strings.Contains(kv, "SECRET") }) {
		t.Fatalf("the restart secret stayed in clear: %q", req.Env)
	}
	if err := req.Validate(); err != nil {
		t.Fatalf("the sealed request: %v", err)
	}
	env, err := ctlauth.OpenEnv(req.Job, req.SealedEnv, req.SealedFrom, keys.Curve)
	if err != nil || !slices.Contains(env, secret) {
		t.Fatalf("the node opened %d entries, %v; want the restart secret", len(env), err)
	}

	clear := job.SpawnRequest{Job: "rs2", Path: "/bin/true", Restart: "rs1", Env: []string{secret, "MPIOS_SIZE=4"}}
	dropRestartSecret(&clear)
	if len(clear.Env) != 1 || clear.Env[0] != "MPIOS_SIZE=4" {
		t.Errorf("for a node without a card: env %q, want the secret dropped", clear.Env)
	}
}
