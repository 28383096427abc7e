package nodeclient

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/rankproc"
)

// ErrUntrustedNode: a node has no key card signed by a key of the known-nodes file
// (RemoteConfig.KnownNodes). Migration and resize targets are checked the same way.
var ErrUntrustedNode = errors.New("not a known node")

// jobAuth is what a Remote holds per job to authenticate its spawn and signal requests.
type jobAuth struct {
	signer *ctlauth.KeyWrapper // nil: requests are not signed (no RemoteConfig.Launcher)
	curve  nkeys.KeyPair       // fresh per job: seals the job's secret for each node
	// relay verifies the ranks' output and exit messages, which nodes with a key card send
	// under the job key, and authenticates the job's keepalives; nil if the job's
	// environment has no secret.
	relay *ctlauth.JobChannel
}

// nodeCard checks the key card in info, a node's description: signed by the node's key,
// which the known-nodes file must list when there is one. It returns nil for a node without
// a card (an older pcmd) when no known-nodes file is given.
func (r *Remote) nodeCard(info job.NodeInfo) (*ctlauth.NodeCard, error) {
	if len(info.Card) == 0 {
		if r.cfg.KnownNodes != nil {
			return nil, fmt.Errorf("nodeclient: node %s publishes no signed key card: %w", info.Name, ErrUntrustedNode)
		}
		return nil, nil
	}
	var keys ctlauth.KeySet = ctlauth.AnyKey{}
	if r.cfg.KnownNodes != nil {
		keys = r.cfg.KnownNodes
	}
	m, err := ctlauth.VerifyStatement(job.NodeCardSubject(info.Name), info.Card, keys)
	if err != nil {
		if errors.Is(err, ctlauth.ErrUntrusted) {
			return nil, fmt.Errorf("nodeclient: node %s: its key card is not signed by its key in the known-nodes file: %w", info.Name, ErrUntrustedNode)
		}
		return nil, fmt.Errorf("nodeclient: node %s: key card: %w", info.Name, err)
	}
	card, err := ctlauth.CardFromMessage(m)
	if err != nil || card.Node != info.Name {
		return nil, fmt.Errorf("nodeclient: node %s: key card: %v: %w", info.Name, err, ErrUntrustedNode)
	}
	return &card, nil
}

// jobAuth returns the job's signing and sealing keys, made at its first spawn. r.mu held.
func (r *Remote) jobAuthLocked(jobID string, env []string) (*jobAuth, error) {
	if a := r.auth[jobID]; a != nil {
		return a, nil
	}
	a := &jobAuth{}
	var err error
	if a.curve, err = nkeys.CreateCurveKeys(); err != nil {
		return nil, fmt.Errorf("nodeclient: job %s: curve key: %w", jobID, err)
	}
	if r.cfg.Launcher != nil {
		// Numbered from the clock: a restarted mpirun, or another one of the same job id,
		// does not reuse numbers a node has seen.
		from := ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: jobID}
		if a.signer, err = ctlauth.NewKeyWrapper(r.cfg.Launcher, from, uint64(time.Now().UnixNano())); err != nil {
			return nil, fmt.Errorf("nodeclient: launcher key: %w", err)
		}
	}
	if secret, err := hex.DecodeString(rankproc.EnvValue(env, job.EnvSecret)); err == nil && len(secret) > 0 {
		// Sends the keepalives: named apart from the launch loop's channel (which numbers
		// its own messages as the plain launcher) so that receivers see two senders.
		if a.relay, err = ctlauth.NewJobChannel(jobID, secret, ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: jobID}, time.Now()); err != nil {
			return nil, fmt.Errorf("nodeclient: job %s: %w", jobID, err)
		}
	}
	r.auth[jobID] = a
	return a, nil
}

// seal moves the job's secret, the rank's NATS credentials and the secret of the job it
// restarts from out of req.Env into boxes only card's node opens.
func (a *jobAuth) seal(req *job.SpawnRequest, card *ctlauth.NodeCard) error {
	var creds, rest []string
	for _, kv := range req.Env {
		if natsconn.IsCredential(kv) || isRestartSecret(kv) {
			creds = append(creds, kv)
		} else {
			rest = append(rest, kv)
		}
	}
	if len(creds) > 0 {
		var err error
		if req.SealedEnv, err = ctlauth.SealEnv(req.Job, creds, a.curve, *card, rand.Reader); err != nil {
			return fmt.Errorf("nodeclient: %w", err)
		}
		if req.SealedFrom, err = a.curve.PublicKey(); err != nil {
			return fmt.Errorf("nodeclient: %w", err)
		}
		req.Env = rest
	}
	prefix := job.EnvSecret + "="
	for i, kv := range req.Env {
		if !strings.HasPrefix(kv, prefix) {
			continue
		}
		secret, err := hex.DecodeString(kv[len(prefix):])
		if err != nil {
			return fmt.Errorf("nodeclient: %s: %w", job.EnvSecret, err)
		}
		if req.SealedSecret, err = ctlauth.SealSecret(req.Job, secret, a.curve, *card, rand.Reader); err != nil {
			return fmt.Errorf("nodeclient: %w", err)
		}
		if req.SealedFrom, err = a.curve.PublicKey(); err != nil {
			return fmt.Errorf("nodeclient: %w", err)
		}
		req.Env = append(req.Env[:i:i], req.Env[i+1:]...)
		return nil
	}
	return nil
}

