package supervisor

// Tests of automatic recovery and hang detection, after Satin's fault tolerance (seed 002,
// §4.4: "the work of the crashed processors is redone") and ULFM's promise that no call
// blocks forever after a failure. Each test drives a Machine with fake processes and a fake
// clock.

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// recoveringJob is a checkpointing job with recovery, on nodes (or locally for ""), after its
// rendezvous.
func recoveringJob(t *testing.T, cfg Config, nodes ...string) *fakeJob {
	cfg.Checkpoints, cfg.Recover = true, true
	j := newFakeJob(t, cfg, nodes...)
	j.launch()
	return j
}

func (j *fakeJob) committed(seq uint64, iter int64) {
	j.t.Helper()
	j.step(Committed{Data: enc(j.t, job.Committed{Seq: seq, Iteration: iter, Bytes: 1 << 20})})
}

func (j *fakeJob) beat(rank, pid int, iter int64) []Action {
	j.t.Helper()
	return j.step(Alive{Data: enc(j.t, job.Alive{Rank: rank, PID: pid, Iteration: iter})})
}

// beatAll has every initial process beat at iter.
func (j *fakeJob) beatAll(iter int64) {
	for r := range j.m.cfg.NP {
		j.beat(r, 1000+r, iter)
	}
}

// killRank kills rank r's initial process; its peers notice and exit with status 1.
func (j *fakeJob) killRank(r int) []Action {
	j.t.Helper()
	j.now = j.now.Add(time.Millisecond)
	acts := j.step(Exited{Proc: j.proc[r], Status: 137, Desc: "was killed by signal killed", At: j.now})
	for i := range j.m.cfg.NP {
		if i != r {
			acts = append(acts, j.exit(j.proc[i], 1)...)
		}
	}
	return acts
}

// restarted answers the StartRanks of a recovery, checks them against nodes, and completes
// the new rendezvous; it returns the new processes.
func (j *fakeJob) restarted(nodes ...string) []ProcID {
	j.t.Helper()
	var procs []ProcID
	for i := range j.m.cfg.NP {
		s := j.takeStart()
		if s.Rank != i || s.Restart != j.m.cfg.JobID || s.Node != nodes[i] || s.Incarnation < 1 || s.Size != len(nodes) {
			j.t.Fatalf("restart of rank %d: %+v, want a restart from job %s on %q into %d ranks", i, s, j.m.cfg.JobID, nodes[i], len(nodes))
		}
		j.pid[s.Proc] = 3000 + i
		procs = append(procs, s.Proc)
		j.step(Started{Proc: s.Proc, PID: 3000 + i, Node: nodes[i]})
	}
	for i := range j.m.cfg.NP {
		j.step(Hello{Reply: "again." + string(rune('0'+i)), Data: enc(j.t, job.Hello{Rank: i, Addr: "h:9", PID: 3000 + i, Host: "h"})})
	}
	if tables := j.sent["again.0"]; len(tables) != 1 || tables[0].(job.Table).Error != "" {
		j.t.Fatalf("rendezvous of the restarted ranks answered %+v", tables)
	}
	return procs
}

