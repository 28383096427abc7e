package ctlauth

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/job"
)

// ErrCannotOpen: a sealed secret is not for this node's key, not from the claimed sender,
// altered, or for another job.
var ErrCannotOpen = errors.New("ctlauth: cannot open sealed secret")

// NodeKeys are a node's key pairs: Signing (an NKey server key, prefix N) signs its
// announcements, Curve (an x25519 key, prefix X) opens the secrets sealed for it.
type NodeKeys struct {
	Node    string
	Signing nkeys.KeyPair
	Curve   nkeys.KeyPair
}

// NewNodeKeys creates fresh key pairs for node from rand (crypto/rand.Reader in production).
func NewNodeKeys(node string, rand io.Reader) (NodeKeys, error) {
	if err := job.ValidateNode(node); err != nil {
		return NodeKeys{}, fmt.Errorf("ctlauth: %w", err)
	}
	s, err := nkeys.CreatePairWithRand(nkeys.PrefixByteServer, rand)
	if err != nil {
		return NodeKeys{}, fmt.Errorf("ctlauth: node %s signing key: %w", node, err)
	}
	c, err := nkeys.CreateCurveKeysWithRand(rand)
	if err != nil {
		return NodeKeys{}, fmt.Errorf("ctlauth: node %s curve key: %w", node, err)
	}
	return NodeKeys{Node: node, Signing: s, Curve: c}, nil
}

// Card returns the public part of k, for the node to publish.
func (k NodeKeys) Card() (NodeCard, error) {
	s, err := k.Signing.PublicKey()
	if err != nil {
		return NodeCard{}, fmt.Errorf("ctlauth: node %s: %w", k.Node, err)
	}
	c, err := k.Curve.PublicKey()
	if err != nil {
		return NodeCard{}, fmt.Errorf("ctlauth: node %s: %w", k.Node, err)
	}
	card := NodeCard{Node: k.Node, SigningKey: s, CurveKey: c}
	return card, card.Validate()
}

// NodeCard is what a node publishes about its keys, inside a message it signs with
// SigningKey (its node info): a launcher that trusts SigningKey (KnownNodes) learns from
// it the key to seal the node's secrets for.
type NodeCard struct {
	Node       string `msgpack:"node"`
	SigningKey string `msgpack:"signing_key"`
	CurveKey   string `msgpack:"curve_key"`
}

// Validate checks the card's form.
func (c NodeCard) Validate() error {
	if err := job.ValidateNode(c.Node); err != nil {
		return fmt.Errorf("ctlauth: node card: %w", err)
	}
	if !nkeys.IsValidPublicServerKey(c.SigningKey) {
		return fmt.Errorf("ctlauth: node card of %s: signing key %.60q is not a server key", c.Node, c.SigningKey)
	}
	if !nkeys.IsValidPublicCurveKey(c.CurveKey) {
		return fmt.Errorf("ctlauth: node card of %s: %.60q is not a curve key", c.Node, c.CurveKey)
	}
	return nil
}

// CardFromMessage returns the NodeCard in the body of m, a message a KeyVerifier verified,
// after checking that the card names the node and the key that signed it.
func CardFromMessage(m Message) (NodeCard, error) {
	var c NodeCard
	if err := job.Decode(m.Body, &c); err != nil {
		return NodeCard{}, fmt.Errorf("%w: node card: %v", ErrMalformed, err)
	}
	if err := c.Validate(); err != nil {
		return NodeCard{}, err
	}
	if m.From.Role != RoleNode || m.From.Node != c.Node || m.Key != c.SigningKey {
		return NodeCard{}, fmt.Errorf("%w: card of node %s (key %s) sent by %s with key %s", ErrUntrusted, c.Node, c.SigningKey, m.From, m.Key)
	}
	return c, nil
}

// sealed is the plaintext of a sealed secret: binding the job id keeps a secret sealed for
// one job from being passed off as another's.
type sealed struct {
	Job    string   `msgpack:"job"`
	Secret []byte   `msgpack:"secret"`
	Env    []string `msgpack:"env,omitempty"` // SealEnv's boxes; then Secret is empty
}

