package supervisor

// Tests of the reconfiguration scenario of the MPI/IOS paper (seed 004, "Reconfiguration
// scenario"), from the supervisor's view, one statement at a time, and of each way a
// migration fails before its commit. Each test drives a Machine with fake processes and a
// fake clock: no process, socket, NATS or sleep.

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// migratingJob is three ranks on n1, n2, n1 that took part in the rendezvous.
func migratingJob(t *testing.T) *fakeJob {
	j := newFakeJob(t, Config{Migrations: true, Checkpoints: true}, "n1", "n2", "n1")
	j.launch()
	return j
}

// "[The] MPI process gets notified [of the] migration event": a request the target can
// take is accepted, numbered and published to every rank as a Proposed entry of the log.
func TestMigrationRequestIsPublishedToEveryRankAsAProposedEntry(t *testing.T) {
	j := migratingJob(t)
	rep := j.migrate("n3", nil, 1)
	if !rep.OK || rep.Error != "" {
		t.Fatalf("reply %+v, want the request accepted", rep)
	}
	logs := j.published()
	if len(logs) != 1 || len(logs[0].Entries) != 1 {
		t.Fatalf("published logs %+v, want one log of one entry", logs)
	}
	e := logs[0].Entries[0]
	if e.Seq != 1 || e.Kind != reconf.Migrate || e.State != reconf.Proposed || !slices.Equal(e.Ranks, []int{1}) ||
		e.To != "n3" || e.From != "n2" || e.Reason != "test" || !e.At.Equal(j.now) {
		t.Errorf("entry %+v", e)
	}
	if err := logs[0].Validate(); err != nil {
		t.Error(err)
	}
	h := j.m.Info().Migrations
	if len(h) != 1 || h[0].State != reconf.Proposed || h[0].From != "n2" || h[0].To != "n3" || h[0].Rank != 1 {
		t.Errorf("history %+v", h)
	}
	j.wantLog(`migration of rank 1 to n3 requested \(request 1: test\)`)
}

// "Every rank enters reconfiguration at the same boundary": the ranks act on the entries
// they all hold, so every rank must get the same log, in one order, whether it listens to
// the publications or asks late.
func TestEveryRankGetsTheSameLogInOneOrder(t *testing.T) {
	j := migratingJob(t)
	_, ck := j.control(job.ControlRequest{Kind: job.ControlCheckpoint, Reason: "before"})
	if rep := j.lastReply(ck); !rep.OK {
		t.Fatalf("checkpoint refused: %+v", rep)
	}
	j.migrate("n3", nil, 0, 2)
	logs := j.published()
	if len(logs) != 2 {
		t.Fatalf("%d publications, want one per accepted request", len(logs))
	}
	last := logs[1]
	if len(last.Entries) != 2 || last.Entries[0].Kind != reconf.Checkpoint || last.Entries[1].Kind != reconf.Migrate ||
		last.Entries[1].Seq != 2 || !slices.Equal(last.Entries[1].Ranks, []int{0, 2}) {
		t.Fatalf("log %+v", last.Entries)
	}
	if !slicesEqualEntries(logs[0].Entries, last.Entries[:1]) {
		t.Errorf("the second publication rewrote the first entry: %+v vs %+v", logs[0].Entries, last.Entries)
	}
	j.step(LogRequest{Reply: "late"})
	got := j.sent["late"]
	if len(got) != 1 || !slicesEqualEntries(got[0].(reconf.Log).Entries, last.Entries) {
		t.Errorf("late rank got %+v, want %+v", got, last.Entries)
	}
}

func slicesEqualEntries(a, b []reconf.Reconfiguration) bool {
	return slices.EqualFunc(a, b, func(x, y reconf.Reconfiguration) bool {
		return x.Seq == y.Seq && x.Kind == y.Kind && x.State == y.State && slices.Equal(x.Ranks, y.Ranks) && x.To == y.To
	})
}

