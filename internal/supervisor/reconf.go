package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Reconfiguration of a running job: the Machine answers control requests (pcmd migrate, pcmd
// checkpoint, the IOS agents), keeps the log the ranks act on, starts the successors of
// migrating ranks and follows every rank from process to process.
//
// A migration's entry in the log and each moving rank's record in the history
// (job.Migration) move through the states of reconf.State: Proposed when accepted; Prepared
// once the successor runs on the target (the rank is at the agreement point and hands its
// state over); Committed when the successor took over; Aborted if anything failed before.
// An entry moving several ranks is Committed if any of them moved (the history tells which
// did not), Aborted if none did. The Machine does not learn when the ranks take a
// checkpoint: a checkpoint's entry stays Proposed in its log.

func (m *Machine) ctlError(to, format string, args ...any) {
	m.reply(to, job.ControlReply{Error: "mpirun: " + fmt.Sprintf(format, args...)})
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func (m *Machine) onControl(e Control) {
	var c job.ControlRequest
	if err := job.Decode(e.Data, &c); err != nil {
		m.ctlError(e.Reply, "malformed control request: %v", job.TrimPrefix(err))
		return
	}
	if err := c.Validate(); err != nil {
		m.ctlError(e.Reply, "%v", job.TrimPrefix(err))
		return
	}
	if err := AuthorizeControl(e.From, c, m.controlView()); err != nil {
		m.logf("refused a %s request: %v", c.Kind, err)
		m.ctlError(e.Reply, "%v", err)
		return
	}
	if m.stopping || m.failing != nil || !m.rdvDone {
		m.ctlError(e.Reply, "job %s is not running (starting or stopping)", m.cfg.JobID)
		return
	}
	switch c.Kind {
	case job.ControlCheckpoint:
		if !m.cfg.Checkpoints {
			m.ctlError(e.Reply, "job %s does not checkpoint: start it with --ckpt-every K (0: on request only)", m.cfg.JobID)
			return
		}
		seq := m.propose(reconf.Reconfiguration{Kind: reconf.Checkpoint, Reason: c.Reason})
		m.logf("checkpoint requested (request %d%s)", seq, reasonSuffix(c.Reason))
		m.reply(e.Reply, job.ControlReply{OK: true, Message: fmt.Sprintf("checkpoint of job %s requested (request %d): it is taken at the next agreement point", m.cfg.JobID, seq)})
	case job.ControlMigrate:
		m.onMigrateControl(e.Reply, c)
	case job.ControlResize:
		m.onResizeControl(e.Reply, c)
	}
}

func (m *Machine) onMigrateControl(reply string, c job.ControlRequest) {
	if !m.cfg.Migrations {
		m.ctlError(reply, "job %s runs its ranks locally; migrating ranks needs pcmd nodes (start the job with --hosts or --hostfile)", m.cfg.JobID)
		return
	}
	ranks := c.Ranks
	if len(ranks) == 0 {
		ranks = []int{c.Rank}
	}
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	if len(slices.Compact(slices.Clone(ranks))) != len(ranks) {
		m.ctlError(reply, "rank listed twice")
		return
	}
	if err := m.checkMovable(ranks, c.To); err != nil {
		m.ctlError(reply, "%v", err)
		return
	}
	if c.Exchange != nil {
		m.onExchangePart(reply, c, ranks)
		return
	}
	// Asking the node takes a round trip: the request waits for NodeChecked.
	m.lastCheck++
	m.checks[m.lastCheck] = pendingCheck{reply: reply, ranks: ranks, to: c.To, reason: c.Reason}
	m.emit(CheckNode{Check: m.lastCheck, Node: c.To})
}

// checkMovable says why ranks cannot move to node now, if they cannot.
func (m *Machine) checkMovable(ranks []int, node string) error {
	if why, gone := m.gone[node]; gone {
		return fmt.Errorf("cannot migrate to %s", why)
	}
	if m.draining[node] {
		return fmt.Errorf("cannot migrate to %s: it is draining and takes no new ranks", node)
	}
	if m.rs != nil {
		return fmt.Errorf("job %s is being resized (request %d); migrate once it is done", m.cfg.JobID, m.rs.seq)
	}
	for _, r := range ranks {
		if r < 0 || r >= m.cfg.NP {
			return fmt.Errorf("rank %d is outside job %s (size %d)", r, m.cfg.JobID, m.cfg.NP)
		}
		st := &m.ranks[r]
		switch {
		case !st.running:
			return fmt.Errorf("rank %d has exited", r)
		case st.next != nil:
			return fmt.Errorf("rank %d is already moving to %s (request %d)", r, st.next.to, st.next.seq)
		case nodeOf(m.procs[st.proc]) == node:
			return fmt.Errorf("rank %d already runs on %s", r, node)
		}
		for _, p := range m.procs {
			if p.running && p.side && p.rank == r && p.node == node {
				return fmt.Errorf("rank %d's previous process on %s has not exited yet; try again", r, node)
			}
		}
	}
	return nil
}

func (m *Machine) onNodeChecked(now time.Time, e NodeChecked) {
	c, ok := m.checks[e.Check]
	if !ok {
		return
	}
	delete(m.checks, e.Check)
	if e.Err != nil {
		m.ctlError(c.reply, "cannot migrate to %v", e.Err)
		return
	}
	if m.stopping || m.failing != nil {
		m.ctlError(c.reply, "job %s is stopping", m.cfg.JobID)
		return
	}
	// The job went on while the node was asked.
	if err := m.checkMovable(c.ranks, c.to); err != nil {
		m.ctlError(c.reply, "%v", err)
		return
	}
	from := nodeOf(m.procs[m.ranks[c.ranks[0]].proc])
	for _, r := range c.ranks[1:] {
		if nodeOf(m.procs[m.ranks[r].proc]) != from {
			from = ""
		}
	}
	seq := m.propose(reconf.Reconfiguration{Kind: reconf.Migrate, Ranks: c.ranks, To: c.to, From: from, Reason: c.reason})
	for _, r := range c.ranks {
		st := &m.ranks[r]
		st.next = &successor{seq: seq, to: c.to, deadline: now.Add(m.cfg.MigrationTimeout)}
		m.history = append(m.history, job.Migration{Seq: seq, Rank: r, From: nodeOf(m.procs[st.proc]), To: c.to,
			Reason: c.reason, State: reconf.Proposed, At: now.UTC()})
	}
	m.logf("migration of rank %s to %s requested (request %d%s)", joinInts(c.ranks), c.to, seq, reasonSuffix(c.reason))
	m.reply(c.reply, job.ControlReply{OK: true, Message: fmt.Sprintf("rank %s of job %s moves to %s at the next agreement point (request %d)",
		joinInts(c.ranks), m.cfg.JobID, c.to, seq)})
}

// propose appends r to the log, Proposed, and publishes the log; it returns r's number.
func (m *Machine) propose(r reconf.Reconfiguration) uint64 {
	e := m.log.Propose(r, m.now.UTC())
	m.emit(Publish{Subject: job.ReconfSubject(m.cfg.JobID), Msg: m.Log()})
	return e.Seq
}

// historyOf returns the newest record of request seq for rank.
func (m *Machine) historyOf(seq uint64, r int) *job.Migration {
	for i := len(m.history) - 1; i >= 0; i-- {
		if h := &m.history[i]; h.Seq == seq && h.Rank == r {
			return h
		}
	}
	return nil
}

// settle moves rank r's record of request seq to state (if the two-phase commit allows it)
// and the request's log entry with it.
func (m *Machine) settle(seq uint64, r int, state reconf.State, why string) {
	h := m.historyOf(seq, r)
	if h == nil || !h.State.CanMoveTo(state) {
		return
	}
	h.State = state
	if state == reconf.Aborted && why != "" {
		h.Error = why
	}
	m.settleEntry(seq)
}

// settleEntry derives the state of a migration's log entry from its ranks' records.
func (m *Machine) settleEntry(seq uint64) {
	e := m.log.Get(seq)
	if e == nil || e.State.Final() {
		return
	}
	var moved, stayed []int
	prepared, pending := false, false
	var why string
	for _, h := range m.history {
		if h.Seq != seq {
			continue
		}
		switch h.State {
		case reconf.Committed:
			moved = append(moved, h.Rank)
		case reconf.Aborted:
			stayed = append(stayed, h.Rank)
			if why == "" {
				why = h.Error
			}
		case reconf.Prepared:
			prepared = true
			pending = true
		default:
			pending = true
		}
	}
	switch {
	case pending:
		if e.State == reconf.Proposed && (prepared || len(moved) > 0) {
			_ = e.Advance(reconf.Prepared, nil)
		}
	case len(moved) == 0:
		_ = e.Advance(reconf.Aborted, errors.New(why))
	default:
		_ = e.Advance(reconf.Committed, nil)
		if len(stayed) > 0 {
			e.Error = fmt.Sprintf("rank %s stayed: %s", joinInts(stayed), why)
		}
	}
}

// onSuccessorRequest starts the successor a migrating rank asks for at the agreement point.
func (m *Machine) onSuccessorRequest(e SuccessorRequest) {
	var req job.MigrateRequest
	if err := job.Decode(e.Data, &req); err != nil {
		m.reply(e.Reply, job.MigrateReply{Error: "mpirun: malformed migrate request"})
		return
	}
	if err := req.Validate(m.cfg.NP); err != nil {
		m.reply(e.Reply, job.MigrateReply{Error: "mpirun: " + job.TrimPrefix(err).Error()})
		return
	}
	st := &m.ranks[req.Rank]
	switch {
	case m.stopping || m.failing != nil:
		m.refuseSuccessor(e.Reply, req.Seq, req.Rank, "the job is stopping")
		return
	case st.next == nil || st.next.seq != req.Seq || st.next.proc != 0 || st.next.start != 0:
		why := fmt.Sprintf("no pending migration of rank %d for request %d", req.Rank, req.Seq)
		if h := m.historyOf(req.Seq, req.Rank); h != nil && h.State == reconf.Aborted && h.Error != "" {
			why = fmt.Sprintf("request %d was aborted: %s", req.Seq, h.Error)
		}
		m.refuseSuccessor(e.Reply, req.Seq, req.Rank, why)
		return
	case !m.cfg.Migrations:
		m.refuseSuccessor(e.Reply, req.Seq, req.Rank, "ranks run locally")
		return
	}
	if why, gone := m.gone[st.next.to]; gone {
		// The target went away after the request was accepted.
		m.refuseSuccessor(e.Reply, req.Seq, req.Rank, fmt.Sprintf("cannot start the successor on %s: %s", st.next.to, why))
		return
	}
	if h := m.historyOf(req.Seq, req.Rank); h != nil {
		h.Iteration = req.Iteration
	}
	if le := m.log.Get(req.Seq); le != nil {
		le.Iteration = req.Iteration
	}
	id := m.newProc(req.Rank)
	p := m.procs[id]
	p.side, p.successor, p.node, p.seq, p.reply = true, true, st.next.to, req.Seq, e.Reply
	st.next.start = id
	m.emit(StartRank{Proc: id, Rank: req.Rank, Node: st.next.to, Incarnation: st.incarnation + 1, Handover: req.Handover,
		Replaces: m.replacing(req.Seq, req.Rank, st.next.to)})
}

// refuseSuccessor aborts rank r's migration for request seq before a successor runs. The
// rank reports the aborted migration, with this reason, and the Machine logs it then.
func (m *Machine) refuseSuccessor(reply string, seq uint64, r int, reason string) {
	m.settle(seq, r, reconf.Aborted, reason)
	if st := &m.ranks[r]; st.next != nil && st.next.seq == seq && st.next.proc == 0 {
		st.next = nil
	}
	m.reply(reply, job.MigrateReply{Error: "mpirun: " + reason})
}

func (m *Machine) onSuccessorStarted(id ProcID, p *proc, e Started) {
	st := &m.ranks[p.rank]
	current := st.next != nil && st.next.start == id
	if current {
		st.next.start = 0
	}
	if e.Err != nil {
		delete(m.procs, id)
		m.refuseSuccessor(p.reply, p.seq, p.rank, fmt.Sprintf("cannot start the successor on %s: %v", p.node, e.Err))
		return
	}
	p.pid, p.running = e.PID, true
	if e.Node != "" {
		p.node = e.Node
	}
	m.live++
	if m.stopping || !current {
		// Stopping, or the rank gave up on it meanwhile.
		m.kill(id)
		if current {
			m.refuseSuccessor(p.reply, p.seq, p.rank, "the migration was cancelled")
		} else {
			m.reply(p.reply, job.MigrateReply{Error: "mpirun: the migration was cancelled"})
		}
		return
	}
	st.next.proc = id
	m.settle(p.seq, p.rank, reconf.Prepared, "")
	m.reply(p.reply, job.MigrateReply{Node: p.node, PID: e.PID})
}

// onMigrateReport takes a migrating rank's account of how its migration ended.
func (m *Machine) onMigrateReport(e MigrateReport) {
	var rep job.MigrateReport
	if err := job.Decode(e.Data, &rep); err != nil || rep.Rank < 0 || rep.Rank >= m.cfg.NP {
		m.logf("ignoring a malformed migration report")
		return
	}
	st := &m.ranks[rep.Rank]
	h := m.historyOf(rep.Seq, rep.Rank)
	if h != nil {
		h.Iteration, h.Pause = rep.Iteration, rep.Pause
	}
	if le := m.log.Get(rep.Seq); le != nil && le.Kind == reconf.Migrate {
		le.Iteration, le.Pause = rep.Iteration, max(le.Pause, rep.Pause)
		if rep.OK {
			le.Bytes += rep.StateBytes
		}
	}
	if !rep.OK {
		m.settle(rep.Seq, rep.Rank, reconf.Aborted, rep.Error)
		if h != nil && h.Error == "" {
			h.Error = rep.Error
		}
		m.logf("migration of rank %d to %s aborted, it continues on %s: %s", rep.Rank, rep.To, nodeOf(m.procs[st.proc]), rep.Error)
		if st.next != nil && st.next.seq == rep.Seq {
			if st.next.proc != 0 {
				m.kill(st.next.proc)
			}
			st.next = nil // a successor still starting is killed when it starts
		}
		return
	}
	from := nodeOf(m.procs[st.proc])
	if st.next != nil && st.next.seq == rep.Seq {
		m.commit(rep.Rank)
	} else if h != nil && h.State == reconf.Committed {
		from = h.From // committed already, when the old process exited
	}
	m.settle(rep.Seq, rep.Rank, reconf.Committed, "")
	if h != nil && rep.Error != "" {
		h.Error = rep.Error
	}
	reason := ""
	if h != nil && h.Reason != "" {
		reason = " (" + h.Reason + ")"
	}
	m.logf("migrated rank %d from %s to %s at iteration %d in %v, %s of state%s",
		rep.Rank, from, rep.To, rep.Iteration, rep.Pause.Round(time.Millisecond), byteSize(rep.StateBytes), reason)
}

// moveDeadline returns the earliest instant an accepted migration that waits for its rank
// needs the Machine: its timeout, or the next publication of the log.
func (m *Machine) moveDeadline() time.Time {
	var at time.Time
	if m.stopping || m.failing != nil {
		return at // the ranks are leaving: their exits end the migrations
	}
	for i := range m.ranks {
		if n := m.ranks[i].next; n != nil && n.waiting() && (at.IsZero() || n.deadline.Before(at)) {
			at = n.deadline
		}
	}
	if !at.IsZero() && !m.republishAt.IsZero() && m.republishAt.Before(at) {
		at = m.republishAt
	}
	return at
}

// expireMoves aborts the accepted migrations whose ranks did not ask for their successors
// within Config.MigrationTimeout, and publishes the log again while others wait: an
// accepted migration is carried out at an agreement point or aborted, never left pending.
func (m *Machine) expireMoves(now time.Time) {
	if m.stopping || m.failing != nil {
		m.republishAt = time.Time{}
		return
	}
	waiting := false
	for r := range m.ranks {
		n := m.ranks[r].next
		if n == nil || !n.waiting() {
			continue
		}
		if now.Before(n.deadline) {
			waiting = true
			continue
		}
		m.dropMove(r, fmt.Sprintf("the ranks reached no agreement point on it within %v", m.cfg.MigrationTimeout), false)
	}
	switch {
	case !waiting:
		m.republishAt = time.Time{}
	case m.republishAt.IsZero():
		m.republishAt = now.Add(RepublishEvery)
	case !now.Before(m.republishAt):
		m.republishAt = now.Add(RepublishEvery)
		m.emit(Publish{Subject: job.ReconfSubject(m.cfg.JobID), Msg: m.Log()})
	}
}

// dropMove aborts rank r's accepted migration before the rank asked for its successor, and
// says why: the rank finished first, or the migration timed out (then the ranks get the
// log with the entry aborted; one that asks later is refused).
func (m *Machine) dropMove(r int, why string, finished bool) {
	st := &m.ranks[r]
	n := st.next
	st.next = nil
	m.settle(n.seq, r, reconf.Aborted, why)
	if finished {
		m.logf("migration of rank %d to %s not carried out: %s (request %d)", r, n.to, why, n.seq)
		return
	}
	m.logf("migration of rank %d to %s aborted, it continues on %s: %s (request %d)", r, n.to, nodeOf(m.procs[st.proc]), why, n.seq)
	m.emit(Publish{Subject: job.ReconfSubject(m.cfg.JobID), Msg: m.Log()})
}

// commit makes the successor the rank's process; the predecessor is on its way out.
func (m *Machine) commit(r int) {
	st := &m.ranks[r]
	next := st.next
	st.next = nil
	if next.proc == 0 {
		return
	}
	if old := m.procs[st.proc]; old != nil {
		old.side = true
	}
	m.procs[next.proc].side, m.procs[next.proc].successor = false, false
	st.proc, st.running = next.proc, true
	st.incarnation++
	m.settle(next.seq, r, reconf.Committed, "")
}

// onSideExit handles the exit of a process that is not its rank's current one: a
// predecessor that handed over, or a successor that never took over.
func (m *Machine) onSideExit(p *proc, e Exited) {
	st := &m.ranks[p.rank]
	if st.next != nil && st.next.proc == e.Proc {
		// The successor died before the hand-over completed: the predecessor may be
		// waiting for it to connect. It reports the aborted migration.
		reason := fmt.Sprintf("its successor on %s (pid %d) ended before taking over: %s", nodeOf(p), p.pid, exitText(e))
		m.emit(Publish{Subject: job.SuccessorGoneSubject(m.cfg.JobID), Msg: job.SuccessorGone{Seq: st.next.seq, Rank: p.rank, Reason: reason}})
		return
	}
	if p.successor {
		if !p.killed && !m.stopping {
			m.logf("successor of rank %d on %s (pid %d) ended: %s", p.rank, nodeOf(p), p.pid, exitText(e))
		}
		return
	}
	if e.failed() {
		m.logf("previous process of rank %d on %s (pid %d) ended after handing over: %s", p.rank, nodeOf(p), p.pid, exitText(e))
	}
}

// kill stops a successor whose migration was aborted.
func (m *Machine) kill(id ProcID) {
	if p := m.procs[id]; p != nil {
		p.killed = true
	}
	m.emit(SignalProc{Proc: id, Sig: syscall.SIGKILL})
}

// byteSize formats n bytes for people.
func byteSize(n int64) string { return reconf.ByteSize(n) }