// SealSecret encrypts job jobID's secret for node to's curve key, authenticated as coming
// from the curve key pair from (the launcher's, fresh per job; its public key goes with the
// signed spawn request). rand supplies the nonce.
func SealSecret(jobID string, secret []byte, from nkeys.KeyPair, to NodeCard, rand io.Reader) ([]byte, error) {
	if err := job.ValidateID(jobID); err != nil {
		return nil, fmt.Errorf("ctlauth: %w", err)
	}
	if err := to.Validate(); err != nil {
		return nil, err
	}
	plain, err := msgpack.Marshal(&sealed{Job: jobID, Secret: secret})
	if err != nil {
		return nil, fmt.Errorf("ctlauth: seal: %w", err)
	}
	box, err := from.SealWithRand(plain, to.CurveKey, rand)
	if err != nil {
		return nil, fmt.Errorf("ctlauth: seal the secret of job %s for node %s: %w", jobID, to.Node, err)
	}
	return box, nil
}

// OpenSecret decrypts a secret of job jobID sealed for node by the curve key fromCurveKey.
func OpenSecret(jobID string, box []byte, fromCurveKey string, node nkeys.KeyPair) ([]byte, error) {
	plain, err := node.Open(box, fromCurveKey)
	if err != nil {
		return nil, fmt.Errorf("%w: of job %s from %.60s: %v", ErrCannotOpen, jobID, fromCurveKey, err)
	}
	var s sealed
	if err := job.Decode(plain, &s); err != nil {
		return nil, fmt.Errorf("%w: of job %s: %v", ErrCannotOpen, jobID, err)
	}
	if s.Job != jobID {
		return nil, fmt.Errorf("%w: sealed for job %.64q, not %s", ErrCannotOpen, s.Job, jobID)
	}
	if len(s.Env) > 0 {
		return nil, fmt.Errorf("%w: of job %s: an environment box, not a secret", ErrCannotOpen, jobID)
	}
	return s.Secret, nil
}

// SealEnv encrypts environment entries (KEY=VALUE) of job jobID's ranks that must not travel
// in clear — NATS credentials — for node to's curve key, from the launcher's per-job curve
// key pair from, as SealSecret does for the job's secret.
func SealEnv(jobID string, env []string, from nkeys.KeyPair, to NodeCard, rand io.Reader) ([]byte, error) {
	if err := job.ValidateID(jobID); err != nil {
		return nil, fmt.Errorf("ctlauth: %w", err)
	}
	if len(env) == 0 {
		return nil, fmt.Errorf("ctlauth: seal the environment of job %s: nothing to seal", jobID)
	}
	if err := to.Validate(); err != nil {
		return nil, err
	}
	plain, err := msgpack.Marshal(&sealed{Job: jobID, Env: env})
	if err != nil {
		return nil, fmt.Errorf("ctlauth: seal: %w", err)
	}
	box, err := from.SealWithRand(plain, to.CurveKey, rand)
	if err != nil {
		return nil, fmt.Errorf("ctlauth: seal the environment of job %s for node %s: %w", jobID, to.Node, err)
	}
	return box, nil
}

// OpenEnv decrypts environment entries of job jobID sealed for node by fromCurveKey
// (SealEnv). A secret's box does not open as an environment, nor the reverse.
func OpenEnv(jobID string, box []byte, fromCurveKey string, node nkeys.KeyPair) ([]string, error) {
	plain, err := node.Open(box, fromCurveKey)
	if err != nil {
		return nil, fmt.Errorf("%w: environment of job %s from %.60s: %v", ErrCannotOpen, jobID, fromCurveKey, err)
	}
	var s sealed
	if err := job.Decode(plain, &s); err != nil {
		return nil, fmt.Errorf("%w: environment of job %s: %v", ErrCannotOpen, jobID, err)
	}
	if s.Job != jobID {
		return nil, fmt.Errorf("%w: environment sealed for job %.64q, not %s", ErrCannotOpen, s.Job, jobID)
	}
	if len(s.Secret) > 0 || len(s.Env) == 0 {
		return nil, fmt.Errorf("%w: of job %s: not an environment box", ErrCannotOpen, jobID)
	}
	return s.Env, nil
}

// SignedCard returns k's card signed by its signing key for job.NodeCardSubject, as
// job.NodeInfo.Card carries it.
func (k NodeKeys) SignedCard(now time.Time) ([]byte, error) {
	card, err := k.Card()
	if err != nil {
		return nil, err
	}
	body, err := job.Encode(card)
	if err != nil {
		return nil, fmt.Errorf("ctlauth: key card: %w", err)
	}
	w, err := NewKeyWrapper(k.Signing, Sender{Role: RoleNode, Node: k.Node}, 0)
	if err != nil {
		return nil, err
	}
	return w.Wrap(job.NodeCardSubject(k.Node), body, now)
}
