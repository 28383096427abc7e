package nodeclient

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rankproc"
)

// Replays (job.NodeReplaySubject). NATS delivers nothing to a subscriber whose connection is
// down: after an outage, a node that reconnected before us has published output and exits
// of its ranks that never reached us. Its pcmd keeps them, and we ask again: for the output
// messages missing when a rank's exit arrives, and for the exit of a rank that the node's
// heartbeats no longer list. What is asked again is delivered late, never twice.

// maxReplays bounds the requests of one replay: a node keeps 1 MiB of a rank's output, which
// takes one or two NATS messages.
const maxReplays = 16

// replayMissing asks the rank's node for the output messages not received and delivers
// them. It returns the rank's exit, nil if it runs or the node did not answer (answered
// false). p.outMu must be held.
func (p *remoteProcess) replayMissing() (exit *job.RankExit, answered bool) {
	before := p.received
	after := p.firstMissing()
	for range maxReplays {
		rep, err := p.askReplay(after)
		if err != nil {
			p.r.cfg.Logf("cannot ask node %s again for the output of rank %d: %v", p.node, p.rank, err)
			break
		}
		exit, answered = rep.Exit, true
		for _, o := range rep.Output {
			if validOutput(o) {
				p.takeOutput(o)
			}
			after = max(after, o.Seq)
		}
		if !rep.More || len(rep.Output) == 0 {
			break
		}
	}
	if got := p.received - before; got > 0 {
		p.r.cfg.Logf("%d output messages of rank %d on node %s were lost on the way and fetched again from the node (printed late)", got, p.rank, p.node)
	}
	return exit, answered
}

// firstMissing is the Seq after which output messages may be missing. p.outMu must be held.
func (p *remoteProcess) firstMissing() uint64 {
	if len(p.gaps) > 0 {
		return p.gaps[0][0] - 1
	}
	return p.seen
}

// askReplay asks the rank's node for its output messages after seq after, and its exit.
func (p *remoteProcess) askReplay(after uint64) (job.ReplayReply, error) {
	var rep job.ReplayReply
	subject := job.NodeReplaySubject(p.node)
	data, err := p.auth.encode(subject, job.ReplayRequest{Job: p.job, Rank: p.rank, Out: p.out, After: after})
	if err != nil {
		return rep, err
	}
	// The node answers under the job key, or refuses signed by its own key (it may not
	// know the job's key any more).
	body, err := p.r.askNode(p.node, subject, data, p.r.cfg.RequestTimeout, func(m *nats.Msg) ([]byte, bool) {
		body, err := p.open(m)
		return body, err == nil
	})
	if err != nil {
		return rep, err
	}
	if err := job.Decode(body, &rep); err != nil {
		return rep, fmt.Errorf("malformed answer: %w", job.TrimPrefix(err))
	}
	switch {
	case rep.Error != "":
		return rep, fmt.Errorf("%s", rep.Error)
	case rep.NotFound:
		return rep, fmt.Errorf("node %s does not know rank %d of job %s (any more)", p.node, p.rank, p.job)
	case rep.Exit != nil && !validExit(*rep.Exit):
		return rep, fmt.Errorf("malformed exit in the answer")
	}
	return rep, nil
}

// fillGaps asks the node for the output messages missing before the last one received, as
// soon as the gap shows: lost while our connection was down, the node has them.
func (p *remoteProcess) fillGaps() {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if !p.exited && len(p.gaps) > 0 {
		p.replayMissing() // an exit that came with the replay comes on its subject too, or is asked for then
	}
	p.filling = false
}

// recoverExit asks the node for the exit of a rank that its heartbeats no longer list, whose
// exit message was lost on the way. A node that answers that the rank runs was not listing
// it in heartbeats older than its start (they queue up while we do not run). Without an
// answer the rank's fate is unknown.
func (p *remoteProcess) recoverExit() {
	p.outMu.Lock()
	if p.exited {
		p.outMu.Unlock()
		return
	}
	exit, answered := p.replayMissing()
	p.outMu.Unlock()
	if exit != nil {
		p.takeExit(*exit)
		return
	}
	if answered {
		p.mu.Lock()
		p.recovering, p.unlisted = false, 0
		p.mu.Unlock()
		return
	}
	p.finish(rankproc.Exit{Code: -1, At: time.Now()}, fmt.Errorf("nodeclient: node %s no longer runs rank %d and its exit status was lost", p.node, p.rank))
}
