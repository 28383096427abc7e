// Package supervisor is the job side of mpirun as a deterministic state machine: it decides
// what happens to a running job — the rendezvous, the failure of a rank and which rank is to
// blame, stopping the job, reconfigurations (checkpoints, migrations, resizes) with their
// typed log (internal/reconf), automatic recovery, shrinking a malleable job that lost slots
// (recover.go), and the slots of nodes that join (join.go).
//
// A Machine owns no goroutine, socket, process or clock. The loop around it (internal/launch)
// feeds it Events with the current time — a rank started or exited, a NATS request arrived,
// a timer expired — and carries out the Actions it returns: start or signal a process, reply
// to a request, publish, log. Time passes only through Step's now, and the Machine names the
// next instant it must be woken at (NextDeadline), so tests drive it with fake processes and
// a fake clock, as etcd's raft is driven (raft.go + node.go).
//
// The migration of a rank, from the supervisor's view (MPI/IOS paper, seed 004): a request
// is accepted once the target node can take the rank, and published as a Proposed entry of
// the log; at the next iteration boundary the migrating rank asks for its successor, which
// the Machine starts on the target (Prepared); the rank reports the outcome, or its process
// exits cleanly after handing over, and the successor becomes the rank's process
// (Committed); the old process's exit is then not a failure. A failure before the commit
// (target unknown, gone or refusing, successor dead before taking over) aborts the
// migration and the rank goes on where it was (Aborted).
package supervisor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Exit statuses of failed jobs that have no rank status to report.
const (
	StatusFailed   = 1   // rendezvous failed, a rank could not be started, job cancelled
	StatusTimedOut = 124 // the job timed out (as timeout(1))
)

// DefaultFailureWindow is how long the Machine waits after a rank fails for other failures
// to arrive: peers of a dead rank notice its death within microseconds and may exit
// (reporting the failure they saw) before mpirun has even read the first exit status.
const DefaultFailureWindow = 150 * time.Millisecond

// DefaultMigrationTimeout bounds the wait for the ranks to reach an agreement point on an
// accepted migration (Config.MigrationTimeout). The ranks agree at least every half second
// of iterations (pcm), so only a rank that cannot learn of the request, or an iteration
// longer than this, reaches it.
const DefaultMigrationTimeout = time.Minute

// RepublishEvery is how often the Machine publishes the reconfiguration log again while an
// accepted migration waits for its rank: the ranks act only on entries every one of them
// holds, and a rank that missed a publication (at-most-once delivery, a reconnection)
// would otherwise not learn of it before the next request.
const RepublishEvery = 2 * time.Second

// Config describes the job a Machine supervises.
type Config struct {
	JobID             string
	NP                int           // ranks, >= 1
	RendezvousTimeout time.Duration // measured from the first hello; > 0
	KillGrace         time.Duration // SIGTERM to SIGKILL delay when stopping; > 0
	Timeout           time.Duration // stop the job after this long; 0 = never
	FailureWindow     time.Duration // 0 = DefaultFailureWindow
	// MigrationTimeout aborts an accepted migration whose rank has not asked for its
	// successor this long after the acceptance; 0 = DefaultMigrationTimeout.
	MigrationTimeout time.Duration

	// Migrations says the starter can place ranks on named nodes (pcmd nodes).
	Migrations bool
	// Checkpoints says the ranks take checkpoints (mpirun --ckpt-every).
	Checkpoints bool
	// Policy is the job's IOS decision policy, shown by pcmd status.
	Policy string

	// Recover restarts the job from its newest committed checkpoint when a rank fails
	// (recover.go), at most MaxRecoveries times (0: DefaultMaxRecoveries; < 0: never).
	Recover       bool
	MaxRecoveries int
	// HangTimeout declares failed a rank process that sent no liveness beat for this long;
	// 0 turns hang detection off.
	HangTimeout time.Duration
	// Slots is how many ranks the job may run on each of its nodes, where recovery may
	// restart ranks and a resize that names no node may grow; nil for ranks on this
	// machine. Nodes that join (NodeJoined) add theirs.
	Slots map[string]int
}