// "The work of the crashed processors is redone": a rank that dies makes every rank restart
// from the newest committed checkpoint, and the job goes on; the log names the failure, the
// checkpoint and the iterations lost.
func TestDeadRankRestartsEveryRankFromTheNewestCommittedCheckpoint(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "", "")
	j.committed(2, 20)
	j.committed(3, 30)
	j.committed(1, 10) // late and older: not the newest
	j.beatAll(37)
	j.killRank(1)
	j.advance(DefaultFailureWindow)
	if f := j.m.Failure(); f != nil {
		t.Fatalf("the job failed: %+v", f)
	}
	j.wantLog(`rank 1 \(pid 1001\) was killed by signal killed; recovering \(1 of 3\): every rank restarts from checkpoint 3 \(iteration 30\), 7 iterations lost`)
	procs := j.restarted("", "", "")
	e := j.m.Log().Entries
	if len(e) != 1 || e[0].Kind != reconf.Recover || e[0].State != reconf.Proposed {
		t.Fatalf("log %+v, want one proposed recovery", e)
	}
	j.now = j.now.Add(50 * time.Millisecond)
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Seq: 3, Iteration: 30})})
	j.wantLog(`recovered from the failure of rank 1: every rank restarted from checkpoint 3 \(iteration 30\), 7 iterations lost in .* \(detection .*, respawn .*, load 50ms\)`)
	if e := j.m.Log().Entries[0]; e.State != reconf.Committed || e.Iteration != 30 {
		t.Errorf("recovery entry %+v, want committed at iteration 30", e)
	}
	for _, p := range procs {
		j.exit(p, 0)
	}
	if !j.m.Done() || j.m.Failure() != nil {
		t.Errorf("done %v failure %+v after the restarted ranks ended", j.m.Done(), j.m.Failure())
	}
	if inc := j.m.Info().Ranks[1].Incarnation; inc != 1 {
		t.Errorf("incarnation %d after one recovery", inc)
	}
}

// "Work lost per failure is at most one checkpoint interval": a checkpoint that committed
// just before the failure, whose report had not arrived yet, is the one the ranks restore;
// the log counts the work lost from it and does not call the older one unusable.
func TestNewerCheckpointTheRanksFoundCountsTheWorkLostFromIt(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "", "")
	j.committed(1, 10)
	j.beatAll(24)
	j.killRank(1)
	j.advance(DefaultFailureWindow)
	j.wantLog(`.*recovering \(1 of 3\): every rank restarts from checkpoint 1 \(iteration 10\), 14 iterations lost`)
	j.restarted("", "", "")
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Seq: 2, Iteration: 20})})
	j.wantLog(`recovered from the failure of rank 1: every rank restarted from checkpoint 2 \(iteration 20\), 4 iterations lost in .* \(detection .*, respawn .*, load .*\)`)
}

// An older checkpoint restored because the newest was damaged adds the iterations between
// them to the work lost, and the log says why.
func TestOlderCheckpointRestoredSaysTheNewestWasUnusable(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "", "")
	j.committed(1, 10)
	j.committed(2, 20)
	j.beatAll(24)
	j.killRank(1)
	j.advance(DefaultFailureWindow)
	j.restarted("", "", "")
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Seq: 1, Iteration: 10})})
	j.wantLog(`recovered from the failure of rank 1: every rank restarted from checkpoint 1 \(iteration 10\), 14 iterations lost in .*; checkpoint 2 was unusable`)
}

// The processes of the failed run that still run are killed, and the ranks restart only once
// all are gone (a node's slot is free again, no old process talks to the new ones).
func TestSurvivorsAreKilledBeforeTheRestart(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 3, "n2": 1}}, "n1", "n2", "n1")
	j.committed(1, 10)
	acts := j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, []ProcID{j.proc[0], j.proc[2]}) {
		t.Fatalf("SIGKILL to %v, want the survivors %v", got, []ProcID{j.proc[0], j.proc[2]})
	}
	if len(only[StartRank](acts)) != 0 {
		t.Fatal("restarted while old processes run")
	}
	j.exit(j.proc[0], 137)
	if len(j.pend) != 0 {
		t.Fatal("restarted while an old process runs")
	}
	j.exit(j.proc[2], 137)
	if j.m.Failure() != nil {
		t.Fatalf("failure %+v", j.m.Failure())
	}
	// The rank lost with n2 restarts on n1, which has room: a node that lost a process with
	// it is not used, even before its NodeGone arrives.
	j.restarted("n1", "n1", "n1")
}

// Ranks of a lost node restart on the surviving nodes that have room within the job's slots;
// the others stay where they were.
func TestRanksOfALostNodeRestartOnSurvivorsWithRoom(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1, "n3": 2}}, "n1", "n2", "n3")
	j.committed(1, 10)
	j.step(NodeGone{Node: "n2", Reason: "node n2 stopped responding"})
	j.killRank(1)
	j.advance(DefaultFailureWindow)
	j.restarted("n1", "n3", "n3")
	j.wantLog(`rank 1 .*recovering \(1 of 3\).*`)
}

