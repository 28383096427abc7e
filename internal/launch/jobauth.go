package launch

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// jobKeySubject says whether messages on subject travel under the job key (ctlauth
// envelopes): the events and the reconfiguration log mpirun sends the ranks, and the ranks'
// aborts, lost-peer reports and migration requests and reports. The job's other subjects are not authenticated yet (see
// docs/security.md).
func jobKeySubject(jobID, subject string) bool {
	switch subject {
	case job.EventSubject(jobID), job.AbortSubject(jobID), job.LostSubject(jobID),
		job.ReconfSubject(jobID), job.SuccessorGoneSubject(jobID), job.MigrateSubject(jobID), job.MigratedSubject(jobID):
		return true
	}
	return false
}

// encodeReply encodes a reply to a request: the reconfiguration log goes under the job key
// (a rank acts on its entries), other replies in clear.
func (r *runner) encodeReply(inbox string, v any) ([]byte, error) {
	if _, ok := v.(reconf.Log); ok {
		return r.auth.Encode(inbox, v, time.Now())
	}
	return job.Encode(v)
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