func (c *Config) validate() error {
	switch {
	case c.NP < 1:
		return fmt.Errorf("supervisor: number of ranks is %d, want at least 1", c.NP)
	case c.RendezvousTimeout <= 0 || c.KillGrace <= 0:
		return errors.New("supervisor: rendezvous timeout and kill grace must be positive")
	case c.Timeout < 0 || c.FailureWindow < 0 || c.HangTimeout < 0 || c.MigrationTimeout < 0:
		return errors.New("supervisor: timeouts must not be negative")
	}
	if c.FailureWindow == 0 {
		c.FailureWindow = DefaultFailureWindow
	}
	if c.MigrationTimeout == 0 {
		c.MigrationTimeout = DefaultMigrationTimeout
	}
	return nil
}

// FailureKind says why a job failed.
type FailureKind int

// Kinds of job failure.
const (
	RankFailed       FailureKind = iota + 1 // a rank exited non-zero or was killed
	RankAborted                             // a rank published a job.Abort
	TimedOut                                // the job timeout expired
	Interrupted                             // mpirun received a signal
	RendezvousFailed                        // the ranks did not all say hello in time
	StartFailed                             // a rank could not be started
	Cancelled                               // the caller cancelled the job
	RankHung                                // a rank sent no liveness beat for Config.HangTimeout
)

// Failure is why a job failed and the exit status mpirun returns for it.
type Failure struct {
	Kind   FailureKind
	Rank   int // the rank at fault, or -1
	Code   int // exit status, never 0
	Reason string
}

// proc is a process the Machine started.
type proc struct {
	rank    int
	node    string
	pid     int
	running bool // started and not exited
	// Not the rank's current process: a successor that has not taken over (successor), or a
	// predecessor that handed over.
	side      bool
	successor bool
	killed    bool   // the Machine killed it (its migration was aborted)
	seq       uint64 // successor: its migration's request
	reply     string // successor: the rank's request, answered once it started
	joiner    bool   // started for a resize, not a rank until it commits (resize.go)
	leaving   bool   // its rank left at a shrink
}

// successor is a migration of a rank in progress.
type successor struct {
	seq   uint64
	to    string
	proc  ProcID // 0 until started
	start ProcID // the StartRank waiting for its Started
	// deadline is when the migration is aborted if the rank has not asked for its
	// successor by then (Config.MigrationTimeout).
	deadline time.Time
}

// waiting reports whether the rank has yet to ask for this successor at an agreement point.
func (s *successor) waiting() bool { return s.proc == 0 && s.start == 0 }

// rank is the Machine's view of one rank.
type rank struct {
	proc        ProcID // current process; 0 before it started
	running     bool
	hello       string // reply subject of the pending hello, "" if none
	helloMsg    job.Hello
	early       bool // exited with status 0 before saying hello
	incarnation int  // migrations so far
	next        *successor
}

// pendingCheck is a migration request waiting for its CheckNode.
type pendingCheck struct {
	reply  string
	ranks  []int
	to     string
	reason string
}

// collect is a failure window: failed exits gathered to pick the culprit.
type collect struct {
	until  time.Time
	failed []Exited
}

// Machine is the supervisor of one job. Its zero value is not usable: see New. A Machine
// is not safe for concurrent use; the loop calls it from one goroutine.
type Machine struct {
	cfg Config

	procs    map[ProcID]*proc
	lastProc ProcID
	live     int // processes started and not exited
	starting int // StartRanks not answered yet
	launched bool
	nextRank int // next initial rank to start

	ranks     []rank
	hellos    int
	early     int
	rdvDone   bool
	rdvAt     time.Time // rendezvous deadline, zero until the first hello
	timeoutAt time.Time // job deadline, zero if none
	firstLost int

	failing    *collect
	lostResize *lostResize // a resize a failed rank ended, its abort not yet recorded
	failure    *Failure
	stopping   bool
	graceAt    time.Time // when the ranks still running get SIGKILL, zero if not armed
	signalled  int

	log       reconf.Log
	history   []job.Migration
	checks    map[uint64]pendingCheck
	lastCheck uint64
	// joints are the exchanges whose parts are being collected (joint.go), and
	// jointChecks the CheckNodes of their targets.
	joints      map[jointKey]*joint
	jointChecks map[uint64]jointKey
	// republishAt is when the log is published again for a migration that waits for its
	// rank (RepublishEvery); zero if not armed.
	republishAt time.Time
	gone        map[string]string // nodes gone, and why
	draining    map[string]bool   // nodes that take no new ranks (NodeDraining)
	rs          *resizing         // the resize under way (resize.go)
	rigid       bool              // the ranks registered no distributed data (resize.go)
	malleable   bool              // they registered some: the job can shrink when recovered (recover.go)

	now time.Time // of the event being stepped
	out []Action

	rec recovery // automatic recovery and liveness (recover.go)
}

