package launch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/nats-io/nats.go"
)

// Reconfiguration of a running job: mpirun answers control requests (pcmd migrate, pcmd
// checkpoint, the IOS agents), keeps the job's reconfiguration log that the ranks act on,
// starts the successors of migrating ranks, and follows every rank from process to process.

// successor is the process started to take over a migrating rank.
type successor struct {
	seq  uint64
	to   string
	proc Process // nil until started
}

// sideProc is a process that is not, or no longer, its rank's current one.
type sideProc struct {
	rank      int
	successor bool // started for a migration that has not committed
	killed    bool // mpirun killed it (the migration was aborted)
}

// reconfState is the runner's part for reconfiguration; used by the event loop only.
type reconfState struct {
	path    string
	env     job.Env
	log     reconf.Log
	history []job.Migration
	side    map[Process]sideProc // processes of a rank other than its current one, still running

	ctlCh     chan *nats.Msg
	migrateCh chan *nats.Msg
	reportCh  chan *nats.Msg
	getCh     chan *nats.Msg
	infoCh    chan *nats.Msg
	doneCh    chan func() // results of work done off the loop
}

// subscribeReconf sets up the subjects of reconfiguration.
func (r *runner) subscribeReconf() error {
	id := r.cfg.JobID
	r.rc.side = make(map[Process]sideProc)
	r.rc.doneCh = make(chan func(), 16)
	for _, s := range []struct {
		subj string
		ch   *chan *nats.Msg
	}{
		{job.ControlSubject(id), &r.rc.ctlCh},
		{job.MigrateSubject(id), &r.rc.migrateCh},
		{job.MigratedSubject(id), &r.rc.reportCh},
		{job.ReconfGetSubject(id), &r.rc.getCh},
		{job.JobInfoSubject(id), &r.rc.infoCh},
	} {
		*s.ch = make(chan *nats.Msg, 4*r.cfg.NP+64)
		if _, err := r.nc.ChanSubscribe(s.subj, *s.ch); err != nil {
			return fmt.Errorf("launch: subscribe to %s: %w", s.subj, err)
		}
	}
	return nil
}

func respond(m *nats.Msg, v any) {
	if m.Reply == "" {
		return
	}
	if data, err := job.Encode(v); err == nil {
		_ = m.Respond(data)
	}
}

func ctlError(m *nats.Msg, format string, args ...any) {
	respond(m, job.ControlReply{Error: "mpirun: " + fmt.Sprintf(format, args...)})
}

// nodeOf names where a process runs, for messages.
func nodeOf(p Process) string {
	if p == nil || p.Host() == "" {
		return "local"
	}
	return p.Host()
}

