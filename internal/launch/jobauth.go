package launch

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
)

// jobKeySubject says whether messages on subject travel under the job key (ctlauth
// envelopes): the events mpirun sends the ranks, and the ranks' aborts and lost-peer
// reports, which end the job. The job's other subjects are not authenticated yet (see
// docs/security.md).
func jobKeySubject(jobID, subject string) bool {
	switch subject {
	case job.EventSubject(jobID), job.AbortSubject(jobID), job.LostSubject(jobID):
		return true
	}
	return false
}

// encode encodes v for publication on subject, under the job key where that subject needs it.
func (r *runner) encode(subject string, v any) ([]byte, error) {
	if jobKeySubject(r.cfg.JobID, subject) {
		return r.auth.Encode(subject, v, time.Now())
	}
	return job.Encode(v)
}

// open verifies a message that must come from one of the job's processes and returns its
// body; a forgery or replay is logged and dropped before the Machine sees it.
func (r *runner) open(m *nats.Msg) ([]byte, bool) {
	body, _, err := r.auth.Open(m.Subject, m.Data, time.Now())
	if err != nil {
		r.stderr.logf("ignoring a message on %s: %v", m.Subject, err)
		return nil, false
	}
	return body, true
}
