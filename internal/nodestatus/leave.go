package nodestatus

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
)

// ErrStillThere is WaitLeft's error when the node has not left within the wait.
var ErrStillThere = errors.New("the node has not left")

// leaveWatch decides from a node's answers to info requests when its pcmd has left: once no
// pcmd has answered for the node for as long as its peers take to declare it gone
// (job.MissedBeats heartbeat intervals), so that a pcmd reconnecting to NATS, whose
// subscriptions are briefly gone, is not taken for one that exited.
type leaveWatch struct {
	gone   time.Duration // silence that proves the node gone
	silent time.Time     // the first "no responders" since the last answer; zero while it answers
	last   job.NodeInfo  // the last description the node gave
	heard  bool          // last is set
}

// assumedHeartbeat is the heartbeat interval of a node that never answered (pcmd's default).
const assumedHeartbeat = time.Second

func newLeaveWatch() *leaveWatch {
	return &leaveWatch{gone: job.MissedBeats * assumedHeartbeat}
}

// answered records the node's description: it is still there. It reports whether the
// description says something new (how many ranks it runs).
func (w *leaveWatch) answered(info job.NodeInfo) (changed bool) {
	changed = !w.heard || info.Used != w.last.Used || info.Draining != w.last.Draining
	w.last, w.heard, w.silent = info, true, time.Time{}
	if info.Interval > 0 {
		w.gone = info.GoneAfter()
	}
	return changed
}

// noResponders records that no pcmd listens for the node at now, and reports whether the
// silence has lasted long enough for the node to have left.
func (w *leaveWatch) noResponders(now time.Time) (left bool) {
	if w.silent.IsZero() {
		w.silent = now
	}
	return now.Sub(w.silent) >= w.gone
}

// WaitLeft waits up to timeout for the pcmd of node to exit, as a drained one does once its
// ranks have left: it asks for the node's description (job.NodeInfoSubject) every poll, and
// the node has left once no pcmd has answered for it for job.MissedBeats of its heartbeat
// intervals. Only descriptions keys trusts count (ctlauth.NodeKey); anyone can answer, and a
// forgery can only make the wait last longer. progress, if not nil, gets each description
// that says something new. The error wraps ErrStillThere if the node has not left in time.
func WaitLeft(nc *nats.Conn, node string, keys ctlauth.KeySet, poll, timeout time.Duration, progress func(job.NodeInfo)) error {
	if err := job.ValidateNode(node); err != nil {
		return fmt.Errorf("pcmd: %s", job.TrimPrefix(err).Error())
	}
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	w := newLeaveWatch()
	subj := job.NodeInfoSubject(node)
	deadline := time.Now().Add(timeout)
	for {
		var info job.NodeInfo
		err := ctlplane.Request(nc, subj, nil, min(time.Second, max(poll, ctlplane.NoRespondersGrace*2)), func(msg *nats.Msg) error {
			got, err := ctlauth.VerifyNodeInfo(msg.Subject, msg.Data, keys)
			if err == nil && got.Name != node {
				err = fmt.Errorf("it describes node %q", got.Name)
			}
			info = got
			return err
		})
		now := time.Now()
		switch {
		case err == nil:
			if w.answered(info) && progress != nil {
				progress(info)
			}
		case errors.Is(err, nats.ErrNoResponders):
			if w.noResponders(now) {
				return nil
			}
		}
		// Anything else (no answer, none that verifies, our own connection down) says
		// nothing either way.
		if now.After(deadline) {
			if !w.heard {
				return fmt.Errorf("pcmd: node %s: %w after %v", node, ErrStillThere, timeout)
			}
			return fmt.Errorf("pcmd: node %s: %w after %v: it runs %d ranks%s", node, ErrStillThere, timeout, w.last.Used, jobsOf(w.last.Ranks))
		}
		time.Sleep(min(poll, time.Until(deadline)+time.Millisecond))
	}
}

// jobsOf says whose ranks these are: " (job a: ranks 0 3; job b: rank 1)".
func jobsOf(ranks []job.RankInfo) string {
	if len(ranks) == 0 {
		return ""
	}
	byJob := map[string][]int{}
	var jobs []string
	for _, r := range ranks {
		if _, ok := byJob[r.Job]; !ok {
			jobs = append(jobs, r.Job)
		}
		byJob[r.Job] = append(byJob[r.Job], r.Rank)
	}
	slices.Sort(jobs)
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		rs := byJob[j]
		slices.Sort(rs)
		word := "ranks"
		if len(rs) == 1 {
			word = "rank"
		}
		parts[i] = fmt.Sprintf("job %s: %s %s", j, word, strings.Trim(fmt.Sprint(rs), "[]"))
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
