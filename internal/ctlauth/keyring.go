package ctlauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// Errors of a JobKeyring.
var (
	// ErrUnknownJob: the keyring holds no key for the job (the node never opened its secret
	// since it started, or forgot it).
	ErrUnknownJob = errors.New("ctlauth: no key known for this job")
	// ErrKeyConflict: a job id the keyring knows was presented with another secret (someone
	// reusing another job's id).
	ErrKeyConflict = errors.New("ctlauth: job already known with another key")
)

// DefaultKeyringJobs is how many jobs a JobKeyring remembers by default.
const DefaultKeyringJobs = 4096

// JobKeyring holds the keys of the jobs a node has started ranks of: it learns each from the
// secret of a verified spawn request (opened from its sealed box) and verifies, under the
// key of the job a message claims, everything those jobs' processes send the node — piece
// requests, buddy copies, manifest requests, profiles, keepalives — and authenticates the
// node's replies to them. A job id, once learned, is pinned to its key: a later spawn of the
// same id with another secret is refused (ErrKeyConflict). It remembers at most a bounded
// number of jobs, forgetting the least recently used. Safe for concurrent use.
type JobKeyring struct {
	from      Sender // the node's identity in its replies
	notBefore time.Time
	max       int

	mu   sync.Mutex
	jobs map[string]*ringEntry
	tick uint64 // use counter, for least-recently-used eviction
	dir  string // where the keys are kept across restarts (Persist); "" = memory only
}

type ringEntry struct {
	key   JobKey
	owner string
	reads []string // other jobs whose checkpoints this one restarts from
	used  uint64
	v     *JobVerifier
	w     *JobWrapper
}

// NewJobKeyring returns an empty keyring of the process from (a node: RoleNode), started at
// now (messages sent before it are refused, so nothing it forgot can be replayed to it),
// remembering at most max jobs (0: DefaultKeyringJobs).
func NewJobKeyring(from Sender, max int, now time.Time) (*JobKeyring, error) {
	if err := from.Validate(); err != nil {
		return nil, err
	}
	if max == 0 {
		max = DefaultKeyringJobs
	}
	if max < 0 {
		return nil, fmt.Errorf("ctlauth: keyring of %d jobs", max)
	}
	return &JobKeyring{from: from, notBefore: now.Add(-channelGrace), max: max, jobs: map[string]*ringEntry{}}, nil
}

// Learn records the key of job jobID, derived from its secret, and who started it (owner:
// the launcher key that signed the spawn, "" for an unsigned one). A job already known keeps
// its key and owner: another secret is refused with ErrKeyConflict.
func (r *JobKeyring) Learn(jobID string, secret []byte, owner string) error {
	key, err := DeriveJobKey(jobID, secret)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tick++
	if e := r.jobs[jobID]; e != nil {
		if !hmac.Equal(e.key.mac, key.mac) {
			return fmt.Errorf("%w: job %s", ErrKeyConflict, jobID)
		}
		e.used = r.tick
		return nil
	}
	v, err := NewJobVerifier(key, ReplayOptions{NotBefore: r.notBefore})
	if err != nil {
		return err
	}
	w, err := NewJobWrapper(key, r.from, uint64(time.Now().UnixNano()))
	if err != nil {
		return err
	}
	if len(r.jobs) >= r.max {
		r.evictLocked()
	}
	e := &ringEntry{key: key, owner: owner, used: r.tick, v: v, w: w}
	if err := r.saveLocked(jobID, e); err != nil {
		return err
	}
	r.jobs[jobID] = e
	return nil
}

// evictLocked forgets the least recently used job. r.mu held.
func (r *JobKeyring) evictLocked() {
	oldest, at := "", uint64(0)
	for id, e := range r.jobs {
		if oldest == "" || e.used < at {
			oldest, at = id, e.used
		}
	}
	delete(r.jobs, oldest)
	if r.dir != "" {
		os.Remove(filepath.Join(r.dir, oldest+keyFileExt))
	}
}

func (r *JobKeyring) entry(jobID string) (*ringEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.jobs[jobID]
	if e == nil {
		return nil, fmt.Errorf("%w: job %.64q", ErrUnknownJob, jobID)
	}
	r.tick++
	e.used = r.tick
	return e, nil
}

// Owner returns who started job jobID (Learn's owner) and whether the job is known.
func (r *JobKeyring) Owner(jobID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.jobs[jobID]
	if e == nil {
		return "", false
	}
	return e.owner, true
}

// maxReads bounds the jobs one job may read the checkpoints of.
const maxReads = 16