// onControl handles a ControlRequest (pcmd migrate, pcmd checkpoint, IOS agents).
func (r *runner) onControl(m *nats.Msg) {
	var c job.ControlRequest
	if err := job.Decode(m.Data, &c); err != nil {
		ctlError(m, "malformed control request: %v", trimJob(err))
		return
	}
	if err := c.Validate(); err != nil {
		ctlError(m, "%v", trimJob(err))
		return
	}
	if r.stopping || !r.rdvDone {
		ctlError(m, "job %s is not running (starting or stopping)", r.cfg.JobID)
		return
	}
	switch c.Kind {
	case job.ControlCheckpoint:
		if envValue(r.cfg.Env, job.EnvCkptEvery) == "" {
			ctlError(m, "job %s does not checkpoint: start it with --ckpt-every K (0: on request only)", r.cfg.JobID)
			return
		}
		e := r.appendReconf(reconf.Reconfiguration{Kind: reconf.Checkpoint, Reason: c.Reason})
		r.stderr.logf("checkpoint requested (request %d%s)", e.Seq, reasonSuffix(c.Reason))
		respond(m, job.ControlReply{OK: true, Message: fmt.Sprintf("checkpoint of job %s requested (request %d): it is taken at the next agreement point", r.cfg.JobID, e.Seq)})
	case job.ControlMigrate:
		r.onMigrateControl(m, c)
	}
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func (r *runner) onMigrateControl(m *nats.Msg, c job.ControlRequest) {
	ns, ok := r.cfg.Starter.(NodeStarter)
	if !ok {
		ctlError(m, "job %s runs its ranks locally; migrating ranks needs pcmd nodes (start the job with --hosts or --hostfile)", r.cfg.JobID)
		return
	}
	ranks := c.Ranks
	if len(ranks) == 0 {
		ranks = []int{c.Rank}
	}
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	if len(slices.Compact(slices.Clone(ranks))) != len(ranks) {
		ctlError(m, "rank listed twice")
		return
	}
	if err := r.checkMovable(ranks, c.To); err != nil {
		ctlError(m, "%v", err)
		return
	}
	// Asking the node takes a round trip; the loop goes on meanwhile.
	go func() {
		err := ns.CheckNode(c.To)
		r.rc.doneCh <- func() {
			if err != nil {
				ctlError(m, "cannot migrate to %v", trimLaunch(err))
				return
			}
			if err := r.checkMovable(ranks, c.To); err != nil {
				ctlError(m, "%v", err)
				return
			}
			if r.stopping {
				ctlError(m, "job %s is stopping", r.cfg.JobID)
				return
			}
			e := r.appendReconf(reconf.Reconfiguration{Kind: reconf.Migrate, Ranks: ranks, To: c.To, Reason: c.Reason})
			for _, rank := range ranks {
				st := &r.ranks[rank]
				st.next = &successor{seq: e.Seq, to: c.To}
				r.rc.history = append(r.rc.history, job.Migration{Seq: e.Seq, Rank: rank, From: nodeOf(st.proc), To: c.To,
					Reason: c.Reason, State: "requested", At: time.Now().UTC()})
			}
			r.stderr.logf("migration of rank %s to %s requested (request %d%s)", joinInts(ranks), c.To, e.Seq, reasonSuffix(c.Reason))
			respond(m, job.ControlReply{OK: true, Message: fmt.Sprintf("rank %s of job %s moves to %s at the next agreement point (request %d)",
				joinInts(ranks), r.cfg.JobID, c.To, e.Seq)})
		}
	}()
}

// checkMovable says why ranks cannot move to node now, if they cannot.
func (r *runner) checkMovable(ranks []int, node string) error {
	for _, rank := range ranks {
		if rank < 0 || rank >= r.cfg.NP {
			return fmt.Errorf("rank %d is outside job %s (size %d)", rank, r.cfg.JobID, r.cfg.NP)
		}
		st := &r.ranks[rank]
		switch {
		case !st.running:
			return fmt.Errorf("rank %d has exited", rank)
		case st.next != nil:
			return fmt.Errorf("rank %d is already moving to %s (request %d)", rank, st.next.to, st.next.seq)
		case nodeOf(st.proc) == node:
			return fmt.Errorf("rank %d already runs on %s", rank, node)
		}
		for p, sp := range r.rc.side {
			if sp.rank == rank && p.Host() == node {
				return fmt.Errorf("rank %d's previous process on %s has not exited yet; try again", rank, node)
			}
		}
	}
	return nil
}

// appendReconf adds an entry to the log and publishes the log.
func (r *runner) appendReconf(e reconf.Reconfiguration) reconf.Reconfiguration {
	e = r.rc.log.Propose(e, time.Now().UTC())
	r.publishReconf()
	return e
}

func (r *runner) publishReconf() {
	data, err := job.Encode(r.rc.log)
	if err == nil {
		err = r.nc.Publish(job.ReconfSubject(r.cfg.JobID), data)
	}
	if err != nil {
		r.stderr.logf("publish reconfiguration log: %v", err)
	}
}

func (r *runner) onReconfGet(m *nats.Msg) {
	respond(m, r.rc.log)
}

// historyOf returns the newest record of request seq for rank.
func (r *runner) historyOf(seq uint64, rank int) *job.Migration {
	for i := len(r.rc.history) - 1; i >= 0; i-- {
		if h := &r.rc.history[i]; h.Seq == seq && h.Rank == rank {
			return h
		}
	}
	return nil
}

// onMigrateRequest starts the successor a migrating rank asks for.
func (r *runner) onMigrateRequest(m *nats.Msg) {
	var req job.MigrateRequest
	if err := job.Decode(m.Data, &req); err != nil {
		respond(m, job.MigrateReply{Error: "mpirun: malformed migrate request"})
		return
	}
	if err := req.Validate(r.cfg.NP); err != nil {
		respond(m, job.MigrateReply{Error: "mpirun: " + trimJob(err).Error()})
		return
	}
	st := &r.ranks[req.Rank]
	fail := func(format string, args ...any) {
		reason := fmt.Sprintf(format, args...)
		if h := r.historyOf(req.Seq, req.Rank); h != nil && h.State != "failed" {
			h.State, h.Error = "failed", reason
		}
		if st.next != nil && st.next.seq == req.Seq && st.next.proc == nil {
			st.next = nil
		}
		// The rank reports the aborted migration, with this reason, and mpirun logs it then.
		respond(m, job.MigrateReply{Error: "mpirun: " + reason})
	}
	if r.stopping {
		fail("the job is stopping")
		return
	}
	if st.next == nil || st.next.seq != req.Seq || st.next.proc != nil {
		fail("no pending migration of rank %d for request %d", req.Rank, req.Seq)
		return
	}
	ns, ok := r.cfg.Starter.(NodeStarter)
	if !ok {
		fail("ranks run locally")
		return
	}
	if h := r.historyOf(req.Seq, req.Rank); h != nil {
		h.State, h.Iteration = "spawning", req.Iteration
	}
	to, inc := st.next.to, st.incarnation+1
	env := r.rc.env
	env.Rank = req.Rank
	spec := r.spec(req.Rank, r.rc.path, env)
	spec.Incarnation = inc
	spec.Env = append(spec.Env, job.EnvMigrate+"="+req.Handover, job.EnvIncarnation+"="+strconv.Itoa(inc),
		r.successorNodeRanksEnv(to, req.Rank))
	go func() {
		proc, err := ns.StartOn(to, spec)
		r.rc.doneCh <- func() {
			if err != nil {
				fail("cannot start the successor on %s: %v", to, trimLaunch(err))
				return
			}
			r.running++
			r.rc.side[proc] = sideProc{rank: req.Rank, successor: true}
			go func() {
				ex, err := proc.Wait()
				r.exits <- rankExit{rank: req.Rank, proc: proc, exit: ex, err: err}
			}()
			if r.stopping || st.next == nil || st.next.seq != req.Seq {
				r.kill(proc)
				respond(m, job.MigrateReply{Error: "mpirun: the migration was cancelled"})
				return
			}
			st.next.proc = proc
			respond(m, job.MigrateReply{Node: to, PID: proc.PID()})
		}
	}()
}

// onMigrateReport takes a migrating rank's account of how its migration ended.
func (r *runner) onMigrateReport(m *nats.Msg) {
	var rep job.MigrateReport
	if err := job.Decode(m.Data, &rep); err != nil || rep.Rank < 0 || rep.Rank >= r.cfg.NP {
		r.stderr.logf("ignoring a malformed migration report")
		return
	}
	st := &r.ranks[rep.Rank]
	h := r.historyOf(rep.Seq, rep.Rank)
	if h != nil {
		h.Iteration, h.Pause = rep.Iteration, rep.Pause
	}
	if !rep.OK {
		if h != nil {
			h.State, h.Error = "failed", rep.Error
		}
		r.stderr.logf("migration of rank %d to %s aborted, it continues on %s: %s", rep.Rank, rep.To, nodeOf(st.proc), rep.Error)
		if st.next != nil && st.next.seq == rep.Seq {
			if st.next.proc != nil {
				r.kill(st.next.proc)
			}
			st.next = nil
		}
		return
	}
	from := nodeOf(st.proc)
	if st.next != nil && st.next.seq == rep.Seq {
		r.commitMigration(rep.Rank)
	} else if h != nil && h.State == "done" {
		from = h.From // committed already, when the old process exited
	}
	if h != nil {
		h.State = "done"
		if rep.Error != "" {
			h.Error = rep.Error
		}
	}
	reason := ""
	if h != nil && h.Reason != "" {
		reason = " (" + h.Reason + ")"
	}
	r.stderr.logf("migrated rank %d from %s to %s at iteration %d in %v, %s of state%s",
		rep.Rank, from, rep.To, rep.Iteration, rep.Pause.Round(time.Millisecond), byteSize(rep.StateBytes), reason)
}

// commitMigration makes the successor the rank's process; the predecessor is on its way out.
func (r *runner) commitMigration(rank int) {
	st := &r.ranks[rank]
	next := st.next
	st.next = nil
	if next.proc == nil {
		return
	}
	delete(r.rc.side, next.proc)
	if st.running {
		r.rc.side[st.proc] = sideProc{rank: rank}
	}
	st.proc, st.running = next.proc, true
	st.incarnation++
	if h := r.historyOf(next.seq, rank); h != nil {
		h.State = "done"
	}
}

// onSideExit handles the exit of a process that is not its rank's current one: a
// predecessor that handed over, or a successor that never took over.
func (r *runner) onSideExit(ex rankExit) {
	sp := r.rc.side[ex.proc]
	delete(r.rc.side, ex.proc)
	st := &r.ranks[ex.rank]
	if st.next != nil && st.next.proc == ex.proc {
		// The successor died before the hand-over completed: the predecessor may be
		// waiting for it to connect. It reports the aborted migration.
		reason := fmt.Sprintf("its successor on %s (pid %d) ended before taking over: %s", nodeOf(ex.proc), ex.proc.PID(), exitText(ex))
		if data, err := job.Encode(job.SuccessorGone{Seq: st.next.seq, Rank: ex.rank, Reason: reason}); err == nil {
			_ = r.nc.Publish(job.SuccessorGoneSubject(r.cfg.JobID), data)
		}
		return
	}
	if sp.successor {
		if !sp.killed && !r.stopping {
			r.stderr.logf("successor of rank %d on %s (pid %d) ended: %s", ex.rank, nodeOf(ex.proc), ex.proc.PID(), exitText(ex))
		}
		return
	}
	if ex.err != nil || !ex.exit.Success() {
		r.stderr.logf("previous process of rank %d on %s (pid %d) ended after handing over: %s",
			ex.rank, nodeOf(ex.proc), ex.proc.PID(), exitText(ex))
	}
}

// kill stops a successor whose migration was aborted.
func (r *runner) kill(p Process) {
	if sp, ok := r.rc.side[p]; ok {
		sp.killed = true
		r.rc.side[p] = sp
	}
	_ = p.Signal(syscall.SIGKILL)
}

func exitText(ex rankExit) string {
	if ex.err != nil {
		return trimLaunch(ex.err).Error()
	}
	return ex.exit.String()
}

func (r *runner) onJobInfo(m *nats.Msg) {
	info := job.JobInfo{Job: r.cfg.JobID, Size: r.cfg.NP, Policy: envValue(r.cfg.Env, job.EnvPolicy), Migrations: r.rc.history}
	for i := range r.ranks {
		st := &r.ranks[i]
		jr := job.JobRank{Rank: i, Incarnation: st.incarnation}
		if st.proc != nil {
			jr.Node, jr.PID = st.proc.Host(), st.proc.PID()
		}
		info.Ranks = append(info.Ranks, jr)
	}
	respond(m, info)
}

// byteSize formats n bytes for people.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return strconv.FormatInt(n, 10) + " B"
}

// recordProfiles appends every profile the ranks publish to the file at path, one JSON
// object per line. stop flushes and closes it.
func (r *runner) recordProfiles(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("launch: --profile-out: %w", err)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(f)
	bad := 0
	sub, err := r.nc.Subscribe(job.ProfileSubject(r.cfg.JobID), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if !json.Valid(m.Data) || bytes.ContainsAny(m.Data, "\n") {
			if bad++; bad == 1 {
				r.stderr.logf("ignoring a malformed profile message")
			}
			return
		}
		w.Write(m.Data)
		w.WriteByte('\n')
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("launch: --profile-out: subscribe: %w", err)
	}
	return func() {
		// Profiles published just before the ranks ended are still in flight.
		r.nc.FlushTimeout(time.Second)
		sub.Drain()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if err := w.Flush(); err != nil {
			r.stderr.logf("--profile-out %s: %v", path, err)
		}
		if err := f.Close(); err != nil {
			r.stderr.logf("--profile-out %s: %v", path, err)
		}
	}, nil
}
