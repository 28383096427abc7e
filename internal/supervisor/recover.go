package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Automatic recovery and hang detection (Satin, seed 002 §4.4: a job survives the loss of
// processors by redoing the lost work; ULFM: no call blocks forever after a failure).
//
// A job that checkpoints is recovered by the Machine itself when a rank dies, its node is
// lost or it stops beating: every process still running is killed, and every rank is started
// again from the newest committed checkpoint (job.Committed, reported by rank 0) on the
// nodes that survive, each rank where it ran if its node is alive and has room. The work lost
// is what the ranks computed after that checkpoint: at most one checkpoint interval. The
// decision is pure — which failure, which checkpoint, which placement, when to give up — and
// the loop carries it out (SignalProc, StartRank with Restart).
//
// Liveness: every rank process beats (job.Alive) once it joined the job; a current process
// silent for Config.HangTimeout is declared hung, killed and takes the failure path. While
// the loop reports its NATS connection down (ControlPlaneDown), silence proves nothing and
// nobody is declared hung; when it is back (ControlPlaneUp) every rank gets a whole timeout
// again to be heard.

// maxReportedError bounds the ranks' own words quoted in mpirun's messages.
const maxReportedError = 1024

// DefaultMaxRecoveries is how many times a job is recovered when Config.MaxRecoveries is 0.
const DefaultMaxRecoveries = 3

// Alive is a rank's liveness beat (a msgpack job.Alive).
type Alive struct{ Data []byte }

// Committed is rank 0's report that a checkpoint is committed (a msgpack job.Committed).
type Committed struct{ Data []byte }

// Restored is rank 0's report that the ranks restarted from a checkpoint (a msgpack
// job.Restored).
type Restored struct{ Data []byte }

// ControlPlaneDown says the loop lost its NATS connection: the ranks' beats cannot arrive.
type ControlPlaneDown struct{}

// ControlPlaneUp says the loop's NATS connection is back.
type ControlPlaneUp struct{}

// Stalled says the loop itself did not run For (mpirun stopped, its machine suspended or
// starved of CPU): the ranks' silence meanwhile proves nothing about them. The loop sends it
// before anything that happened meanwhile.
type Stalled struct{ For time.Duration }

func (Alive) event()            {}
func (Committed) event()        {}
func (Restored) event()         {}
func (ControlPlaneDown) event() {}
func (ControlPlaneUp) event()   {}
func (Stalled) event()          {}

// recovery is the Machine's state of automatic recovery and liveness.
type recovery struct {
	ckpt      *job.Committed // newest committed checkpoint, nil before the first
	lastIter  int64          // highest iteration the beats reported since the last restart, -1 if none
	used      int            // recoveries started
	cpDown    bool           // the loop's NATS connection is down
	beats     map[ProcID]beat
	lost      map[string]bool // nodes whose processes were lost with them (Exited.NodeGone)
	firstBad  time.Time       // first failed exit (or the hung rank's last beat) since the last recovery
	killing   bool            // the processes of the failed run are being killed
	active    *attempt        // the recovery in progress, until the ranks compute again
	placement []string        // node of each rank in the restarted run
	// unrestorable says why the ranks of a recovery found no checkpoint to restore (every
	// copy of its pieces lost): recovering again would find none either.
	unrestorable string
}

// beat is what the Machine heard last from a process.
type beat struct {
	at   time.Time
	done bool // the process finalized
}

// attempt is one recovery, for its log line.
type attempt struct {
	cause     string
	rank      int
	ckpt      job.Committed
	lost      int64 // iterations lost, -1 if unknown
	failedAt  time.Time
	decidedAt time.Time
	startedAt time.Time // every rank started again
	oldNP, np int       // ranks before and after: fewer after when the job shrinks
}

func (m *Machine) maxRecoveries() int {
	if m.cfg.MaxRecoveries == 0 {
		return DefaultMaxRecoveries
	}
	return max(m.cfg.MaxRecoveries, 0)
}

// onRecoveryEvent takes the events of recovery and liveness.
func (m *Machine) onRecoveryEvent(now time.Time, ev Event) {
	switch e := ev.(type) {
	case Alive:
		var a job.Alive
		if job.Decode(e.Data, &a) != nil || a.Validate(m.cfg.NP) != nil {
			return
		}
		id := m.procOf(a.Rank, a.PID)
		if id == 0 {
			return // a process of a run already given up, or not started by this Machine
		}
		m.rec.beats[id] = beat{at: now, done: a.Done}
		m.rec.lastIter = max(m.rec.lastIter, a.Iteration)
	case Committed:
		var c job.Committed
		if job.Decode(e.Data, &c) != nil || c.Seq == 0 {
			return
		}
		if m.rec.ckpt == nil || c.Seq > m.rec.ckpt.Seq {
			m.rec.ckpt = &c
		}
		m.checkpointsDone(c)
	case Restored:
		var r job.Restored
		if job.Decode(e.Data, &r) != nil {
			return
		}
		m.onRestored(now, r)
	case ControlPlaneDown:
		m.rec.cpDown = true
	case ControlPlaneUp:
		m.rec.cpDown = false
		m.hearAgain(now)
	case Stalled:
		if m.cfg.HangTimeout > 0 && len(m.rec.beats) > 0 {
			m.logf("mpirun itself did not run for %v (stopped, suspended or starved of CPU): no rank is judged by its silence meanwhile, each has %v to be heard again",
				e.For.Round(time.Millisecond), m.cfg.HangTimeout)
		}
		m.hearAgain(now)
	}
}

// hearAgain gives every rank that has not finalized a whole hang timeout from now to be
// heard: whatever silence came before proves nothing.
func (m *Machine) hearAgain(now time.Time) {
	for id, b := range m.rec.beats {
		if !b.done {
			m.rec.beats[id] = beat{at: now}
		}
	}
}

// procOf returns the running process of rank with pid, 0 if none.
func (m *Machine) procOf(rank, pid int) ProcID {
	for id, p := range m.procs {
		if p.running && p.rank == rank && p.pid == pid {
			return id
		}
	}
	return 0
}

// watching reports whether hangs are judged now.
func (m *Machine) watching() bool {
	return m.cfg.HangTimeout > 0 && !m.rec.cpDown && !m.stopping && m.failing == nil && !m.rec.killing
}

// hangDeadline is when the earliest silent current process is declared hung; zero if none.
func (m *Machine) hangDeadline() time.Time {
	var at time.Time
	if !m.watching() {
		return at
	}
	for i := range m.ranks {
		st := &m.ranks[i]
		if b, ok := m.rec.beats[st.proc]; ok && st.running && !b.done {
			if t := b.at.Add(m.cfg.HangTimeout); at.IsZero() || t.Before(at) {
				at = t
			}
		}
	}
	return at
}

// checkHangs declares failed the first current process silent for the hang timeout.
func (m *Machine) checkHangs(now time.Time) {
	if !m.watching() {
		return
	}
	for r := range m.ranks {
		st := &m.ranks[r]
		b, ok := m.rec.beats[st.proc]
		if !ok || !st.running || b.done || now.Before(b.at.Add(m.cfg.HangTimeout)) {
			continue
		}
		m.rec.firstBad = b.at
		reason := fmt.Sprintf("%s sent no sign of life for %v (stopped or frozen): declared failed", m.describe(r), now.Sub(b.at).Round(time.Millisecond))
		// It cannot be trusted to stop on SIGTERM, nor to come back.
		m.emit(SignalProc{Proc: st.proc, Sig: syscall.SIGKILL})
		m.fail(now, &Failure{Kind: RankHung, Rank: r, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: r, Reason: reason})
		return
	}
}

// noteExit remembers when the first failed exit of a run was observed, and the nodes lost.
func (m *Machine) noteExit(p *proc, e Exited) {
	if e.NodeGone && p.node != "" {
		m.noteNodeLost(p.node)
	}
	if e.failed() && m.rec.firstBad.IsZero() {
		m.rec.firstBad = e.At
		if e.At.IsZero() {
			m.rec.firstBad = m.now
		}
	}
}

// noteNodeLost remembers that node was lost: no rank restarts there.
func (m *Machine) noteNodeLost(node string) {
	if m.rec.lost == nil {
		m.rec.lost = make(map[string]bool)
	}
	m.rec.lost[node] = true
}

// recoverable reports whether f is a failure recovery is for: a rank died or hung while the
// job runs. An abort, a timeout, a signal or a start refused end the job as they would.
func (m *Machine) recoverable(f *Failure) bool {
	return m.cfg.Recover && !m.stopping && (f.Kind == RankFailed || f.Kind == RankHung)
}

// refusal says why the job cannot be recovered now, "" if it can.
func (m *Machine) refusal() string {
	switch {
	case m.rec.unrestorable != "":
		return m.rec.unrestorable
	case m.rec.ckpt == nil:
		return fmt.Sprintf("no checkpoint of job %s is committed yet", m.cfg.JobID)
	case m.rec.used >= m.maxRecoveries():
		return fmt.Sprintf("%d recoveries used (--max-recoveries %d)", m.rec.used, m.maxRecoveries())
	}
	return ""
}

// recover starts recovering from failure f if the job can be recovered; it returns false,
// having amended f's reason with why not if f is a failure recovery is for, when the job
// must fail.
func (m *Machine) recover(now time.Time, f *Failure) bool {
	if !m.recoverable(f) {
		return false
	}
	if why := m.refusal(); why != "" {
		f.Reason += "; cannot recover: " + why
		return false
	}
	old := m.cfg.NP
	np, placement, err := m.recoveryPlacement()
	if err != "" {
		f.Reason += "; cannot recover: " + err
		return false
	}
	m.dropResize()
	m.rec.used++
	ck := *m.rec.ckpt
	lost := int64(-1)
	if m.rec.lastIter >= 0 {
		lost = max(m.rec.lastIter-ck.Iteration, 0)
	}
	failedAt := m.rec.firstBad
	if failedAt.IsZero() {
		failedAt = now
	}
	m.rec.active = &attempt{cause: f.Reason, rank: f.Rank, ckpt: ck, lost: lost, failedAt: failedAt, decidedAt: now, oldNP: old, np: np}
	m.rec.placement = placement
	entry := reconf.Reconfiguration{Kind: reconf.Recover, Reason: f.Reason, Iteration: int(ck.Iteration)}
	if np < old {
		entry.NP, entry.OldNP = np, old
	}
	m.logRecovering(f.Reason)
	m.propose(entry)
	// Whatever still runs belongs to the failed run: it computes nothing useful any more,
	// and its state is in the checkpoint.
	m.rec.killing = true
	m.failing = nil
	m.rdvAt = time.Time{}
	for _, id := range m.running() {
		m.emit(SignalProc{Proc: id, Sig: syscall.SIGKILL})
	}
	m.respawnIfClear()
	return true
}

// recoveryPlacement decides where the ranks of a recovery restart: the job's ranks on the
// nodes that survive or, if too few slots survive, a malleable job's fewer ranks restarted
// from the checkpoint into the slots there are. It returns why not if no rank can go on.
func (m *Machine) recoveryPlacement() (np int, placement []string, why string) {
	if placement, why = m.place(m.cfg.NP); why == "" {
		return m.cfg.NP, placement, ""
	}
	return m.shrunkPlacement(why)
}

// logRecovering logs the decision of the recovery under way, after cause.
func (m *Machine) logRecovering(cause string) {
	a := m.rec.active
	if a.np < a.oldNP {
		m.logf("%s; recovering (%d of %d): the job shrinks from %d to %d ranks (%d slot(s) missing) and every rank restarts from checkpoint %d (iteration %d)%s",
			cause, m.rec.used, m.maxRecoveries(), a.oldNP, a.np, a.oldNP-a.np, a.ckpt.Seq, a.ckpt.Iteration, lostText(a.lost))
		return
	}
	m.logf("%s; recovering (%d of %d): every rank restarts from checkpoint %d (iteration %d)%s",
		cause, m.rec.used, m.maxRecoveries(), a.ckpt.Seq, a.ckpt.Iteration, lostText(a.lost))
}

// placeAgain decides the recovery's placement again when a node it names was found lost
// while the failed run was being stopped (asked to kill the ranks there, the node's pcmd did
// not answer), or began draining meanwhile: the first decision could not know, and starting
// a rank there would fail. It returns false, having failed the job, if no rank can go on.
func (m *Machine) placeAgain() bool {
	a := m.rec.active
	if a == nil {
		return true
	}
	var lost, draining []string
	for _, n := range m.rec.placement {
		switch {
		case n == "" || slices.Contains(lost, n) || slices.Contains(draining, n):
		case m.nodeLost(n):
			lost = append(lost, n)
		case m.draining[n]:
			draining = append(draining, n)
		}
	}
	if len(lost)+len(draining) == 0 {
		return true
	}
	slices.Sort(lost)
	slices.Sort(draining)
	var causes []string
	if len(lost) > 0 {
		causes = append(causes, fmt.Sprintf("node %s was lost", strings.Join(lost, ", ")))
	}
	if len(draining) > 0 {
		causes = append(causes, fmt.Sprintf("node %s began draining", strings.Join(draining, ", ")))
	}
	cause := strings.Join(causes, " and ") + " while the failed run was being stopped"
	np, placement, why := m.recoveryPlacement()
	if why != "" {
		m.rec.active = nil
		reason := a.cause + "; " + cause + "; cannot recover: " + why
		if e := m.lastRecoverEntry(); e != nil {
			_ = e.Advance(reconf.Aborted, errors.New(cause))
		}
		m.giveUp(m.now, &Failure{Kind: RankFailed, Rank: a.rank, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventAbort, Rank: a.rank, Reason: reason})
		return false
	}
	a.np, m.rec.placement = np, placement
	if e := m.lastRecoverEntry(); e != nil {
		e.NP, e.OldNP = 0, 0
		if np < a.oldNP {
			e.NP, e.OldNP = np, a.oldNP
		}
	}
	m.logRecovering(cause)
	return true
}

func lostText(lost int64) string {
	if lost < 0 {
		return ""
	}
	return fmt.Sprintf(", %d iterations lost", lost)
}

// onStartedWhileKilling takes the start of a process asked for before the failure (the next
// initial rank, a migration's successor): it belongs to the failed run too.
func (m *Machine) onStartedWhileKilling(id ProcID, p *proc, e Started) {
	if e.Err != nil {
		switch {
		case e.NodeGone && p.node != "":
			m.noteNodeLost(p.node)
		case e.NodeClosed && p.node != "":
			m.draining[p.node] = true
		}
		delete(m.procs, id)
		m.respawnIfClear()
		return
	}
	p.pid, p.running = e.PID, true
	if e.Node != "" {
		p.node = e.Node
	}
	m.live++
	m.reply(p.reply, job.MigrateReply{Error: "mpirun: the job is being recovered"})
	m.emit(SignalProc{Proc: id, Sig: syscall.SIGKILL})
}

// onKilledExit takes the exit of a process of the failed run.
func (m *Machine) onKilledExit(p *proc) {
	st := &m.ranks[p.rank]
	if m.procs[st.proc] == p {
		st.running = false
	}
	m.respawnIfClear()
}

// respawnIfClear starts the new run once no process of the failed run is left.
func (m *Machine) respawnIfClear() {
	if !m.rec.killing || m.live > 0 || m.starting > 0 {
		return
	}
	m.rec.killing = false
	if !m.placeAgain() {
		return
	}
	m.rec.beats = make(map[ProcID]beat)
	m.rec.lastIter, m.rec.firstBad = -1, time.Time{}
	// A new rendezvous: the restarted ranks say hello again.
	m.hellos, m.early, m.rdvDone, m.rdvAt, m.firstLost = 0, 0, false, time.Time{}, -1
	for i := range m.ranks {
		st := &m.ranks[i]
		if st.next != nil {
			m.settle(st.next.seq, i, reconf.Aborted, "the job is being recovered")
		}
		*st = rank{incarnation: st.incarnation + 1}
	}
	if a := m.rec.active; a != nil && a.np < len(m.ranks) {
		m.ranks, m.cfg.NP = m.ranks[:a.np], a.np
	}
	m.nextRank = 0
	m.startNext()
}

// initialStart is the StartRank of rank r at a launch or a recovery.
func (m *Machine) initialStart(r int) StartRank {
	s := StartRank{Proc: m.newProc(r), Rank: r}
	if m.rec.active != nil {
		s.Node, s.Incarnation, s.Restart = m.rec.placement[r], m.ranks[r].incarnation, m.cfg.JobID
		s.Size = m.cfg.NP // the job's size now: a resize or a shrinking recovery changed it
		s.ReconfBase = uint64(len(m.log.Entries))
		m.procs[s.Proc].node = s.Node // where it was asked to start, should its node be gone
	}
	return s
}

// allStarted notes that every rank of a run is started.
func (m *Machine) allStarted() {
	if a := m.rec.active; a != nil && a.startedAt.IsZero() {
		a.startedAt = m.now
	}
}

// onRestored ends a recovery: the ranks compute again.
func (m *Machine) onRestored(now time.Time, r job.Restored) {
	a := m.rec.active
	if a == nil || m.stopping {
		return
	}
	if r.Error != "" {
		// The ranks fail next; their failure ends the job with this reason.
		why := r.Error
		if len(why) > maxReportedError {
			why = why[:maxReportedError] + "..."
		}
		m.rec.unrestorable = fmt.Sprintf("no copy of checkpoint %d or an older one can be restored (every copy of a piece is lost): %s", a.ckpt.Seq, why)
		if e := m.lastRecoverEntry(); e != nil {
			_ = e.Advance(reconf.Aborted, errors.New(m.rec.unrestorable))
		}
		return
	}
	m.rec.active = nil
	started := a.startedAt
	if started.IsZero() {
		started = now
	}
	note := ""
	switch {
	case r.Seq > a.ckpt.Seq:
		// A newer checkpoint committed before rank 0's report of it arrived: the ranks found
		// it in the store, and less work was lost than decided.
		if a.lost >= 0 {
			a.lost = max(a.lost-(r.Iteration-a.ckpt.Iteration), 0)
		}
	case r.Seq < a.ckpt.Seq:
		note = fmt.Sprintf("; checkpoint %d was unusable", a.ckpt.Seq)
		if a.lost >= 0 {
			a.lost += a.ckpt.Iteration - r.Iteration
		}
	}
	if a.np < a.oldNP {
		note += fmt.Sprintf("; the job shrank from %d to %d ranks", a.oldNP, a.np)
	}
	m.logf("recovered from the failure of %s: every rank restarted from checkpoint %d (iteration %d)%s in %v (detection %v, respawn %v, load %v)%s",
		rankText(a.rank), r.Seq, r.Iteration, lostText(a.lost), now.Sub(a.failedAt).Round(time.Millisecond),
		a.decidedAt.Sub(a.failedAt).Round(time.Millisecond), started.Sub(a.decidedAt).Round(time.Millisecond),
		now.Sub(started).Round(time.Millisecond), note)
	if e := m.lastRecoverEntry(); e != nil {
		_ = e.Advance(reconf.Committed, nil)
		e.Iteration = int(r.Iteration)
	}
}

func rankText(r int) string {
	if r < 0 {
		return "the job"
	}
	return fmt.Sprintf("rank %d", r)
}

func (m *Machine) lastRecoverEntry() *reconf.Reconfiguration {
	for i := len(m.log.Entries) - 1; i >= 0; i-- {
		if e := &m.log.Entries[i]; e.Kind == reconf.Recover && !e.State.Final() {
			return e
		}
	}
	return nil
}

// place decides where ranks 0..np-1 restart: each on its node (or, for a rank that a
// recovery under way had not started yet, where that recovery placed it) if the node is
// alive, not draining and has room within the job's slots, else on such a node with a free
// slot. For ranks that ran on this machine (node "") it is this machine. It returns why not,
// if the ranks do not fit.
func (m *Machine) place(np int) ([]string, string) {
	placement := make([]string, np)
	used := make(map[string]int)
	var homeless []int
	for r := range np {
		node := ""
		if p := m.procs[m.ranks[r].proc]; p != nil {
			node = p.node
		} else if m.rec.active != nil && r < len(m.rec.placement) {
			node = m.rec.placement[r] // a restart that did not get that far: where it was going
		}
		if node == "" && len(m.cfg.Slots) == 0 {
			continue // this machine
		}
		if node != "" && m.takesRanks(node) && used[node] < m.slots(node) {
			placement[r] = node
			used[node]++
			continue
		}
		homeless = append(homeless, r)
	}
	nodes := make([]string, 0, len(m.cfg.Slots))
	for n := range m.cfg.Slots {
		if m.takesRanks(n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	for len(homeless) > 0 {
		placed := false
		for _, n := range nodes {
			if used[n] < m.slots(n) {
				placement[homeless[0]] = n
				used[n]++
				homeless, placed = homeless[1:], true
				break
			}
		}
		if !placed {
			break
		}
	}
	if len(homeless) == 0 {
		return placement, ""
	}
	return nil, fmt.Sprintf("no surviving node has room for rank %s (%d slot(s) missing; %s)",
		joinInts(homeless), len(homeless), m.nodesText())
}

// nodesText lists the job's nodes by standing, for the reason a recovery cannot place ranks:
// "lost: n2; draining: n1; surviving: n3" (draining only if some node drains).
func (m *Machine) nodesText() string {
	var lost, draining, surviving []string
	for n := range m.cfg.Slots {
		switch {
		case m.nodeLost(n):
			lost = append(lost, n)
		case m.draining[n]:
			draining = append(draining, n)
		default:
			surviving = append(surviving, n)
		}
	}
	slices.Sort(lost)
	slices.Sort(draining)
	slices.Sort(surviving)
	text := "lost: " + orNone(lost)
	if len(draining) > 0 {
		text += "; draining: " + strings.Join(draining, ", ")
	}
	return text + "; surviving: " + orNone(surviving)
}

// takesRanks reports whether a recovery may start ranks on node: it is neither lost nor
// draining.
func (m *Machine) takesRanks(node string) bool {
	return !m.nodeLost(node) && !m.draining[node]
}

// onNodeDraining notes that a node drains, or takes ranks again.
func (m *Machine) onNodeDraining(e NodeDraining) {
	if e.Draining {
		m.draining[e.Node] = true
	} else {
		delete(m.draining, e.Node)
	}
}

// shrunkPlacement is the recovery of a job whose ranks do not all fit on the surviving nodes
// (why): a malleable job restarts into as many ranks as there are slots, its checkpoint
// redistributed over them (pcm restarts a checkpoint into another size). It returns the new
// size and placement, or why the job cannot go on.
func (m *Machine) shrunkPlacement(why string) (int, []string, string) {
	if !m.malleable {
		return 0, nil, why + "; the job cannot shrink: its ranks registered no distributed data (pcm.NewBlock)"
	}
	room := 0
	for n := range m.cfg.Slots {
		if m.takesRanks(n) {
			room += m.slots(n)
		}
	}
	if room == 0 {
		return 0, nil, fmt.Sprintf("no surviving node has room for any rank (%s)", m.nodesText())
	}
	placement, err := m.place(room)
	return room, placement, err
}

// dropResize gives up the resize under way when the job is recovered: its processes are
// killed with the others, and the restarted ranks do not act on it.
func (m *Machine) dropResize() {
	rs := m.rs
	if rs == nil {
		return
	}
	m.rs = nil
	if len(rs.checks) > 0 { // not answered yet
		m.ctlError(rs.reply, "cannot resize job %s: it is being recovered", m.cfg.JobID)
	}
	if le := m.log.Get(rs.seq); le != nil && le.State.CanMoveTo(reconf.Aborted) {
		_ = le.Advance(reconf.Aborted, errors.New("the job is being recovered"))
	}
}

// nodeLost reports whether node is gone (NodeGone) or lost a process with it.
func (m *Machine) nodeLost(node string) bool {
	_, gone := m.gone[node]
	return gone || m.rec.lost[node]
}

// slots is the number of ranks the job may run on node.
func (m *Machine) slots(node string) int {
	if n, ok := m.cfg.Slots[node]; ok {
		return n
	}
	if len(m.cfg.Slots) == 0 {
		return m.cfg.NP // no limit known: as many as before
	}
	return 0
}

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

// checkpointsDone commits the requested checkpoints that a committed checkpoint covers: those
// among the first c.Applied log entries, which the ranks had acted on when they took it.
func (m *Machine) checkpointsDone(c job.Committed) {
	for seq := uint64(1); seq <= c.Applied; seq++ {
		if e := m.log.Get(seq); e != nil && e.Kind == reconf.Checkpoint && e.State.CanMoveTo(reconf.Committed) {
			_ = e.Advance(reconf.Committed, nil)
			e.Iteration, e.Bytes = int(c.Iteration), c.Bytes
		}
	}
}