// New returns the Machine of a job described by cfg.
func New(cfg Config) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Slots = maps.Clone(cfg.Slots) // nodes that join add theirs
	return &Machine{
		cfg:         cfg,
		procs:       make(map[ProcID]*proc),
		ranks:       make([]rank, cfg.NP),
		firstLost:   -1,
		checks:      make(map[uint64]pendingCheck),
		joints:      make(map[jointKey]*joint),
		jointChecks: make(map[uint64]jointKey),
		gone:        make(map[string]string),
		draining:    make(map[string]bool),
		rec:         recovery{beats: make(map[ProcID]beat), lastIter: -1},
	}, nil
}

// Step applies ev, which happened at now, and returns what the loop must do, in order.
func (m *Machine) Step(now time.Time, ev Event) []Action {
	m.out, m.now = nil, now
	switch e := ev.(type) {
	case Launch:
		m.onLaunch(now)
	case Started:
		m.onStarted(now, e)
	case Exited:
		m.onExited(now, e)
	case Hello:
		m.onHello(now, e)
	case Abort:
		m.onAbort(now, e)
	case Lost:
		m.onLost(e)
	case Control:
		m.onControl(e)
	case NodeChecked:
		if !m.onResizeChecked(e) && !m.onJointChecked(now, e) {
			m.onNodeChecked(now, e)
		}
	case ResizeHello:
		m.onResizeHello(e)
	case ResizeReport:
		m.onResizeReport(e)
	case Malleable:
		m.onMalleable(e)
	case SuccessorRequest:
		m.onSuccessorRequest(e)
	case MigrateReport:
		m.onMigrateReport(e)
	case LogRequest:
		m.reply(e.Reply, m.Log())
	case InfoRequest:
		m.reply(e.Reply, m.Info())
	case Signal:
		m.onSignal(now, e)
	case Cancel:
		m.fail(now, &Failure{Kind: Cancelled, Rank: -1, Code: StatusFailed, Reason: "job cancelled: " + e.Cause},
			&job.Event{Kind: job.EventAbort, Rank: -1, Reason: "job cancelled"})
	case NodeGone:
		if _, seen := m.gone[e.Node]; !seen {
			m.gone[e.Node] = e.Reason
		}
	case NodeDraining:
		m.onNodeDraining(e)
	case NodeJoined:
		m.onNodeJoined(e)
	case Alive, Committed, Restored, ControlPlaneDown, ControlPlaneUp, Stalled:
		m.onRecoveryEvent(now, e)
	case Tick:
	}
	m.expire(now)
	out := m.out
	m.out = nil
	return out
}

