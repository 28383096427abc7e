package ctlauth

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/job"
)

// MinSecret is the shortest job secret accepted, as job.FromEnviron requires.
const MinSecret = 16

// JobKey authenticates one job's control messages. It is derived from the job's secret
// (MPIOS_SECRET, which the ranks already hold for the data plane) and the job id, so that the
// data-plane handshake and the control plane never use the same key, and a key of one job
// verifies nothing of another.
type JobKey struct {
	job string
	mac []byte
}

// DeriveJobKey derives the control-plane key of job jobID from its secret (HKDF-SHA256).
func DeriveJobKey(jobID string, secret []byte) (JobKey, error) {
	if err := job.ValidateID(jobID); err != nil {
		return JobKey{}, fmt.Errorf("ctlauth: %w", err)
	}
	if len(secret) < MinSecret {
		return JobKey{}, fmt.Errorf("ctlauth: job %s: secret of %d bytes, want at least %d", jobID, len(secret), MinSecret)
	}
	k, err := hkdf.Key(sha256.New, secret, nil, "mpios control plane v1\x00"+jobID, sha256.Size)
	if err != nil {
		return JobKey{}, fmt.Errorf("ctlauth: derive key of job %s: %w", jobID, err)
	}
	return JobKey{job: jobID, mac: k}, nil
}

// Job returns the id of the job the key belongs to.
func (k JobKey) Job() string { return k.job }

func (k JobKey) tag(e *Envelope, subject string) []byte {
	m := hmac.New(sha256.New, k.mac)
	m.Write(e.signedBytes(subject))
	return m.Sum(nil)
}

// sequence hands out a sender's sequence numbers; safe for concurrent use.
type sequence struct {
	mu   sync.Mutex
	next uint64
}

func (s *sequence) take() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == 0 {
		s.next = 1
	}
	n := s.next
	s.next++
	return n
}

// JobWrapper authenticates the messages one process of a job sends. Safe for concurrent
// use. Numbers go up from first: a process that takes over an identity another process held
// (a restarted sender) must start above every number its predecessor used — its start
// time in Unix nanoseconds is a simple choice — or use another Sender (a rank's Incarnation).
type JobWrapper struct {
	key  JobKey
	from Sender
	seq  sequence
}

// NewJobWrapper returns a wrapper that sends as from under key, numbering from first (0
// means 1).
func NewJobWrapper(key JobKey, from Sender, first uint64) (*JobWrapper, error) {
	if key.mac == nil {
		return nil, fmt.Errorf("ctlauth: job wrapper: no key")
	}
	if err := from.Validate(); err != nil {
		return nil, err
	}
	return &JobWrapper{key: key, from: from, seq: sequence{next: first}}, nil
}

// Wrap returns body authenticated for publication on subject at time now.
func (w *JobWrapper) Wrap(subject string, body []byte, now time.Time) ([]byte, error) {
	e, err := newEnvelope(subject, SchemeJobMAC, w.from, "", w.seq.take(), body, now)
	if err != nil {
		return nil, err
	}
	e.Auth = w.key.tag(&e, subject)
	return msgpack.Marshal(&e)
}

// JobVerifier verifies the messages of one job and refuses replays. Safe for concurrent use.
type JobVerifier struct {
	key   JobKey
	guard lockedGuard
}

// NewJobVerifier returns a verifier for key's job.
func NewJobVerifier(key JobKey, opts ReplayOptions) (*JobVerifier, error) {
	if key.mac == nil {
		return nil, fmt.Errorf("ctlauth: job verifier: no key")
	}
	g, err := NewReplayGuard(opts)
	if err != nil {
		return nil, err
	}
	return &JobVerifier{key: key, guard: lockedGuard{g: g}}, nil
}

// Verify authenticates data received on subject at time now and returns its content. The
// error wraps ErrMalformed, ErrForged, ErrStale, ErrReplay or ErrTooManySenders.
func (v *JobVerifier) Verify(subject string, data []byte, now time.Time) (Message, error) {
	e, err := decodeScheme(data, subject, SchemeJobMAC)
	if err != nil {
		return Message{}, err
	}
	if !hmac.Equal(e.Auth, v.key.tag(&e, subject)) {
		return Message{}, fmt.Errorf("%w: message from %s on %s under the key of job %s", ErrForged, e.From, subject, v.key.job)
	}
	if err := v.guard.accept(e.From.String(), &e, now); err != nil {
		return Message{}, fmt.Errorf("job %s, %s: %w", v.key.job, subject, err)
	}
	return e.message(), nil
}
