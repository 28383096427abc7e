package nodeclient

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// Nodes that join a running job. A Remote hears every pcmd's heartbeats; two kinds of node
// join the job from them (supervisor.NodeJoined decides what their slots are for):
//   - a node declared gone whose pcmd comes back: it beats again, not leaving nor draining,
//     runs none of the job's ranks and has free slots;
//   - a pcmd started after the job: a node the Remote did not know whose heartbeats began
//     after the Remote started (nodes that were already there and not chosen by --hosts
//     stay out).
// Either must present a key card signed by its key (ctlauth.VerifyStatement, as at
// placement): with --known-nodes the key must be listed for that node — a returning pcmd
// with a new key is taken only then —, without it the card's own key is believed, and the
// job's secrets are sealed for the card's curve key.

// NodeEvent is a change in a node's standing, delivered in the order the Remote saw them
// (a node may be gone, join, and be gone again): exactly one of Gone, Joined and Draining is
// set.
type NodeEvent struct {
	Gone     *NodeGoneError
	Joined   *NodeJoin
	Draining *NodeDrain
}

// NodeDrain says that a node of the job began draining (pcmd drain: it takes no new ranks
// and leaves once its ranks have moved) or, Draining false, takes ranks again (the drain
// could not place them and the node keeps serving).
type NodeDrain struct {
	Node     string
	Draining bool
}

// closedNode notes that node refused a spawn because it takes no new ranks: it counts as
// draining until a heartbeat says otherwise (which is then delivered as a change).
func (r *Remote) closedNode(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if node := r.nodes[name]; node != nil && node.gone == nil {
		node.draining = true
	}
}

// NodeJoin is a node that joined the job: it can take Free ranks now.
type NodeJoin struct {
	Node   string
	Free   int
	Reason string // e.g. "pcmd on node n2 came back (pid 4242, a new key)"
}

// eventBacklog bounds the node events Events holds for a slow reader.
const eventBacklog = 64

// Events delivers each node the Remote declares gone, once per loss, and each node that
// joins. Reading it is optional: a gone node is refused when asked for anyway.
func (r *Remote) Events() <-chan NodeEvent { return r.events }

// sendEvent queues ev. r.mu held, so that events keep the order they happened in.
func (r *Remote) sendEvent(ev NodeEvent) {
	select {
	case r.events <- ev:
	default:
		// Nobody reads Events: a gone node is refused when asked for anyway.
	}
}

// startedAfter reports whether a node's pcmd began beating after the Remote started, by its
// heartbeat counter (the first beat is 1) and period, on this machine's clock.
func (r *Remote) startedAfter(info job.NodeInfo, now time.Time) bool {
	if info.Seq <= 1 {
		return true
	}
	return info.Seq-1 <= uint64(now.Sub(r.started)/info.Interval)
}

// runsJobRanks reports whether the node lists a rank of a job started through r. r.mu held.
func (r *Remote) runsJobRanks(info job.NodeInfo) bool {
	return slices.ContainsFunc(info.Ranks, func(ri job.RankInfo) bool { return r.jobs[ri.Job] })
}

// maybeJoin takes the heartbeat of a node that is not part of the job (prev nil: unknown to
// r; else declared gone) and makes it join if it can take ranks and presents a key card the
// Remote accepts.
func (r *Remote) maybeJoin(info job.NodeInfo, prev *remoteNode) {
	if info.Leaving || info.Draining || info.Slots-info.Used <= 0 {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if prev == nil {
		if pid, seen := r.bystanders[info.Name]; seen && pid == info.PID {
			r.mu.Unlock()
			return
		}
		if !r.startedAfter(info, now) {
			// There before the job, and not among its hosts: not the job's to take.
			r.bystanders[info.Name] = info.PID
			r.mu.Unlock()
			return
		}
	}
	if pid, ok := r.refused[info.Name]; r.runsJobRanks(info) || ok && pid == info.PID {
		// Ranks of a run given up still run there (a node silent for a while): it joins
		// once they are gone.
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	card, err := r.nodeCard(info)
	if err != nil {
		r.mu.Lock()
		r.refused[info.Name] = info.PID // said once per pcmd
		r.mu.Unlock()
		r.cfg.Logf("node %s (pcmd pid %d) cannot join the job: %v", info.Name, info.PID, strings.TrimPrefix(err.Error(), "nodeclient: "))
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.nodes[info.Name]
	if cur != prev || (cur != nil && cur.gone == nil) {
		return // another heartbeat or a CheckNode got there first
	}
	join := &NodeJoin{Node: info.Name, Free: info.Slots - info.Used}
	if prev == nil {
		join.Reason = fmt.Sprintf("a pcmd started after the job (pid %d)", info.PID)
		r.nodes[info.Name] = &remoteNode{name: info.Name, pid: info.PID, interval: info.Interval, card: card,
			last: now, procs: make(map[*remoteProcess]bool), joined: true}
	} else {
		key := ""
		switch {
		case prev.card != nil && card != nil && prev.card.SigningKey != card.SigningKey:
			key = ", a new key"
		case prev.card == nil && card != nil:
			key = ", a key card"
		}
		join.Reason = fmt.Sprintf("pcmd on node %s came back (pid %d%s)", info.Name, info.PID, key)
		prev.gone, prev.pid, prev.interval, prev.card, prev.last, prev.joined = nil, info.PID, info.Interval, card, now, true
		prev.draining = false // it joins only when it takes ranks (maybeJoin)
	}
	delete(r.refused, info.Name)
	r.sendEvent(NodeEvent{Joined: join})
}
