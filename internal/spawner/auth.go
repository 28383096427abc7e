package spawner

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// sealedEnv opens the NATS credentials and the restart secret sealed in req (SealedEnv).
// Only MPIOS_NATS_* variables and job.EnvRestartSecret (with a job to restart from) may be
// sealed: the box cannot smuggle in what Env may not hold.
func (a *authorizer) sealedEnv(req job.SpawnRequest) ([]string, error) {
	if len(req.SealedEnv) == 0 {
		return nil, nil
	}
	if a.curve == nil {
		return nil, errors.New("has no curve key to open the sealed environment with")
	}
	env, err := ctlauth.OpenEnv(req.Job, req.SealedEnv, req.SealedFrom, a.curve)
	if err != nil {
		return nil, err
	}
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if name == job.EnvRestartSecret && strings.IndexByte(kv, 0) < 0 {
			if req.Restart == "" {
				return nil, fmt.Errorf("the sealed environment holds %s, but the request restarts from no job", name)
			}
			continue
		}
		if !ok || !strings.HasPrefix(name, "MPIOS_NATS_") || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("the sealed environment holds %.40q: only MPIOS_NATS_* variables and %s may be sealed", name, job.EnvRestartSecret)
		}
	}
	return env, nil
}

// jobSecret returns the job secret of req: opened from its box (secretEnv), or in clear
// from an older launcher; nil if it carries none.
func jobSecret(req job.SpawnRequest, secretEnv []string) []byte {
	secretHex, ok := Lookup(append(slices.Clone(req.Env), secretEnv...), job.EnvSecret)
	if !ok {
		return nil
	}
	secret, err := hex.DecodeString(secretHex)
	if err != nil {
		return nil
	}
	return secret
}

// learnJob records the key of req's job in the node's keyring, and what the job may read:
// it returns why the request is refused, or "". A job id already known under another secret
// is another job's (a spawn reusing a victim's id to reach its checkpoints); a restart from
// a job that another launcher started is refused too.
func (m *Manager) learnJob(req job.SpawnRequest, signer string, secretEnv []string) string {
	secret := jobSecret(req, secretEnv)
	if secret == nil {
		return ""
	}
	if err := m.cfg.Keys.Learn(req.Job, secret, signer); err != nil {
		if errors.Is(err, ctlauth.ErrKeyConflict) {
			return fmt.Sprintf("refuses rank %d of job %s: this node knows job %s under another secret; a job id cannot be reused while the node remembers it",
				req.Rank, req.Job, req.Job)
		}
		return fmt.Sprintf("refuses rank %d of job %s: %v", req.Rank, req.Job, err)
	}
	if req.Restart == "" || req.Restart == req.Job {
		return ""
	}
	if owner, known := m.cfg.Keys.Owner(req.Restart); known && owner != signer {
		return fmt.Sprintf("refuses rank %d of job %s: it restarts from job %s, which another launcher started", req.Rank, req.Job, req.Restart)
	}
	if err := m.cfg.Keys.AllowRead(req.Job, req.Restart); err != nil {
		return fmt.Sprintf("refuses rank %d of job %s: %v", req.Rank, req.Job, err)
	}
	return ""
}

// typedEnv is the environment the node sets from req's typed fields: its job, rank,
// restart and checkpoint settings. Variables that node (the node's own settings) sets
// are left to it.
func typedEnv(req job.SpawnRequest, node []string) []string {
	env := []string{job.EnvJobID + "=" + req.Job, job.EnvRank + "=" + strconv.Itoa(req.Rank)}
	if req.Restart != "" {
		env = append(env, job.EnvRestart+"="+req.Restart)
	}
	if req.CkptKeep > 0 {
		env = append(env, job.EnvCkptKeep+"="+strconv.Itoa(req.CkptKeep))
	}
	if req.CkptDir != "" {
		env = append(env, job.EnvCkptDir+"="+req.CkptDir)
	}
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		_, set := Lookup(node, name)
		return set
	})
}

// relayChannel returns the job-key channel the node relays rank req's output and exit
// under, from the job secret the request carried (sealed, or in clear from an older
// launcher); nil when it carried none. The sender is the rank on this node, so that each
// rank's relay numbers its messages on its own.
func relayChannel(node string, req job.SpawnRequest, secretEnv []string) (*ctlauth.JobChannel, error) {
	secret := jobSecret(req, secretEnv)
	if secret == nil {
		if _, ok := Lookup(req.Env, job.EnvSecret); ok {
			return nil, fmt.Errorf("%s: not hex", job.EnvSecret)
		}
		return nil, nil
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
