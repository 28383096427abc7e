package supervisor

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Joint moves: the IOS agents' exchanges of ranks between nodes.
//
// In an exchange every node gives ranks to another (a swap, a pair swap, a three-way
// rotation), and each node asks the job to move its own ranks (job.ControlRequest.Exchange:
// a node may move only its own). Moved one by one, the first arrival finds a node whose
// slots are all in use still full, as the rank that is to leave it runs until its own move
// commits. So the Machine collects the parts of one exchange and proposes them as one joint
// entry of the log (reconf.Reconfiguration.Joint, a target per rank):
//
//   - a part is held until every node of the exchange (ExchangePart.Parties) sent its own,
//     at most JointTimeout; then every target is checked (CheckNode, counting the ranks of
//     the job that leave it in the same move, whose slots it may use) and the entry is
//     proposed, or every part is refused with the same reason;
//   - each successor is started with the ranks of the entry that leave its node
//     (StartRank.Replaces): pcmd admits it in one of their slots (spawner.Table.Admit);
//   - the ranks judge a joint entry all or nothing (rankreconf.Judge): one move that is not
//     ready aborts all, so a node never keeps an arrival beside the rank it was to leave
//     for, and an exchange never ends half done before its commit point.

// JointTimeout bounds the wait for the other parts of an exchange: every node sends its part
// as soon as the exchange commits (one message apart), so a part alone this long means a
// node will not send its own, and nothing moves.
const JointTimeout = 5 * time.Second

type jointKey struct {
	origin string
	id     uint64
}

// jointPart is one node's part of an exchange.
type jointPart struct {
	reply  string
	ranks  []int
	to     string
	reason string
}

// joint is an exchange whose parts are being collected or whose targets checked.
type joint struct {
	parties  []string // sorted
	parts    map[string]*jointPart
	deadline time.Time
	checks   map[uint64]bool // CheckNodes not answered yet
	checking bool
}

func (k jointKey) String() string { return fmt.Sprintf("%s/%d", k.origin, k.id) }

// onExchangePart takes node's part of an exchange (ranks, sorted, to c.To).
func (m *Machine) onExchangePart(reply string, c job.ControlRequest, ranks []int) {
	k := jointKey{c.Exchange.Origin, c.Exchange.ID}
	from := nodeOf(m.procs[m.ranks[ranks[0]].proc])
	for _, r := range ranks[1:] {
		if nodeOf(m.procs[m.ranks[r].proc]) != from {
			m.ctlError(reply, "exchange %s: the ranks of one part must run on one node", k)
			return
		}
	}
	parties := slices.Sorted(slices.Values(c.Exchange.Parties))
	if !slices.Contains(parties, from) {
		m.ctlError(reply, "exchange %s: rank %s runs on %s, which is not among its nodes (%s)", k, joinInts(ranks), from, strings.Join(parties, ", "))
		return
	}
	j := m.joints[k]
	switch {
	case j == nil:
		j = &joint{parties: parties, parts: map[string]*jointPart{}, deadline: m.now.Add(JointTimeout)}
		m.joints[k] = j
	case !slices.Equal(j.parties, parties):
		m.failJoint(k, fmt.Sprintf("its parts name different nodes (%s, then %s)", strings.Join(j.parties, ", "), strings.Join(parties, ", ")), reply)
		return
	case j.parts[from] != nil || j.checking:
		// Its ranks come in one part: a second may be half of what the node gives.
		m.failJoint(k, fmt.Sprintf("node %s sent two parts", from), reply)
		return
	}
	for _, p := range j.parts {
		for _, r := range ranks {
			if slices.Contains(p.ranks, r) {
				m.failJoint(k, fmt.Sprintf("rank %d is in two parts", r), reply)
				return
			}
		}
	}
	j.parts[from] = &jointPart{reply: reply, ranks: ranks, to: c.To, reason: c.Reason}
	m.logf("exchange %s: part of %s received (rank %s to %s), %d of %d", k, from, joinInts(ranks), c.To, len(j.parts), len(j.parties))
	if len(j.parts) < len(j.parties) {
		return
	}
	// Every part is in: check each target, counting what leaves it in this move.
	j.checking, j.checks = true, map[uint64]bool{}
	for _, node := range j.parties {
		if !j.arrives(node) {
			continue
		}
		m.lastCheck++
		j.checks[m.lastCheck] = true
		m.jointChecks[m.lastCheck] = k
		m.emit(CheckNode{Check: m.lastCheck, Node: node, Leaving: len(j.parts[node].ranks)})
	}
}

// arrives says whether some part moves ranks to node.
func (j *joint) arrives(node string) bool {
	for _, p := range j.parts {
		if p.to == node {
			return true
		}
	}
	return false
}

