package ctlauth

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// JobChannel is one process's authenticated view of its job's subjects: what it encodes
// carries its identity under the job key, and what it decodes must verify under that key,
// once. Numbers start from the clock, so a process that restarts with the same identity (a
// recovered rank) does not reuse numbers its receivers have seen. Safe for concurrent use.
type JobChannel struct {
	w *JobWrapper
	v *JobVerifier
}

// channelGrace is how long before a channel's creation messages may have been sent: peers'
// clocks disagree a little, and a message sent just before this process started may be
// for it (an event of the job it joins).
const channelGrace = 2 * time.Second

// NewJobChannel returns the channel of the process from in job jobID, whose secret is
// secret (job.Env.Secret), created at now.
func NewJobChannel(jobID string, secret []byte, from Sender, now time.Time) (*JobChannel, error) {
	key, err := DeriveJobKey(jobID, secret)
	if err != nil {
		return nil, err
	}
	w, err := NewJobWrapper(key, from, uint64(now.UnixNano()))
	if err != nil {
		return nil, err
	}
	v, err := NewJobVerifier(key, ReplayOptions{NotBefore: now.Add(-channelGrace)})
	if err != nil {
		return nil, err
	}
	return &JobChannel{w: w, v: v}, nil
}

// Encode returns v encoded (job.Encode) and authenticated for publication on subject.
func (c *JobChannel) Encode(subject string, v any, now time.Time) ([]byte, error) {
	body, err := job.Encode(v)
	if err != nil {
		return nil, err
	}
	return c.w.Wrap(subject, body, now)
}

// Decode verifies data received on subject (forgeries, other jobs' messages and replays
// are refused: the error wraps ErrForged, ErrReplay, ErrStale or ErrMalformed) and decodes
// its body into v. It returns the verified sender.
func (c *JobChannel) Decode(subject string, data []byte, v any, now time.Time) (Sender, error) {
	m, err := c.v.Verify(subject, data, now)
	if err != nil {
		return Sender{}, err
	}
	if err := job.Decode(m.Body, v); err != nil {
		return Sender{}, fmt.Errorf("%w: body from %s on %s: %v", ErrMalformed, m.From, subject, err)
	}
	return m.From, nil
}

// Open verifies data received on subject and returns its body, undecoded, and its sender.
func (c *JobChannel) Open(subject string, data []byte, now time.Time) ([]byte, Sender, error) {
	m, err := c.v.Verify(subject, data, now)
	if err != nil {
		return nil, Sender{}, err
	}
	return m.Body, m.From, nil
}

// Wrap returns body, already encoded (a JSON profile), authenticated for publication on
// subject.
func (c *JobChannel) Wrap(subject string, body []byte, now time.Time) ([]byte, error) {
	return c.w.Wrap(subject, body, now)
}