// Dead end: no surviving node has room and the job cannot shrink: it ends at once, naming
// the ranks and the missing slots (a malleable job shrinks here instead: join_paper_test.go).
func TestNoSurvivingNodeWithRoomEndsTheJobNamingTheMissingSlots(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.committed(1, 10)
	j.step(NodeGone{Node: "n2", Reason: "node n2 stopped responding"})
	j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	f := j.wantFailure(RankFailed, 1, StatusFailed)
	if !strings.HasSuffix(f.Reason, "; cannot recover: no surviving node has room for rank 1 (1 slot(s) missing; lost: n2; surviving: n1); the job cannot shrink: its ranks registered no distributed data (pcm.NewBlock)") {
		t.Errorf("reason %q", f.Reason)
	}
	if len(j.pend) != 0 {
		t.Error("a rank was restarted")
	}
}

// Dead end: a failure before the first committed checkpoint ends the job, saying so.
func TestFailureBeforeTheFirstCheckpointEndsTheJobSayingSo(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "")
	j.killRank(0)
	j.advance(DefaultFailureWindow)
	f := j.wantFailure(RankFailed, 0, 137)
	if !strings.HasSuffix(f.Reason, "; cannot recover: no checkpoint of job j is committed yet") {
		t.Errorf("reason %q", f.Reason)
	}
}

// Dead end: recoveries are bounded; the failure after the last one ends the job and says
// how many were used.
func TestRecoveriesAreBoundedByMaxRecoveries(t *testing.T) {
	j := recoveringJob(t, Config{MaxRecoveries: 1}, "", "")
	j.committed(1, 10)
	j.killRank(1)
	j.advance(DefaultFailureWindow)
	procs := j.restarted("", "")
	j.now = j.now.Add(time.Millisecond)
	j.step(Exited{Proc: procs[1], Status: 1, Desc: "exited with status 1", At: j.now})
	j.exit(procs[0], 1)
	j.advance(DefaultFailureWindow)
	f := j.wantFailure(RankFailed, 1, 1)
	if !strings.HasSuffix(f.Reason, "; cannot recover: 1 recoveries used (--max-recoveries 1)") {
		t.Errorf("reason %q", f.Reason)
	}
	if !j.m.Done() {
		t.Error("not done")
	}
}

// Failures that are no crash are not recovered: an mpi.Abort, or a job without recovery
// (--no-recover), ends as before.
func TestAbortsAndJobsWithoutRecoveryEndAsBefore(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "")
	j.committed(1, 10)
	j.step(Abort{Data: enc(t, job.Abort{Rank: 1, Code: 5})})
	j.wantFailure(RankAborted, 1, 5)

	off := newFakeJob(t, Config{Checkpoints: true}, "", "")
	off.launch()
	off.committed(1, 10)
	off.killRank(1)
	off.advance(DefaultFailureWindow)
	if f := off.wantFailure(RankFailed, 1, 137); strings.Contains(f.Reason, "recover") {
		t.Errorf("reason %q", f.Reason)
	}
}