// onJointChecked takes the answer to a target check of an exchange; it reports false if
// the check was not one.
func (m *Machine) onJointChecked(now time.Time, e NodeChecked) bool {
	k, ok := m.jointChecks[e.Check]
	if !ok {
		return false
	}
	delete(m.jointChecks, e.Check)
	j := m.joints[k]
	if j == nil {
		return true // failed meanwhile
	}
	delete(j.checks, e.Check)
	if e.Err != nil {
		m.failJoint(k, fmt.Sprintf("cannot migrate to %v", e.Err), "")
		return true
	}
	if len(j.checks) == 0 {
		m.proposeJoint(now, k, j)
	}
	return true
}

// proposeJoint appends the exchange's one entry to the log, every rank with its target.
func (m *Machine) proposeJoint(now time.Time, k jointKey, j *joint) {
	if m.stopping || m.failing != nil {
		m.failJoint(k, fmt.Sprintf("job %s is stopping", m.cfg.JobID), "")
		return
	}
	type move struct {
		rank int
		to   string
	}
	var moves []move
	reason := j.parts[k.origin].reason // the origin's names what it gives and gets
	for _, node := range j.parties {
		p := j.parts[node]
		if err := m.checkMovable(p.ranks, p.to); err != nil {
			m.failJoint(k, err.Error(), "")
			return
		}
		for _, r := range p.ranks {
			moves = append(moves, move{r, p.to})
		}
		if reason == "" {
			reason = p.reason
		}
	}
	slices.SortFunc(moves, func(a, b move) int { return a.rank - b.rank })
	e := reconf.Reconfiguration{Kind: reconf.Migrate, Joint: true, Reason: fmt.Sprintf("exchange %s: %s", k, reason)}
	var what []string
	for _, mv := range moves {
		e.Ranks = append(e.Ranks, mv.rank)
		e.Targets = append(e.Targets, mv.to)
		what = append(what, fmt.Sprintf("rank %d to %s", mv.rank, mv.to))
	}
	seq := m.propose(e)
	for _, mv := range moves {
		st := &m.ranks[mv.rank]
		st.next = &successor{seq: seq, to: mv.to, deadline: now.Add(m.cfg.MigrationTimeout)}
		m.history = append(m.history, job.Migration{Seq: seq, Rank: mv.rank, From: nodeOf(m.procs[st.proc]), To: mv.to,
			Reason: e.Reason, State: reconf.Proposed, At: now.UTC()})
	}
	delete(m.joints, k)
	m.logf("exchange %s requested as one joint migration (request %d): %s", k, seq, strings.Join(what, ", "))
	for _, node := range j.parties {
		m.reply(j.parts[node].reply, job.ControlReply{OK: true, Message: fmt.Sprintf(
			"exchange %s of job %s: %s at the next agreement point, all or none (request %d)", k, m.cfg.JobID, strings.Join(what, ", "), seq)})
	}
}

// failJoint refuses every part of exchange k received so far (and extra, the request that
// made it fail) with why: nothing of it moves.
func (m *Machine) failJoint(k jointKey, why, extra string) {
	j := m.joints[k]
	delete(m.joints, k)
	m.logf("exchange %s refused, nothing moves: %s", k, why)
	if j != nil {
		for id := range j.checks {
			delete(m.jointChecks, id)
		}
		for _, node := range j.parties {
			if p := j.parts[node]; p != nil {
				m.ctlError(p.reply, "exchange %s refused, nothing moves: %s", k, why)
			}
		}
	}
	if extra != "" {
		m.ctlError(extra, "exchange %s refused, nothing moves: %s", k, why)
	}
}

// jointDeadline is when the oldest exchange waiting for its parts expires.
func (m *Machine) jointDeadline() time.Time {
	var at time.Time
	for _, j := range m.joints {
		if !j.checking && (at.IsZero() || j.deadline.Before(at)) {
			at = j.deadline
		}
	}
	return at
}

// expireJoints refuses the exchanges whose other parts did not come within JointTimeout.
func (m *Machine) expireJoints(now time.Time) {
	keys := slices.SortedFunc(maps.Keys(m.joints), func(a, b jointKey) int {
		if c := strings.Compare(a.origin, b.origin); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, k := range keys {
		j := m.joints[k]
		if j.checking || now.Before(j.deadline) {
			continue
		}
		var missing []string
		for _, node := range j.parties {
			if j.parts[node] == nil {
				missing = append(missing, node)
			}
		}
		m.failJoint(k, fmt.Sprintf("no part from %s within %v", strings.Join(missing, ", "), JointTimeout), "")
	}
}

// replacing returns the ranks of joint entry seq that leave node in it, for the successor
// of rank r started there.
func (m *Machine) replacing(seq uint64, r int, node string) []int {
	e := m.log.Get(seq)
	if e == nil || !e.Joint {
		return nil
	}
	var out []int
	for _, x := range e.Ranks {
		if x == r || x < 0 || x >= len(m.ranks) {
			continue
		}
		if st := &m.ranks[x]; st.running && st.next != nil && st.next.seq == seq && nodeOf(m.procs[st.proc]) == node {
			out = append(out, x)
		}
	}
	return out
}
