package ctlauth

import (
	"errors"
	"fmt"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// ErrNoJobKeys: a job info reply cannot be verified without a keyring.
var ErrNoJobKeys = errors.New("ctlauth: no job keys to verify with")

// DecodeJobInfo verifies the reply of job jobID's launcher to a job.JobInfoSubject request,
// received on subject (the requester's inbox, which the launcher's envelope is bound to),
// and decodes it. Nodes act on it (a drain shrinks a job its info calls malleable, the IOS
// manager grows one), so anything but the launcher's answer under the job's key is refused:
// a node that never started a rank of the job (ErrUnknownJob), a forgery (ErrForged), a
// replay, an answer from another sender, or an info of another job.
func (r *JobKeyring) DecodeJobInfo(jobID, subject string, data []byte, now time.Time) (job.JobInfo, error) {
	if r == nil {
		return job.JobInfo{}, ErrNoJobKeys
	}
	var info job.JobInfo
	from, err := r.Decode(jobID, subject, data, &info, now)
	if err != nil {
		return job.JobInfo{}, err
	}
	return info, checkJobInfo(jobID, from, info)
}

// DecodeJobInfo verifies and decodes a job info reply under k, as JobKeyring.DecodeJobInfo:
// what a job's owner, who holds its key (jobrecord.Record.Key), checks its answer with.
func (k JobKey) DecodeJobInfo(subject string, data []byte, now time.Time) (job.JobInfo, error) {
	var info job.JobInfo
	from, err := k.Decode(subject, data, &info, now)
	if err != nil {
		return job.JobInfo{}, err
	}
	return info, checkJobInfo(k.job, from, info)
}

// Decode verifies data, a message under k received on subject (a reply bound to the
// requester's inbox), decodes its body into v and returns its sender.
func (k JobKey) Decode(subject string, data []byte, v any, now time.Time) (Sender, error) {
	verifier, err := NewJobVerifier(k, ReplayOptions{})
	if err != nil {
		return Sender{}, err
	}
	m, err := verifier.Verify(subject, data, now)
	if err != nil {
		return Sender{}, err
	}
	if err := job.Decode(m.Body, v); err != nil {
		return Sender{}, fmt.Errorf("%w: body from %s on %s: %v", ErrMalformed, m.From, subject, err)
	}
	return m.From, nil
}

// DecodeUnverified decodes into v the body of data, an envelope, without verifying it, or
// data itself if it is no envelope (a sender that signs nothing): for a receiver that holds
// no key to verify with, which must treat what it reads as unauthenticated.
func DecodeUnverified(data []byte, v any) error {
	if e, err := DecodeEnvelope(data); err == nil {
		return job.Decode(e.Body, v)
	}
	return job.Decode(data, v)
}

func checkJobInfo(jobID string, from Sender, info job.JobInfo) error {
	switch {
	case from.Role != RoleLauncher:
		return fmt.Errorf("%w: job %s's info from %s, not its launcher", ErrForged, jobID, from)
	case info.Job != jobID:
		return fmt.Errorf("%w: job %s's info describes job %.64q", ErrMalformed, jobID, info.Job)
	case info.Size < 1:
		return fmt.Errorf("%w: job %s's info gives %d ranks", ErrMalformed, jobID, info.Size)
	}
	return nil
}