// encode returns v, a request for the job, as published on subject: signed when the Remote
// has a launcher key.
func (a *jobAuth) encode(subject string, v any) ([]byte, error) {
	data, err := job.Encode(v)
	if err != nil || a.signer == nil {
		return data, err
	}
	return a.signer.Wrap(subject, data, time.Now())
}

// open returns the body of a message relayed for the process's rank: verified under the job
// key when its node has a key card (it relays under that key), else as received.
func (p *remoteProcess) open(m *nats.Msg) ([]byte, error) {
	if !p.keyed {
		return m.Data, nil
	}
	if p.auth.relay == nil {
		return nil, errors.New("no job key to verify it with")
	}
	body, _, err := p.auth.relay.Open(m.Subject, m.Data, time.Now())
	return body, err
}

// NodeSigningKey returns the signing key of node as its verified key card names it, pinned
// when the node was first asked (placement, migration or resize target): control requests
// a node signs (IOS agents, drains) must verify with it. ok is false for a node the Remote
// does not know, or that has no card.
func (r *Remote) NodeSigningKey(node string) (key string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[node]
	if n == nil || n.card == nil {
		return "", false
	}
	return n.card.SigningKey, true
}

// NodeKeys returns the KeySet of the Remote's nodes: a node's signature counts when made by
// the key of the card pinned for it (NodeSigningKey). The launcher verifies the control
// requests nodes sign with it.
func (r *Remote) NodeKeys() ctlauth.KeySet { return pinnedNodes{r} }

// pinnedNodes trusts a node's signature made by the key of the card the Remote pinned for it.
type pinnedNodes struct{ r *Remote }

// Trust implements ctlauth.KeySet.
func (p pinnedNodes) Trust(publicKey string, s ctlauth.Sender) error {
	if s.Role != ctlauth.RoleNode {
		return fmt.Errorf("signed as %s, not as a node", s)
	}
	key, ok := p.r.NodeSigningKey(s.Node)
	switch {
	case !ok:
		return fmt.Errorf("node %s is not watched, or has no key card", s.Node)
	case key != publicKey:
		return fmt.Errorf("node %s signs with %s", s.Node, key)
	}
	return nil
}

// isRestartSecret reports whether the environment entry kv is job.EnvRestartSecret.
func isRestartSecret(kv string) bool { return strings.HasPrefix(kv, job.EnvRestartSecret+"=") }

// dropRestartSecret removes job.EnvRestartSecret from req.Env, for a node without a key
// card to seal it for: it never travels in clear, and the rank reads the checkpoints it
// restarts from under its own job's key instead.
func dropRestartSecret(req *job.SpawnRequest) {
	req.Env = slices.DeleteFunc(req.Env, isRestartSecret)
}

// askNode publishes data on subject, a request to node's pcmd, and returns the body of the
// first answer that authenticates within wait (ctlplane.Request: others are skipped, and a
// "no responders" status must be borne out): one open takes (a reply under the job key;
// open may be nil), or one signed for this request's inbox by the key pinned for node at
// placement (pcmd signs its spawn and signal answers and its refusals so). A node placed
// without a key card (an older pcmd) answers in clear.
func (r *Remote) askNode(node, subject string, data []byte, wait time.Duration, open func(*nats.Msg) ([]byte, bool)) ([]byte, error) {
	_, signed := r.NodeSigningKey(node)
	var body []byte
	logged := false
	err := ctlplane.Request(r.nc, subject, data, wait, func(msg *nats.Msg) error {
		if open != nil {
			if b, ok := open(msg); ok {
				body = b
				return nil
			}
		}
		if !signed {
			body = msg.Data
			return nil
		}
		m, err := ctlauth.VerifyStatement(msg.Subject, msg.Data, pinnedNodes{r})
		if err == nil && m.From.Node != node {
			err = fmt.Errorf("signed by node %s", m.From.Node)
		}
		if err != nil {
			if !logged {
				logged = true
				r.cfg.Logf("ignoring an answer on behalf of node %s that it did not sign (to %s): %v", node, subject, err)
			}
			return err
		}
		body = m.Body
		return nil
	})
	return body, err
}