// "[The] migrating process ... spawns [an] image [on the] remote processor": at the
// boundary the rank asks for its successor, which is started on the target with the
// hand-over address and the next incarnation; once it runs, the migration is Prepared.
func TestSuccessorIsSpawnedOnTheTargetAtTheBoundary(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	acts := j.askSuccessor(1, 1, 40)
	starts := only[StartRank](acts)
	if len(starts) != 1 {
		t.Fatalf("actions %+v, want one StartRank", acts)
	}
	s := j.takeStart()
	if s.Rank != 1 || s.Node != "n3" || s.Incarnation != 1 || s.Handover != "10.0.0.1:7000" {
		t.Errorf("start %+v", s)
	}
	if len(j.sent["succ.1.1"]) != 0 {
		t.Error("answered before the successor runs")
	}
	j.step(Started{Proc: s.Proc, PID: 77, Node: "n3"})
	if rep := j.successorReply(1, 1); rep.Error != "" || rep.Node != "n3" || rep.PID != 77 {
		t.Errorf("successor reply %+v", rep)
	}
	info := j.m.Info()
	if h := info.Migrations[0]; h.State != reconf.Prepared || h.Iteration != 40 {
		t.Errorf("history %+v, want prepared at iteration 40", h)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Prepared || e.Iteration != 40 {
		t.Errorf("entry %+v, want prepared at iteration 40", e)
	}
	if r := info.Ranks[1]; r.Node != "n2" || r.PID != 1001 {
		t.Errorf("rank 1 is %+v before the commit, want still on n2", r)
	}
}

// successorOf runs the scenario up to a running successor of rank on to; it returns the
// successor's process.
func (j *fakeJob) successorOf(seq uint64, rank int, to string) ProcID {
	j.t.Helper()
	j.askSuccessor(seq, rank, 40)
	s := j.takeStart()
	j.pid[s.Proc] = 2000 + rank
	j.step(Started{Proc: s.Proc, PID: 2000 + rank, Node: to})
	if rep := j.successorReply(seq, rank); rep.Error != "" {
		j.t.Fatalf("successor refused: %s", rep.Error)
	}
	return s.Proc
}

// "[The] PCM library takes care of rearranging [the] COMM_WORLD communicator, removing
// [the] old process [and] including [the] new [one]": when the rank reports the hand-over,
// the successor becomes the rank's process and the migration is Committed.
func TestNewProcessBecomesTheRankWhenTheMigrationCommits(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	succ := j.successorOf(1, 1, "n3")
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", OK: true, Iteration: 40, StateBytes: 3 << 20, Pause: 25 * time.Millisecond})
	info := j.m.Info()
	if r := info.Ranks[1]; r.Node != "n3" || r.PID != 2001 || r.Incarnation != 1 {
		t.Errorf("rank 1 is %+v, want pid 2001 on n3, incarnation 1", r)
	}
	if h := info.Migrations[0]; h.State != reconf.Committed || h.Pause != 25*time.Millisecond || h.Error != "" {
		t.Errorf("history %+v", h)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Committed || e.Bytes != 3<<20 {
		t.Errorf("entry %+v", e)
	}
	j.wantLog(`migrated rank 1 from n2 to n3 at iteration 40 in 25ms, 3.0 MiB of state \(test\)`)
	if got := j.m.Hosts(); !slices.Equal(got, []string{"n1", "n3", "n1"}) {
		t.Errorf("hosts %v", got)
	}
	// The old process leaves; the new one is signalled with the others when the job stops.
	j.exit(j.proc[1], 0)
	acts := j.step(Signal{Sig: syscall.SIGTERM})
	if got := signalled(acts, syscall.SIGTERM); !slices.Equal(got, []ProcID{j.proc[0], succ, j.proc[2]}) {
		t.Errorf("SIGTERM to %v, want the current processes", got)
	}
}

// "...removing [the] old process": the old process's exit after the hand-over is not a
// failure, whether it comes before the rank's report or after it.
func TestOldProcessLeavingIsNotAFailure(t *testing.T) {
	for _, exitFirst := range []bool{true, false} {
		j := migratingJob(t)
		j.migrate("n3", nil, 1)
		succ := j.successorOf(1, 1, "n3")
		rep := job.MigrateReport{Seq: 1, Rank: 1, To: "n3", OK: true, Iteration: 40}
		if exitFirst {
			j.exit(j.proc[1], 0)
			if h := j.m.Info().Migrations[0]; h.State != reconf.Committed {
				t.Errorf("exit first: history %+v, want committed by the clean exit", h)
			}
			j.report(rep)
		} else {
			j.report(rep)
			j.exit(j.proc[1], 0)
		}
		j.wantLog(`migrated rank 1 from n2 to n3 at iteration 40 in 0s, 0 B of state \(test\)`)
		if f := j.m.Failure(); f != nil {
			t.Fatalf("exit first %v: failure %+v", exitFirst, f)
		}
		for _, p := range []ProcID{j.proc[0], succ, j.proc[2]} {
			j.exit(p, 0)
		}
		if !j.m.Done() || j.m.Failure() != nil {
			t.Errorf("exit first %v: done %v failure %+v after every rank ended", exitFirst, j.m.Done(), j.m.Failure())
		}
		if n := j.m.Info().Ranks[1].Incarnation; n != 1 {
			t.Errorf("incarnation %d", n)
		}
	}
}

// An old process that fails after handing over is reported, and the job goes on.
func TestOldProcessFailingAfterTheHandOverIsReportedNotFatal(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	j.successorOf(1, 1, "n3")
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", OK: true})
	j.exit(j.proc[1], 9)
	j.wantLog(`previous process of rank 1 on n2 \(pid 1001\) ended after handing over: exited with status 9`)
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
}

// The target is unknown or gone: the request is refused with the node's reason, nothing is
// published, and the rank stays.
func TestMigrationToAnUnknownOrGoneNodeIsRefused(t *testing.T) {
	j := migratingJob(t)
	rep := j.migrate("nowhere", errors.New("node nowhere: no pcmd serves it on NATS server nats://x (nodes answering: n1, n2)"), 1)
	if rep.OK || rep.Error != "mpirun: cannot migrate to node nowhere: no pcmd serves it on NATS server nats://x (nodes answering: n1, n2)" {
		t.Errorf("reply %+v", rep)
	}
	if len(j.published()) != 0 || len(j.m.Info().Migrations) != 0 {
		t.Errorf("a refused request was recorded")
	}
	// The rank can still move elsewhere.
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Errorf("a later request was refused: %+v", rep)
	}
}

// Requests that cannot be carried out are refused at once, with the reason.
func TestImpossibleMigrationsAreRefusedAtOnce(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 0)
	for _, c := range []struct {
		ranks []int
		to    string
		want  string
	}{
		{[]int{1}, "n2", "mpirun: rank 1 already runs on n2"},
		{[]int{0}, "n2", "mpirun: rank 0 is already moving to n3 (request 1)"},
		{[]int{5}, "n3", "mpirun: rank 5 is outside job j (size 3)"},
		{[]int{1, 1}, "n3", "mpirun: rank listed twice"},
	} {
		acts, subj := j.control(job.ControlRequest{Kind: job.ControlMigrate, Ranks: c.ranks, To: c.to})
		if len(only[CheckNode](acts)) != 0 {
			t.Errorf("%v to %s: the node was asked", c.ranks, c.to)
		}
		if rep := j.lastReply(subj); rep.OK || rep.Error != c.want {
			t.Errorf("%v to %s: reply %+v, want %q", c.ranks, c.to, rep, c.want)
		}
	}
	local := newFakeJob(t, Config{}, "", "")
	local.launch()
	if rep := local.migrate("n3", nil, 1); rep.OK || rep.Error != "mpirun: job j runs its ranks locally; migrating ranks needs pcmd nodes (start the job with --hosts or --hostfile)" {
		t.Errorf("local job: reply %+v", rep)
	}
}

