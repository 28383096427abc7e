package spawner

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// ErrNoLauncherPolicy: a Config names neither authorized launchers nor Open.
var ErrNoLauncherPolicy = errors.New("pcmd: no --authorized-launchers file: give one, or --insecure-open " +
	"if only trusted users can publish on this NATS account")

// authorizer decides whom a node takes spawn and signal requests from (see Config.Launchers).
type authorizer struct {
	launchers *ctlauth.AuthorizedKeys // nil: Open
	verifier  *ctlauth.KeyVerifier
	curve     nkeys.KeyPair // opens sealed secrets; nil: the node takes none
}

func newAuthorizer(cfg Config, now time.Time) (*authorizer, error) {
	a := &authorizer{launchers: cfg.Launchers, curve: cfg.Curve}
	var keys ctlauth.KeySet = ctlauth.AnyKey{}
	switch {
	case cfg.Launchers != nil:
		keys = cfg.Launchers
	case !cfg.Open:
		return nil, ErrNoLauncherPolicy
	}
	// NotBefore: what this pcmd did not see before it started cannot be replayed to it.
	v, err := ctlauth.NewKeyVerifier(keys, ctlauth.ReplayOptions{NotBefore: now.Add(-time.Second)})
	if err != nil {
		return nil, err
	}
	a.verifier = v
	return a, nil
}

// request is an authenticated request: its body, and the launcher key that signed it ("":
// unsigned, taken because the node is Open).
type request struct {
	body     []byte
	signer   string
	launcher ctlauth.AuthorizedKey // the signer's entry, when the node has a list
}

// open authenticates a spawn or signal request received on subject for job jobOf(body).
// Signed requests are verified (signature, authorized key, replay, time) in every mode; an
// unsigned one is taken only by an Open node.
func (a *authorizer) open(subject string, data []byte, jobOf func([]byte) (string, error), now time.Time) (request, error) {
	if _, err := ctlauth.DecodeEnvelope(data); err != nil {
		if a.launchers != nil {
			return request{}, errors.New("takes only requests signed by an authorized launcher (--authorized-launchers); this one is not signed")
		}
		return request{body: data}, nil
	}
	m, err := a.verifier.Verify(subject, data, now)
	if err != nil {
		return request{}, fmt.Errorf("refuses a request that does not verify: %w", err)
	}
	jobID, err := jobOf(m.Body)
	if err != nil {
		return request{}, err
	}
	if m.From.Role != ctlauth.RoleLauncher || m.From.Job != jobID {
		return request{}, fmt.Errorf("refuses a request for job %s signed by %s as %s", jobID, m.Key, m.From)
	}
	r := request{body: m.Body, signer: m.Key}
	if a.launchers != nil {
		r.launcher, _ = a.launchers.Lookup(m.Key) // present: Verify trusted it
	}
	return r, nil
}

// secretEnv opens the job secret sealed in req and returns it as the rank's EnvSecret.
func (a *authorizer) secretEnv(req job.SpawnRequest) ([]string, error) {
	if len(req.SealedSecret) == 0 {
		return nil, nil
	}
	if a.curve == nil {
		return nil, errors.New("has no curve key to open the sealed secret with")
	}
	secret, err := ctlauth.OpenSecret(req.Job, req.SealedSecret, req.SealedFrom, a.curve)
	if err != nil {
		return nil, err
	}
	return []string{job.EnvSecret + "=" + hex.EncodeToString(secret)}, nil
}

// relayChannel returns the job-key channel the node relays rank req's output and exit
// under, from the job secret the request carried (sealed, or in clear from an older
// launcher); nil when it carried none. The sender is the rank on this node, so that each
// rank's relay numbers its messages on its own.
func relayChannel(node string, req job.SpawnRequest, secretEnv []string) (*ctlauth.JobChannel, error) {
	secretHex, ok := Lookup(append(slices.Clone(req.Env), secretEnv...), job.EnvSecret)
	if !ok {
		return nil, nil
	}
	secret, err := hex.DecodeString(secretHex)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.EnvSecret, err)
	}
	inc, _ := Lookup(req.Env, job.EnvIncarnation)
	n, _ := strconv.Atoi(inc)
	return ctlauth.NewJobChannel(req.Job, secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: req.Rank, Incarnation: max(n, 0), Node: node}, time.Now())
}

func spawnJob(body []byte) (string, error) {
	var req job.SpawnRequest
	if err := job.Decode(body, &req); err != nil {
		return "", err
	}
	return req.Job, nil
}

func signalJob(body []byte) (string, error) {
	var req job.SignalRequest
	if err := job.Decode(body, &req); err != nil {
		return "", err
	}
	return req.Job, nil
}
