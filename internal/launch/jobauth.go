package launch

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/supervisor"
)

// jobKeySubject says whether messages mpirun publishes on subject travel under the job key
// (ctlauth envelopes): the events, the reconfiguration log and the reports of a successor's
// or a resize joiner's end. Everything the ranks send mpirun travels under it too (open).
func jobKeySubject(jobID, subject string) bool {
	switch subject {
	case job.EventSubject(jobID), job.AbortSubject(jobID), job.LostSubject(jobID),
		job.ReconfSubject(jobID), job.SuccessorGoneSubject(jobID), job.MigrateSubject(jobID), job.MigratedSubject(jobID),
		job.ResizeGoneSubject(jobID):
		return true
	}
	return false
}

// encodeReply encodes a reply to a request under the job key, bound to the requester's
// inbox: to the ranks (the rendezvous and resize tables, the reconfiguration log, the
// successor's start) and the job info, which nodes act on (a drain shrinks, the IOS manager
// grows a job its info calls malleable): they verify it with the key they learnt from the
// job's spawns, its owner with the job record; and the answers to control requests, which a
// node that only joined the job, holding no key, reads unverified.
func (r *runner) encodeReply(inbox string, v any) ([]byte, error) {
	return r.auth.Encode(inbox, v, time.Now())
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

// nodeKeyStarter is a Starter that knows the signing keys of its nodes (nodeclient.Remote):
// control requests those nodes sign are verified with them.
type nodeKeyStarter interface {
	NodeKeys() ctlauth.KeySet
}

// errUnsignedControl answers a control request that is neither under the job key nor
// signed by a node of the job.
var errUnsignedControl = errors.New("control requests must be signed: with the job's key, which " +
	"only its owner holds (pcmd reads it from mpirun's job record), or by a node of the job")

// openControl authenticates a control request: under the job key it is the owner's, signed
// with a node's pinned key it is that node's (supervisor.AuthorizeControl decides what
// each may ask for).
func (r *runner) openControl(m *nats.Msg) (supervisor.Requester, []byte, error) {
	e, err := ctlauth.DecodeEnvelope(m.Data)
	if err != nil {
		return supervisor.Requester{}, nil, errUnsignedControl
	}
	now := time.Now()
	switch e.Scheme {
	case ctlauth.SchemeJobMAC:
		body, _, err := r.auth.Open(m.Subject, m.Data, now)
		if err != nil {
			return supervisor.Requester{}, nil, err
		}
		return supervisor.Requester{Owner: true}, body, nil
	case ctlauth.SchemeNKeySign:
		if r.nodeCtl == nil {
			return supervisor.Requester{}, nil, fmt.Errorf("%w (the job runs no rank on pcmd nodes with key cards)", errUnsignedControl)
		}
		msg, err := r.nodeCtl.Verify(m.Subject, m.Data, now)
		if err != nil {
			return supervisor.Requester{}, nil, err
		}
		return supervisor.Requester{Node: msg.From.Node}, msg.Body, nil
	}
	return supervisor.Requester{}, nil, errUnsignedControl
}

// refuseControl answers a control request that did not authenticate, without the Machine.
func (r *runner) refuseControl(m *nats.Msg, err error) {
	r.stderr.logf("refusing a control request: %v", err)
	if m.Reply == "" {
		return
	}
	if data, eerr := job.Encode(job.ControlReply{Error: "mpirun: " + err.Error()}); eerr == nil {
		_ = r.nc.Publish(m.Reply, data)
	}
}