// The target refuses to start the successor (or is gone by the boundary): the rank is told
// why, reports the aborted migration and goes on where it was; it may move again later.
func TestTargetRefusingTheSuccessorAbortsTheMigration(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	j.askSuccessor(1, 1, 40)
	s := j.takeStart()
	j.step(Started{Proc: s.Proc, Err: errors.New("node n3: program not allowed by --allow")})
	rep := j.successorReply(1, 1)
	if rep.Error != "mpirun: cannot start the successor on n3: node n3: program not allowed by --allow" {
		t.Errorf("successor reply %+v", rep)
	}
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", Error: "start successor on n3: " + rep.Error[len("mpirun: "):], Iteration: 40})
	j.wantLog(`migration of rank 1 to n3 aborted, it continues on n2: start successor on n3: cannot start the successor on n3: .*not allowed by --allow`)
	info := j.m.Info()
	if h := info.Migrations[0]; h.State != reconf.Aborted || h.Error == "" {
		t.Errorf("history %+v, want aborted with a reason", h)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Aborted || e.Error == "" {
		t.Errorf("entry %+v, want aborted with a reason", e)
	}
	if r := info.Ranks[1]; r.Node != "n2" || r.PID != 1001 || r.Incarnation != 0 {
		t.Errorf("rank 1 is %+v, want unchanged", r)
	}
	if j.m.Failure() != nil {
		t.Fatalf("failure %+v", j.m.Failure())
	}
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Errorf("the rank cannot move again: %+v", rep)
	}
}

