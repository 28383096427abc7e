package ctlauth

import (
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/vmihailenco/msgpack/v5"
)

// KeyWrapper signs the messages one process sends with its NKey: a launcher with a user
// key (prefix U, the kind node operators list in their AuthorizedKeys), a node with a server
// key (prefix N). Safe for concurrent use. See JobWrapper for the numbering.
type KeyWrapper struct {
	kp   nkeys.KeyPair
	pub  string
	from Sender
	seq  sequence
}

// NewKeyWrapper returns a wrapper that signs with kp (which must hold a private key) as
// from, numbering from first (0 means 1).
func NewKeyWrapper(kp nkeys.KeyPair, from Sender, first uint64) (*KeyWrapper, error) {
	if err := from.Validate(); err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("ctlauth: signing key: %w", err)
	}
	if !nkeys.IsValidPublicKey(pub) || nkeys.IsValidPublicCurveKey(pub) {
		return nil, fmt.Errorf("ctlauth: signing key %s is not a signing NKey", pub)
	}
	if _, err := kp.PrivateKey(); err != nil {
		return nil, fmt.Errorf("ctlauth: signing key %s: %w", pub, err)
	}
	return &KeyWrapper{kp: kp, pub: pub, from: from, seq: sequence{next: first}}, nil
}

// PublicKey returns the public key receivers must trust.
func (w *KeyWrapper) PublicKey() string { return w.pub }

// Wrap returns body signed for publication on subject at time now.
func (w *KeyWrapper) Wrap(subject string, body []byte, now time.Time) ([]byte, error) {
	e, err := newEnvelope(subject, SchemeNKeySign, w.from, w.pub, w.seq.take(), body, now)
	if err != nil {
		return nil, err
	}
	if e.Auth, err = w.kp.Sign(e.signedBytes(subject)); err != nil {
		return nil, fmt.Errorf("ctlauth: sign with %s: %w", w.pub, err)
	}
	return msgpack.Marshal(&e)
}

// KeySet says which signing keys a receiver trusts, and for which sender identity.
type KeySet interface {
	// Trust returns nil if messages signed by publicKey and claiming to come from sender
	// may be acted on, else an error saying why not.
	Trust(publicKey string, sender Sender) error
}

// KeyVerifier verifies signed messages against a KeySet and refuses replays. Safe for
// concurrent use.
type KeyVerifier struct {
	keys  KeySet
	guard lockedGuard
}

// NewKeyVerifier returns a verifier trusting keys.
func NewKeyVerifier(keys KeySet, opts ReplayOptions) (*KeyVerifier, error) {
	if keys == nil {
		return nil, fmt.Errorf("ctlauth: key verifier: no key set")
	}
	g, err := NewReplayGuard(opts)
	if err != nil {
		return nil, err
	}
	return &KeyVerifier{keys: keys, guard: lockedGuard{g: g}}, nil
}

// VerifyStatement checks the signature of data as published on subject and that keys trust
// its signer, but neither its time nor its number: for standing statements that are sent
// again unchanged, such as a node's NodeCard in every heartbeat, never for requests.
func VerifyStatement(subject string, data []byte, keys KeySet) (Message, error) {
	e, err := decodeScheme(data, subject, SchemeNKeySign)
	if err != nil {
		return Message{}, err
	}
	if err := verifySigned(&e, subject, keys); err != nil {
		return Message{}, err
	}
	m := e.message()
	m.Key = e.Key
	return m, nil
}

func verifySigned(e *Envelope, subject string, keys KeySet) error {
	pk, err := nkeys.FromPublicKey(e.Key)
	if err != nil {
		return fmt.Errorf("%w: key %.60q: %v", ErrMalformed, e.Key, err)
	}
	if err := pk.Verify(e.signedBytes(subject), e.Auth); err != nil {
		return fmt.Errorf("%w: message from %s signed by %s on %s", ErrForged, e.From, e.Key, subject)
	}
	// Trust after the signature: the key set's answer then concerns the key's real holder.
	if err := keys.Trust(e.Key, e.From); err != nil {
		return fmt.Errorf("%w: %s as %s on %s: %v", ErrUntrusted, e.Key, e.From, subject, err)
	}
	return nil
}

// AnyKey is the KeySet of a receiver configured to trust every signer (pcmd serve
// --insecure-open, a launcher without a known-nodes file): a signature then proves only
// that the message was not altered, and that its signer holds the key it names.
type AnyKey struct{}

// Trust implements KeySet.
func (AnyKey) Trust(string, Sender) error { return nil }

// NodeKey is the KeySet that trusts node Node's signatures made with Key alone: a drain's
// requester (the node's operator, who holds its seed) and the node itself, or what a node
// answers to whoever knows its key. With AnyKey set it trusts any key signing as Node: the
// client of a node started with --insecure-open, which knows no key of it (the signature
// then proves only that the message was not altered). The zero Key trusts nothing.
type NodeKey struct {
	Node, Key string
	AnyKey    bool
}

// Trust implements KeySet.
func (k NodeKey) Trust(publicKey string, s Sender) error {
	switch {
	case s.Role != RoleNode || s.Node != k.Node:
		return fmt.Errorf("signed as %s, not as node %s", s, k.Node)
	case k.AnyKey:
		return nil
	case k.Key == "" || publicKey != k.Key:
		return fmt.Errorf("not node %s's own key", k.Node)
	}
	return nil
}

// Verify authenticates data received on subject at time now and returns its content; the
// signer is Message.Key. The error wraps ErrMalformed, ErrForged, ErrUntrusted, ErrStale,
// ErrReplay or ErrTooManySenders.
func (v *KeyVerifier) Verify(subject string, data []byte, now time.Time) (Message, error) {
	e, err := decodeScheme(data, subject, SchemeNKeySign)
	if err != nil {
		return Message{}, err
	}
	if err := verifySigned(&e, subject, v.keys); err != nil {
		return Message{}, err
	}
	if err := v.guard.accept(e.Key+" "+e.From.String(), &e, now); err != nil {
		return Message{}, fmt.Errorf("%s: %w", subject, err)
	}
	m := e.message()
	m.Key = e.Key
	return m, nil
}

// Wrapper authenticates the messages of one sender: a JobWrapper under the job key, a
// KeyWrapper with an NKey. Requesters that may be either (a job's owner, a node) take one.
type Wrapper interface {
	Wrap(subject string, body []byte, now time.Time) ([]byte, error)
}

var (
	_ Wrapper = (*JobWrapper)(nil)
	_ Wrapper = (*KeyWrapper)(nil)
)