// NextDeadline returns when the Machine must next get a Tick, if it waits for a time.
func (m *Machine) NextDeadline() (time.Time, bool) {
	var at time.Time
	for _, t := range []time.Time{m.rdvAt, m.timeoutAt, m.graceAt, m.hangDeadline(), m.moveDeadline(), m.jointDeadline()} {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if m.failing != nil && (at.IsZero() || m.failing.until.Before(at)) {
		at = m.failing.until
	}
	return at, !at.IsZero()
}

// Done reports whether the job is over: it was launched and no process it started runs
// or is being started.
func (m *Machine) Done() bool {
	return m.launched && m.live == 0 && m.starting == 0 && m.failing == nil
}

// Failure returns why the job failed, or nil if it did not (yet).
func (m *Machine) Failure() *Failure {
	if m.failure == nil {
		return nil
	}
	f := *m.failure
	return &f
}

// Log returns a copy of the reconfiguration log.
func (m *Machine) Log() reconf.Log {
	return reconf.Log{Entries: slices.Clone(m.log.Entries)}
}

// Info returns where the ranks run and the job's migrations and reconfigurations.
func (m *Machine) Info() job.JobInfo {
	info := job.JobInfo{Job: m.cfg.JobID, Size: m.cfg.NP, Policy: m.cfg.Policy, Malleable: m.malleable,
		Migrations: slices.Clone(m.history), Reconfigurations: slices.Clone(m.log.Entries)}
	for i := range m.ranks {
		st := &m.ranks[i]
		jr := job.JobRank{Rank: i, Incarnation: st.incarnation}
		if p := m.procs[st.proc]; p != nil {
			jr.Node, jr.PID = p.node, p.pid
		}
		info.Ranks = append(info.Ranks, jr)
	}
	return info
}

// Hosts returns the node of each rank's current process while it runs ("" for this
// machine or a rank not running): what a successor shares its node with.
func (m *Machine) Hosts() []string {
	hosts := make([]string, len(m.ranks))
	for i, st := range m.ranks {
		if p := m.procs[st.proc]; st.running && p != nil {
			hosts[i] = p.node
		}
	}
	return hosts
}

func (m *Machine) emit(a Action) { m.out = append(m.out, a) }

func (m *Machine) logf(format string, args ...any) {
	m.emit(Log{Line: fmt.Sprintf(format, args...)})
}

// reply answers a request that has a reply subject.
func (m *Machine) reply(to string, msg any) {
	if to != "" {
		m.emit(Reply{To: to, Msg: msg})
	}
}

func (m *Machine) newProc(rank int) ProcID {
	m.lastProc++
	m.procs[m.lastProc] = &proc{rank: rank}
	m.starting++
	return m.lastProc
}

// expire acts on the deadlines that passed.
func (m *Machine) expire(now time.Time) {
	if m.failing != nil && !now.Before(m.failing.until) {
		m.blame(now)
	}
	if !m.rdvAt.IsZero() && !now.Before(m.rdvAt) {
		m.rdvAt = time.Time{}
		m.onRendezvousTimeout(now)
	}
	if !m.timeoutAt.IsZero() && !now.Before(m.timeoutAt) {
		m.timeoutAt = time.Time{}
		reason := "job timed out after " + m.cfg.Timeout.String()
		m.fail(now, &Failure{Kind: TimedOut, Rank: -1, Code: StatusTimedOut, Reason: reason},
			&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
	}
	if !m.graceAt.IsZero() && !now.Before(m.graceAt) {
		m.graceAt = time.Time{}
		m.killAll(true)
	}
	m.checkHangs(now)
	m.expireMoves(now)
	m.expireJoints(now)
}

func (m *Machine) onLaunch(now time.Time) {
	if m.launched {
		return
	}
	m.launched = true
	if m.cfg.Timeout > 0 {
		m.timeoutAt = now.Add(m.cfg.Timeout)
	}
	m.startNext()
}

// startNext starts the next initial rank: one at a time, so a rank that cannot be started
// stops the others from starting.
func (m *Machine) startNext() {
	if m.nextRank >= m.cfg.NP || m.stopping {
		m.allStarted()
		return
	}
	r := m.nextRank
	m.nextRank++
	m.emit(m.initialStart(r))
}

func (m *Machine) onStarted(now time.Time, e Started) {
	p := m.procs[e.Proc]
	if p == nil || p.running || p.pid != 0 {
		return // not a start the Machine is waiting for
	}
	m.starting--
	if m.rec.killing {
		m.onStartedWhileKilling(e.Proc, p, e)
		return
	}
	if p.joiner {
		m.onJoinerStarted(e.Proc, p, e)
		return
	}
	if p.successor {
		m.onSuccessorStarted(e.Proc, p, e)
		return
	}
	if e.Err != nil {
		delete(m.procs, e.Proc)
		kind := StartFailed
		switch {
		case e.NodeGone && p.node != "":
			// Its node was lost, as a rank is lost with its node: a recovery restarts the
			// job on the nodes that are left.
			m.noteNodeLost(p.node)
			kind = RankFailed
		case e.NodeClosed && p.node != "":
			// Its node began draining after the placement was decided: a recovery
			// restarts the job on the nodes that take ranks.
			m.draining[p.node] = true
			kind = RankFailed
		}
		m.fail(now, &Failure{Kind: kind, Rank: p.rank, Code: StatusFailed,
			Reason: fmt.Sprintf("cannot start rank %d: %v", p.rank, e.Err)},
			&job.Event{Kind: job.EventAbort, Rank: p.rank, Reason: "rank failed to start"})
		return
	}
	p.pid, p.node, p.running = e.PID, e.Node, true
	m.live++
	m.ranks[p.rank].proc, m.ranks[p.rank].running = e.Proc, true
	if m.stopping {
		// The job began stopping while this rank was being started.
		m.emit(SignalProc{Proc: e.Proc, Sig: syscall.SIGTERM})
		return
	}
	m.startNext()
}

// describe names a rank and its current process for messages.
func (m *Machine) describe(r int) string {
	return describeProc(r, m.procs[m.ranks[r].proc])
}

func describeProc(r int, p *proc) string {
	switch {
	case p == nil || p.pid == 0:
		return "rank " + strconv.Itoa(r)
	case p.node != "":
		return fmt.Sprintf("rank %d (pid %d on %s)", r, p.pid, p.node)
	}
	return fmt.Sprintf("rank %d (pid %d)", r, p.pid)
}

// nodeOf names where a process runs, for messages.
func nodeOf(p *proc) string {
	if p == nil || p.node == "" {
		return "local"
	}
	return p.node
}

func exitText(e Exited) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Desc
}

func (e Exited) failed() bool { return e.Err != nil || e.Status != 0 }

func (m *Machine) onExited(now time.Time, e Exited) {
	p := m.procs[e.Proc]
	if p == nil || !p.running {
		return
	}
	if m.onResizeExit(e.Proc, p, e) {
		return
	}
	defer func() {
		if m.failing == nil {
			// No failure window holds the cause open: the exit itself is it.
			m.settleLostResize(m.lostResizeWhy())
		}
	}()
	p.running = false
	m.live--
	m.noteExit(p, e)
	if m.rec.killing {
		m.onKilledExit(p)
		return
	}
	st := &m.ranks[p.rank]
	if st.proc != e.Proc {
		m.onSideExit(p, e)
		return
	}
	if st.next != nil && st.next.proc != 0 && !e.failed() {
		// A migrating rank's process ends cleanly only after handing over: its report
		// may still be on its way.
		st.running = false
		m.commit(p.rank)
		return
	}
	if n := st.next; n != nil && n.waiting() {
		// The rank ended its run, or the job is ending, before the agreement point of its
		// migration.
		why := fmt.Sprintf("rank %d finished first", p.rank)
		if e.failed() || m.stopping || m.failing != nil {
			why = fmt.Sprintf("rank %d's process ended first: %s", p.rank, exitText(e))
		}
		m.dropMove(p.rank, why, true)
	}
	st.running = false
	if m.failing != nil {
		if e.failed() {
			m.failing.failed = append(m.failing.failed, e)
		}
		if m.live == 0 {
			m.blame(now)
		}
		return
	}
	if m.stopping {
		return
	}
	if e.Err != nil {
		reason := fmt.Sprintf("%s: %v", m.describe(p.rank), e.Err)
		m.fail(now, &Failure{Kind: RankFailed, Rank: p.rank, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: p.rank, Reason: reason})
		return
	}
	if e.failed() {
		// Other failures may follow within the window; an Abort published before this exit
		// is made sure to be queued by the Flush.
		m.failing = &collect{until: now.Add(m.cfg.FailureWindow), failed: []Exited{e}}
		m.emit(Flush{})
		if m.live == 0 {
			m.blame(now)
		}
		return
	}
	if m.rdvDone {
		return
	}
	// A clean exit before the rendezvous is fine for programs that never call mpi.Init, but
	// if any rank has said hello this one's peers would wait for it in vain.
	if st.hello != "" || m.hellos > 0 {
		reason := m.describe(p.rank) + " exited before the rendezvous completed"
		m.fail(now, &Failure{Kind: RendezvousFailed, Rank: p.rank, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: p.rank, Reason: reason})
		return
	}
	st.early = true
	m.early++
}

// blame ends the failure window: the failed exit most likely to be the cause is the job's
// failure, the others are reported as its consequences.
func (m *Machine) blame(now time.Time) {
	c := m.failing
	m.failing = nil
	defer m.settleLostResize(m.lostResizeWhy()) // when no culprit is named below
	if c == nil || m.failure != nil {
		return
	}
	// The first lost-peer report names the rank that died first: a rank that exits because
	// it lost a peer has reported that loss (and flushed it) before it exits, so reports of
	// its own loss come later. A rank lost with its node comes next; without either, the
	// earliest exit wins.
	score := func(e Exited) int {
		s := 0
		if m.procs[e.Proc].rank == m.firstLost {
			s -= 2
		}
		switch {
		case e.NodeGone:
			s--
		case e.Err != nil:
			s++
		}
		return s
	}
	best := 0
	for i, e := range c.failed {
		if s, b := score(e), score(c.failed[best]); s < b || (s == b && e.At.Before(c.failed[best].At)) {
			best = i
		}
	}
	culprit := c.failed[best]
	r := m.procs[culprit.Proc].rank
	for i, e := range c.failed {
		if i != best {
			q := m.procs[e.Proc].rank
			m.logf("%s %s (after %s failed)", describeProc(q, m.procs[e.Proc]), exitText(e), m.describe(r))
		}
	}
	m.settleLostResize(fmt.Sprintf("%s ended: %s", describeProc(r, m.procs[culprit.Proc]), exitText(culprit)))
	reason, code := m.describe(r)+" "+culprit.Desc, culprit.Status
	if culprit.Err != nil {
		reason, code = fmt.Sprintf("%s: %v", m.describe(r), culprit.Err), StatusFailed
	}
	m.fail(now, &Failure{Kind: RankFailed, Rank: r, Code: code, Reason: reason},
		&job.Event{Kind: job.EventRankFailed, Rank: r, Reason: reason})
}

func (m *Machine) onHello(now time.Time, e Hello) {
	var h job.Hello
	if err := job.Decode(e.Data, &h); err != nil {
		m.logf("ignoring malformed hello: %v", job.TrimPrefix(err))
		m.reject(e.Reply, "malformed hello")
		return
	}
	if err := h.Validate(m.cfg.NP); err != nil {
		m.logf("ignoring invalid hello: %v", job.TrimPrefix(err))
		m.reject(e.Reply, job.TrimPrefix(err).Error())
		return
	}
	if m.stopping || m.failing != nil {
		m.reject(e.Reply, "the job is stopping")
		return
	}
	if m.rdvDone {
		m.logf("ignoring hello from rank %d (pid %d): the rendezvous is complete", h.Rank, h.PID)
		m.reject(e.Reply, "the rendezvous is already complete")
		return
	}
	if e.Reply == "" {
		m.logf("ignoring hello from rank %d (pid %d): no reply subject", h.Rank, h.PID)
		return
	}
	st := &m.ranks[h.Rank]
	if st.hello != "" {
		if st.helloMsg.PID == h.PID && st.helloMsg.Host == h.Host {
			st.hello, st.helloMsg = e.Reply, h // a retried request: answer the latest one
			return
		}
		m.logf("ignoring duplicate hello for rank %d from pid %d on %q (pid %d on %q said hello first)",
			h.Rank, h.PID, h.Host, st.helloMsg.PID, st.helloMsg.Host)
		m.reject(e.Reply, fmt.Sprintf("duplicate hello for rank %d", h.Rank))
		return
	}
	st.hello, st.helloMsg = e.Reply, h
	m.hellos++
	if m.early > 0 {
		var early []int
		for i := range m.ranks {
			if m.ranks[i].early {
				early = append(early, i)
			}
		}
		reason := fmt.Sprintf("rank %s exited before the rendezvous completed", joinInts(early))
		m.fail(now, &Failure{Kind: RendezvousFailed, Rank: -1, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
		return
	}
	if m.hellos == 1 {
		// Measured from the first hello, as a rank measures its own wait from its Init: a
		// program that never calls Init is not a rendezvous failure.
		m.rdvAt = now.Add(m.cfg.RendezvousTimeout)
	}
	if m.hellos < m.cfg.NP {
		return
	}
	m.rdvDone = true
	m.rdvAt = time.Time{}
	table := job.Table{Addrs: make([]string, m.cfg.NP)}
	for i := range m.ranks {
		table.Addrs[i] = m.ranks[i].helloMsg.Addr
	}
	m.respondAll(table)
}

// respondAll answers every pending hello with t.
func (m *Machine) respondAll(t job.Table) {
	for i := range m.ranks {
		if st := &m.ranks[i]; st.hello != "" {
			m.emit(Reply{To: st.hello, Msg: t})
			st.hello = ""
		}
	}
}

// reject answers a hello that will not take part in the rendezvous.
func (m *Machine) reject(to, reason string) {
	m.reply(to, job.Table{Error: "mpirun: " + reason})
}

func (m *Machine) onRendezvousTimeout(now time.Time) {
	if m.rdvDone || m.stopping {
		return
	}
	var missing []int
	for i := range m.ranks {
		if m.ranks[i].hello == "" {
			missing = append(missing, i)
		}
	}
	reason := fmt.Sprintf("rendezvous timed out after %v: no hello from rank %s", m.cfg.RendezvousTimeout, joinInts(missing))
	m.fail(now, &Failure{Kind: RendezvousFailed, Rank: -1, Code: StatusFailed, Reason: reason},
		&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
}

func (m *Machine) onAbort(now time.Time, e Abort) {
	var a job.Abort
	if err := job.Decode(e.Data, &a); err != nil {
		m.logf("ignoring malformed abort: %v", job.TrimPrefix(err))
		return
	}
	if a.Rank < 0 || a.Rank >= m.cfg.NP {
		m.logf("ignoring abort from rank %d: outside [0,%d)", a.Rank, m.cfg.NP)
		return
	}
	if m.stopping {
		return
	}
	// The OS keeps only the low 8 bits; an abort must never look like success.
	code := a.Code & 0xff
	if code == 0 {
		code = StatusFailed
	}
	reason := fmt.Sprintf("%s called abort with code %d", m.describe(a.Rank), a.Code)
	if a.Message != "" {
		reason += ": " + a.Message
	}
	m.failing = nil // the abort explains the exits gathered so far
	m.fail(now, &Failure{Kind: RankAborted, Rank: a.Rank, Code: code, Reason: reason},
		&job.Event{Kind: job.EventAbort, Rank: a.Rank, Reason: reason})
}

func (m *Machine) onLost(e Lost) {
	var l job.Lost
	if job.Decode(e.Data, &l) != nil || l.Rank < 0 || l.Rank >= m.cfg.NP {
		return
	}
	if m.firstLost < 0 {
		m.firstLost = l.Rank
	}
}

func (m *Machine) onSignal(now time.Time, e Signal) {
	m.signalled++
	if m.signalled > 1 {
		m.logf("received %v again, killing the job", e.Sig)
		m.killAll(false)
		return
	}
	m.fail(now, &Failure{Kind: Interrupted, Rank: -1, Code: 128 + int(e.Sig),
		Reason: fmt.Sprintf("received %v, stopping the job", e.Sig)},
		&job.Event{Kind: job.EventAbort, Rank: -1, Reason: fmt.Sprintf("mpirun received %v", e.Sig)})
}

// fail records the first failure, reports it and stops the job.
func (m *Machine) fail(now time.Time, f *Failure, ev *job.Event) {
	m.settleLostResize(m.lostResizeWhy()) // before the recovery's or the job's end's lines
	if m.failure != nil || m.recover(now, f) {
		return
	}
	m.giveUp(now, f, ev)
}

// giveUp ends the job with failure f: no recovery for it.
func (m *Machine) giveUp(now time.Time, f *Failure, ev *job.Event) {
	m.failing = nil
	m.failure = f
	m.logf("%s", f.Reason)
	if !m.rdvDone {
		// Ranks blocked in the rendezvous learn why instead of waiting for SIGTERM.
		m.respondAll(job.Table{Error: "mpirun: " + f.Reason})
	}
	if ev != nil {
		m.emit(Publish{Subject: job.EventSubject(m.cfg.JobID), Msg: *ev, Flush: true})
	}
	m.stop(now)
}

// stop asks every running process to terminate and arms the kill timer.
func (m *Machine) stop(now time.Time) {
	if m.stopping {
		return
	}
	m.stopping = true
	m.rdvAt = time.Time{}
	for _, id := range m.running() {
		m.emit(SignalProc{Proc: id, Sig: syscall.SIGTERM})
	}
	m.graceAt = now.Add(m.cfg.KillGrace)
}

// running returns the processes that run, current ones in rank order, then the others.
func (m *Machine) running() []ProcID {
	var ids []ProcID
	for i := range m.ranks {
		if st := &m.ranks[i]; st.running {
			ids = append(ids, st.proc)
		}
	}
	var side []ProcID
	for id, p := range m.procs {
		if p.running && p.side {
			side = append(side, id)
		}
	}
	slices.Sort(side)
	return append(ids, side...)
}

// killAll SIGKILLs the processes still running; late says the grace period expired.
func (m *Machine) killAll(late bool) {
	for _, id := range m.running() {
		p := m.procs[id]
		if late && !p.side {
			m.logf("%s did not stop within %v of SIGTERM, killing it", describeProc(p.rank, p), m.cfg.KillGrace)
		}
		m.emit(SignalProc{Proc: id, Sig: syscall.SIGKILL})
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