// The successor dies before the commit: the waiting rank is told at once (it may be
// blocked waiting for the successor to connect), the migration is aborted, and the job is
// not failed.
func TestSuccessorDyingBeforeTheCommitAbortsTheMigration(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	succ := j.successorOf(1, 1, "n3")
	j.exit(succ, 3)
	gone := j.sent[job.SuccessorGoneSubject("j")]
	if len(gone) != 1 {
		t.Fatalf("successor-gone messages %+v, want one", gone)
	}
	if g := gone[0].(job.SuccessorGone); g.Seq != 1 || g.Rank != 1 ||
		g.Reason != "its successor on n3 (pid 2001) ended before taking over: exited with status 3" {
		t.Errorf("successor-gone %+v", g)
	}
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", Error: "successor (pid 2001 on n3) did not connect: " + gone[0].(job.SuccessorGone).Reason})
	j.wantLog(`migration of rank 1 to n3 aborted, it continues on n2: .*ended before taking over: exited with status 3`)
	if h := j.m.Info().Migrations[0]; h.State != reconf.Aborted {
		t.Errorf("history %+v", h)
	}
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
	for i := range 3 {
		j.exit(j.proc[i], 0)
	}
	if !j.m.Done() || j.m.Failure() != nil {
		t.Errorf("done %v failure %+v", j.m.Done(), j.m.Failure())
	}
}

// The successor dies (or the transfer breaks) in the middle of the hand-over: the rank
// reports the abort, and a successor still running is killed; its end is not reported as
// a failure.
func TestTransferFailingMidwayKillsTheSuccessor(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	succ := j.successorOf(1, 1, "n3")
	acts := j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", Error: "hand state to the successor on n3: broken pipe", Iteration: 40})
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, []ProcID{succ}) {
		t.Errorf("SIGKILL to %v, want the successor %d", got, succ)
	}
	j.exit(succ, 137)
	j.noLog(`successor of rank 1`)
	if len(j.sent[job.SuccessorGoneSubject("j")]) != 0 {
		t.Error("successor-gone sent after the rank gave up")
	}
	if h := j.m.Info().Migrations[0]; h.State != reconf.Aborted || h.Error != "hand state to the successor on n3: broken pipe" {
		t.Errorf("history %+v", h)
	}
}