// "A rank that stops is declared failed after the timeout": the Machine names when (its
// deadline), kills the silent process and recovers.
func TestSilentRankIsDeclaredFailedAfterTheHangTimeout(t *testing.T) {
	j := recoveringJob(t, Config{HangTimeout: 10 * time.Second}, "", "", "")
	j.committed(1, 10)
	j.beatAll(12)
	start := j.now
	if at, ok := j.m.NextDeadline(); !ok || !at.Equal(start.Add(10*time.Second)) {
		t.Fatalf("deadline %v %v, want %v", at, ok, start.Add(10*time.Second))
	}
	// Ranks 0 and 2 keep beating (they may be blocked waiting for rank 1: their beats run
	// on their own); rank 1 is silent.
	for range 9 {
		j.now = j.now.Add(time.Second)
		j.beat(0, 1000, 12)
		j.beat(2, 1002, 12)
	}
	if acts := j.advance(999 * time.Millisecond); len(signalled(acts, syscall.SIGKILL)) != 0 || j.m.Failure() != nil {
		t.Fatal("declared hung before the timeout")
	}
	acts := j.advance(time.Millisecond)
	if got := signalled(acts, syscall.SIGKILL); !slices.Contains(got, j.proc[1]) {
		t.Fatalf("SIGKILL to %v, want the silent rank 1 (%d)", got, j.proc[1])
	}
	j.wantLog(`rank 1 \(pid 1001\) sent no sign of life for 10s \(stopped or frozen\): declared failed; recovering \(1 of 3\): every rank restarts from checkpoint 1 \(iteration 10\), 2 iterations lost`)
	for i := range 3 {
		j.exit(j.proc[i], 137)
	}
	j.restarted("", "", "")
}

// A rank busy in a long computation still beats (its beats come from their own goroutine):
// it is never declared hung, however long it computes.
func TestBusyRankThatBeatsIsNotHung(t *testing.T) {
	j := recoveringJob(t, Config{HangTimeout: 3 * time.Second}, "", "")
	for range 60 {
		j.now = j.now.Add(time.Second)
		j.beatAll(5)
		j.step(Tick{})
	}
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
}

// mpirun itself stopped (SIGSTOP, a suspended machine) hears nobody meanwhile: that silence
// is its own, and no rank is declared hung for it; once mpirun runs again every rank has a
// whole timeout to be heard, and one that stays silent is declared hung after it.
func TestMpirunsOwnStallIsNoHang(t *testing.T) {
	j := recoveringJob(t, Config{HangTimeout: 10 * time.Second}, "", "")
	j.committed(1, 10)
	j.beatAll(12)
	j.now = j.now.Add(25 * time.Second)
	j.step(Stalled{For: 25 * time.Second}) // the loop sends it before anything else
	if acts := j.step(Tick{}); len(signalled(acts, syscall.SIGKILL)) != 0 || j.m.Failure() != nil {
		t.Fatal("a rank was declared hung for mpirun's own stall")
	}
	j.wantLog(`mpirun itself did not run for 25s \(stopped, suspended or starved of CPU\): no rank is judged by its silence meanwhile, each has 10s to be heard again`)
	j.beat(0, 1000, 13)
	acts := j.advance(10 * time.Second)
	if got := signalled(acts, syscall.SIGKILL); !slices.Contains(got, j.proc[1]) {
		t.Fatalf("SIGKILL to %v, want rank 1, silent for a whole timeout after the stall", got)
	}
}

// A NATS outage silences every rank at once: while mpirun's connection is down nobody is
// declared hung, and once it is back every rank has a whole timeout to be heard again.
func TestSilenceDuringAControlPlaneOutageIsNoHang(t *testing.T) {
	j := recoveringJob(t, Config{HangTimeout: 3 * time.Second}, "", "")
	j.committed(1, 10)
	j.beatAll(10)
	j.step(ControlPlaneDown{})
	if _, ok := j.m.NextDeadline(); ok {
		t.Error("a hang deadline while the control plane is down")
	}
	j.advance(20 * time.Second)
	if f := j.m.Failure(); f != nil || len(j.pend) != 0 {
		t.Fatalf("declared failed during the outage: %+v", f)
	}
	j.step(ControlPlaneUp{})
	if at, ok := j.m.NextDeadline(); !ok || !at.Equal(j.now.Add(3*time.Second)) {
		t.Errorf("deadline %v %v after the outage, want a whole timeout", at, ok)
	}
	j.advance(time.Second)
	j.beat(0, 1000, 11)
	j.advance(2 * time.Second)
	j.wantLog(`rank 1 \(pid 1001\) sent no sign of life for 3s \(stopped or frozen\): declared failed; recovering.*`)
}