// AllowRead records that the processes of job jobID, which must be known, may read the
// checkpoints of job other: jobID restarts from them (a typed field of a verified spawn).
func (r *JobKeyring) AllowRead(jobID, other string) error {
	if err := job.ValidateID(other); err != nil {
		return fmt.Errorf("ctlauth: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.jobs[jobID]
	switch {
	case e == nil:
		return fmt.Errorf("%w: job %.64q", ErrUnknownJob, jobID)
	case other == jobID || slices.Contains(e.reads, other):
		return nil
	case len(e.reads) >= maxReads:
		return fmt.Errorf("ctlauth: job %s already restarts from %d jobs", jobID, len(e.reads))
	}
	e.reads = append(e.reads, other)
	return r.saveLocked(jobID, e)
}

// MayRead reports whether the processes of job jobID may read the checkpoints of job other:
// their own, or those of a job they restart from (AllowRead).
func (r *JobKeyring) MayRead(jobID, other string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.jobs[jobID]
	return e != nil && (other == jobID || slices.Contains(e.reads, other))
}

// Decode verifies data received on subject under the key of job jobID (the error wraps
// ErrUnknownJob, ErrForged, ErrReplay, ErrStale or ErrMalformed) and decodes its body into
// v. It returns the verified sender.
func (r *JobKeyring) Decode(jobID, subject string, data []byte, v any, now time.Time) (Sender, error) {
	e, err := r.entry(jobID)
	if err != nil {
		return Sender{}, err
	}
	m, err := e.v.Verify(subject, data, now)
	if err != nil {
		return Sender{}, err
	}
	if err := job.Decode(m.Body, v); err != nil {
		return Sender{}, fmt.Errorf("%w: body from %s on %s: %v", ErrMalformed, m.From, subject, err)
	}
	return m.From, nil
}

// Encode returns v encoded and authenticated under job jobID's key for publication on
// subject, as sent by the keyring's process (a reply to one of the job's processes).
func (r *JobKeyring) Encode(jobID, subject string, v any, now time.Time) ([]byte, error) {
	e, err := r.entry(jobID)
	if err != nil {
		return nil, err
	}
	body, err := job.Encode(v)
	if err != nil {
		return nil, err
	}
	return e.w.Wrap(subject, body, now)
}

// CheckOfferProof reports whether proof is job jobID's proof for the offer token token
// (OfferProof): only a process holding the job's key could compute it.
func (r *JobKeyring) CheckOfferProof(jobID string, token, proof []byte) bool {
	e, err := r.entry(jobID)
	if err != nil {
		return false
	}
	return hmac.Equal(e.key.OfferProof(token), proof)
}

// OfferProofSize is the length of an OfferProof.
const OfferProofSize = sha256.Size

// OfferProof is what a job's process presents to take a one-time offer a node made it (a
// piece to read, a buddy copy to send): an HMAC of the offer's token under the job key. The
// token itself travels in the node's reply, which other NATS clients may read; the proof
// shows that whoever connects also holds the key.
func (k JobKey) OfferProof(token []byte) []byte {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte("mpios piece offer v1\x00"))
	m.Write(token)
	return m.Sum(nil)
}

// OfferProof returns the proof of the channel's job for the offer token token.
func (c *JobChannel) OfferProof(token []byte) []byte { return c.w.key.OfferProof(token) }

// Job returns the id of the channel's job.
func (c *JobChannel) Job() string { return c.w.key.job }

// Open verifies data received on subject under the key of job jobID, as Decode, and returns
// its body undecoded (a JSON profile, an empty keepalive) and its sender.
func (r *JobKeyring) Open(jobID, subject string, data []byte, now time.Time) ([]byte, Sender, error) {
	e, err := r.entry(jobID)
	if err != nil {
		return nil, Sender{}, err
	}
	m, err := e.v.Verify(subject, data, now)
	if err != nil {
		return nil, Sender{}, err
	}
	return m.Body, m.From, nil
}

// keyFileExt ends the name of a job's key file in a Persist directory.
const keyFileExt = ".jobkey"

// keyFile is what a Persist directory holds per job.
type keyFile struct {
	Job   string   `json:"job"`
	Key   []byte   `json:"key"` // the derived job key, not the job's secret
	Owner string   `json:"owner,omitempty"`
	Reads []string `json:"reads,omitempty"`
}

// Persist keeps the keyring's jobs in dir (created 0700, one 0600 file per job) and loads
// those already there: a node that restarts still serves the checkpoints it holds to the
// jobs it learned before, and still refuses their ids to others. Call it before any Learn.
// The files hold derived job keys: dir must be as private as the checkpoints beside it.
func (r *JobKeyring) Persist(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ctlauth: keyring: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("ctlauth: keyring: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ents {
		name, ok := strings.CutSuffix(d.Name(), keyFileExt)
		if !ok || d.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, d.Name()))
		var f keyFile
		if err != nil || json.Unmarshal(b, &f) != nil || f.Job != name || job.ValidateID(f.Job) != nil || len(f.Key) != macSize || len(r.jobs) >= r.max {
			continue // a damaged or foreign file: the job is learned again at its next spawn
		}
		key := JobKey{job: f.Job, mac: f.Key}
		v, err := NewJobVerifier(key, ReplayOptions{NotBefore: r.notBefore})
		if err != nil {
			continue
		}
		w, err := NewJobWrapper(key, r.from, uint64(time.Now().UnixNano()))
		if err != nil {
			continue
		}
		r.tick++
		r.jobs[f.Job] = &ringEntry{key: key, owner: f.Owner, reads: f.Reads, used: r.tick, v: v, w: w}
	}
	r.dir = dir
	return nil
}

// saveLocked writes e's file when the keyring persists. r.mu held.
func (r *JobKeyring) saveLocked(jobID string, e *ringEntry) error {
	if r.dir == "" {
		return nil
	}
	b, err := json.Marshal(keyFile{Job: jobID, Key: e.key.mac, Owner: e.owner, Reads: e.reads})
	if err != nil {
		return fmt.Errorf("ctlauth: keyring: %w", err)
	}
	tmp, err := os.CreateTemp(r.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("ctlauth: keyring: %w", err)
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(r.dir, jobID+keyFileExt))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("ctlauth: keyring: keep the key of job %s: %w", jobID, werr)
	}
	return nil
}