// A successor that starts only after its rank gave up is killed and the late request is
// answered with the cancellation.
func TestSuccessorStartingAfterTheRankGaveUpIsKilled(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	j.askSuccessor(1, 1, 40)
	s := j.takeStart()
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", Error: "start successor on n3: no answer from the launcher"})
	acts := j.step(Started{Proc: s.Proc, PID: 2001, Node: "n3"})
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, []ProcID{s.Proc}) {
		t.Errorf("SIGKILL to %v, want the late successor", got)
	}
	if rep := j.successorReply(1, 1); rep.Error != "mpirun: the migration was cancelled" {
		t.Errorf("reply %+v", rep)
	}
	if j.m.Done() {
		t.Error("done while the killed successor runs")
	}
}

// A checkpoint due at the migration's boundary: both are entries of the one log, in the
// order they were accepted, so every rank takes the checkpoint and the migration at the same
// boundary in the same order; the migration goes on as usual.
func TestCheckpointDueAtTheMigrationsBoundaryIsOrderedInTheLog(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	_, ck := j.control(job.ControlRequest{Kind: job.ControlCheckpoint})
	if rep := j.lastReply(ck); !rep.OK || rep.Message != "checkpoint of job j requested (request 2): it is taken at the next agreement point" {
		t.Fatalf("checkpoint reply %+v", rep)
	}
	l := j.published()[1]
	if l.Entries[0].Kind != reconf.Migrate || l.Entries[1].Kind != reconf.Checkpoint || l.Entries[1].Seq != 2 {
		t.Fatalf("log %+v", l.Entries)
	}
	j.successorOf(1, 1, "n3")
	j.report(job.MigrateReport{Seq: 1, Rank: 1, To: "n3", OK: true, Iteration: 50})
	info := j.m.Info()
	if info.Reconfigurations[0].State != reconf.Committed || info.Reconfigurations[1].State != reconf.Proposed {
		t.Errorf("entries %+v", info.Reconfigurations)
	}
	// A job that does not checkpoint refuses checkpoints.
	nock := newFakeJob(t, Config{Migrations: true}, "n1")
	nock.launch()
	_, subj := nock.control(job.ControlRequest{Kind: job.ControlCheckpoint})
	if rep := nock.lastReply(subj); rep.OK || rep.Error != "mpirun: job j does not checkpoint: start it with --ckpt-every K (0: on request only)" {
		t.Errorf("reply %+v", rep)
	}
}

// A successor is started only for the pending migration it was asked for, once.
func TestSuccessorRequestsWithoutAPendingMigrationAreRefused(t *testing.T) {
	j := migratingJob(t)
	j.askSuccessor(1, 1, 10)
	if rep := j.successorReply(1, 1); rep.Error != "mpirun: no pending migration of rank 1 for request 1" {
		t.Errorf("reply %+v", rep)
	}
	j.migrate("n3", nil, 1)
	j.askSuccessor(1, 1, 10)
	acts := j.step(SuccessorRequest{Reply: "again", Data: enc(t, job.MigrateRequest{Seq: 1, Rank: 1, Handover: "a:1"})})
	if len(only[StartRank](acts)) != 0 {
		t.Error("a second successor was started for one migration")
	}
	if rep := j.sent["again"]; len(rep) != 1 || rep[0].(job.MigrateReply).Error == "" {
		t.Errorf("second request answered %+v", rep)
	}
	j.step(SuccessorRequest{Reply: "bad", Data: []byte{0xc1}})
	if rep := j.sent["bad"]; len(rep) != 1 || rep[0].(job.MigrateReply).Error != "mpirun: malformed migrate request" {
		t.Errorf("malformed request answered %+v", rep)
	}
}