// A process that finalized says so: the time it takes to exit is no hang. Beats of unknown
// processes (a killed run's, a malformed one) are ignored.
func TestFinalizedRankIsNotHung(t *testing.T) {
	j := recoveringJob(t, Config{HangTimeout: time.Second}, "", "")
	j.beatAll(1)
	j.step(Alive{Data: enc(t, job.Alive{Rank: 1, PID: 1001, Iteration: 2, Done: true})})
	j.step(Alive{Data: enc(t, job.Alive{Rank: 0, PID: 4242, Iteration: 2})})
	j.step(Alive{Data: []byte{0xc1}})
	for range 5 {
		j.now = j.now.Add(500 * time.Millisecond)
		j.beat(0, 1000, 3)
		j.step(Tick{})
	}
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
}

// Without a recovery, a hung rank ends the job with a clear message naming it.
func TestHungRankWithoutRecoveryEndsTheJobNamingIt(t *testing.T) {
	j := newFakeJob(t, Config{HangTimeout: time.Second}, "", "")
	j.launch()
	j.beatAll(0)
	j.now = j.now.Add(500 * time.Millisecond)
	j.beat(1, 1001, 0)
	acts := j.advance(500 * time.Millisecond)
	f := j.wantFailure(RankHung, 0, StatusFailed)
	if f.Reason != "rank 0 (pid 1000) sent no sign of life for 1s (stopped or frozen): declared failed" {
		t.Errorf("reason %q", f.Reason)
	}
	if !slices.Contains(signalled(acts, syscall.SIGKILL), j.proc[0]) || !slices.Contains(signalled(acts, syscall.SIGTERM), j.proc[1]) {
		t.Errorf("actions %+v, want the hung rank killed and the other stopped", acts)
	}
}

// A process whose start was asked for before the failure (here a migration's successor)
// belongs to the failed run: it is killed when it starts, and the ranks restart only after.
func TestProcessStartingDuringTheFailureIsKilledBeforeTheRestart(t *testing.T) {
	j := recoveringJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 2, "n2": 2, "n3": 1}}, "n1", "n2", "n1")
	j.committed(1, 10)
	j.migrate("n3", nil, 1)
	j.askSuccessor(1, 1, 12)
	succ := j.takeStart()
	j.killRank(0)
	j.advance(DefaultFailureWindow)
	if len(j.pend) != 0 {
		t.Fatal("restarted while a successor is being started")
	}
	acts := j.step(Started{Proc: succ.Proc, PID: 2001, Node: "n3"})
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, []ProcID{succ.Proc}) {
		t.Fatalf("SIGKILL to %v, want the late successor", got)
	}
	if len(j.pend) != 0 {
		t.Fatal("restarted while the late successor runs")
	}
	j.exit(succ.Proc, 137)
	j.restarted("n1", "n2", "n1")
	if h := j.m.Info().Migrations[0]; h.State != reconf.Aborted {
		t.Errorf("migration %+v, want aborted by the recovery", h)
	}
}

// A requested checkpoint is committed in the typed log once rank 0 reports a committed
// checkpoint taken after the ranks acted on it; a later request stays proposed until then.
func TestRequestedCheckpointCommitsWhenACheckpointCoveringItCommits(t *testing.T) {
	j := recoveringJob(t, Config{}, "", "", "")
	for range 2 {
		if _, to := j.control(job.ControlRequest{Kind: job.ControlCheckpoint}); !j.lastReply(to).OK {
			t.Fatalf("checkpoint refused: %+v", j.lastReply(to))
		}
	}
	j.step(Committed{Data: enc(t, job.Committed{Seq: 4, Iteration: 40, Bytes: 3 << 20, Applied: 1})})
	e := j.m.Log().Entries
	if e[0].State != reconf.Committed || e[0].Iteration != 40 || e[0].Bytes != 3<<20 {
		t.Errorf("first request %+v, want committed at iteration 40", e[0])
	}
	if e[1].State != reconf.Proposed {
		t.Errorf("second request %+v, want still proposed", e[1])
	}
}