// Control requests before the rendezvous completes, or while the job stops, are refused.
func TestControlRequestsNeedARunningJob(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true, Checkpoints: true}, "n1", "n2")
	j.step(Launch{})
	_, subj := j.control(job.ControlRequest{Kind: job.ControlCheckpoint})
	if rep := j.lastReply(subj); rep.Error != "mpirun: job j is not running (starting or stopping)" {
		t.Errorf("reply %+v", rep)
	}
	_, subj = j.control(job.ControlRequest{Kind: "explode"})
	if rep := j.lastReply(subj); rep.OK || rep.Error == "" {
		t.Errorf("invalid request: reply %+v", rep)
	}
}

// The job's info, as pcmd status shows it, survives the wire with its typed states.
func TestJobInfoCarriesTypedStates(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	j.step(InfoRequest{Reply: "info"})
	info := j.sent["info"][0].(job.JobInfo)
	var back job.JobInfo
	if err := job.Decode(enc(t, info), &back); err != nil {
		t.Fatal(err)
	}
	if back.Migrations[0].State != reconf.Proposed || back.Migrations[0].State.String() != "proposed" ||
		len(back.Reconfigurations) != 1 || back.Reconfigurations[0].State != reconf.Proposed || back.Size != 3 || len(back.Ranks) != 3 {
		t.Errorf("decoded info %+v", back)
	}
}

// The target node goes away: a request for it is refused at once, and a migration accepted
// before is aborted when the rank reaches its boundary, without trying to start a successor.
func TestTargetGoneAbortsTheMigrationAtTheBoundary(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 1)
	j.step(NodeGone{Node: "n3", Reason: "node n3 stopped responding (no heartbeat for 3s)"})
	acts := j.askSuccessor(1, 1, 40)
	if len(only[StartRank](acts)) != 0 {
		t.Error("a successor was started on a gone node")
	}
	if rep := j.successorReply(1, 1); rep.Error != "mpirun: cannot start the successor on n3: node n3 stopped responding (no heartbeat for 3s)" {
		t.Errorf("reply %+v", rep)
	}
	if h := j.m.Info().Migrations[0]; h.State != reconf.Aborted || h.Error == "" {
		t.Errorf("history %+v", h)
	}
	acts, subj := j.control(job.ControlRequest{Kind: job.ControlMigrate, Rank: 0, To: "n3"})
	if len(only[CheckNode](acts)) != 0 {
		t.Error("a gone node was asked")
	}
	if rep := j.lastReply(subj); rep.Error != "mpirun: cannot migrate to node n3 stopped responding (no heartbeat for 3s)" {
		t.Errorf("reply %+v", rep)
	}
}

// Ranks moved by one request move or stay each on its own (the commit point gathers each
// rank's outcome): the entry is Committed if any moved, and says which stayed.
func TestRanksOfOneRequestCommitOrAbortEachOnItsOwn(t *testing.T) {
	j := migratingJob(t)
	j.migrate("n3", nil, 0, 2)
	j.successorOf(1, 0, "n3")
	j.askSuccessor(1, 2, 40)
	s := j.takeStart()
	j.step(Started{Proc: s.Proc, Err: errors.New("node n3 has no free slot")})
	j.report(job.MigrateReport{Seq: 1, Rank: 2, To: "n3", Error: "start successor on n3: no free slot"})
	if e := j.m.Info().Reconfigurations[0]; e.State != reconf.Prepared {
		t.Errorf("entry %+v, want prepared while rank 0 hands over", e)
	}
	j.report(job.MigrateReport{Seq: 1, Rank: 0, To: "n3", OK: true, StateBytes: 1 << 10})
	info := j.m.Info()
	if e := info.Reconfigurations[0]; e.State != reconf.Committed || e.Bytes != 1<<10 ||
		e.Error != "rank 2 stayed: cannot start the successor on n3: node n3 has no free slot" {
		t.Errorf("entry %+v", e)
	}
	if info.Migrations[0].State != reconf.Committed || info.Migrations[1].State != reconf.Aborted {
		t.Errorf("history %+v", info.Migrations)
	}
	if info.Ranks[0].Node != "n3" || info.Ranks[2].Node != "n1" {
		t.Errorf("ranks %+v", info.Ranks)
	}
}
