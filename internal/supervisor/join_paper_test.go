package supervisor

// Tests of nodes joining a running job and of recovery shrinking a malleable job, after
// Satin (seed 002, §4.4: "processors may join or leave the running computation at any time";
// the work of crashed processors is redone) and the MPI/IOS malleability of Desell's thesis
// (§2.1.2: a job splits onto new nodes and merges off nodes it lost). Each test drives a
// Machine with fake processes and a fake clock: no sockets, no NATS, no sleeps.

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// malleable is rank 0 announcing that the ranks registered distributed data.
func (j *fakeJob) malleable() {
	j.t.Helper()
	j.step(Malleable{Data: enc(j.t, job.Malleable{Distributed: true})})
}

// loseNode reports node gone and the exits of its ranks' processes, lost with it.
func (j *fakeJob) loseNode(node string, ranks ...int) {
	j.t.Helper()
	j.step(NodeGone{Node: node, Reason: "node " + node + " stopped responding"})
	for _, r := range ranks {
		j.step(Exited{Proc: j.proc[r], Err: errors.New("node " + node + " stopped responding"), NodeGone: true, At: j.now})
	}
}

// killSurvivors ends the processes the Machine killed for a recovery.
func (j *fakeJob) killSurvivors(acts []Action) {
	j.t.Helper()
	for _, p := range signalled(acts, syscall.SIGKILL) {
		j.exit(p, 137)
	}
}

// fourOnTwoNodes is a malleable, checkpointing 4-rank job on n1 and n2, 2 slots each, with
// checkpoint 1 committed.
func fourOnTwoNodes(t *testing.T) *fakeJob {
	j := recoveringJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 2, "n2": 2}}, "n1", "n1", "n2", "n2")
	j.malleable()
	j.committed(1, 10)
	return j
}

// "Processors may join ... at any time": a node declared gone whose pcmd comes back is a
// node of the job again; mpirun says so with its free slots, and a migration may target it.
func TestNodeDeclaredGoneWhosePcmdComesBackJoins(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 2, "n2": 2}}, "n1", "n2")
	j.launch()
	j.step(NodeGone{Node: "n3", Reason: "node n3 stopped responding (no heartbeat for 3s)"})
	if rep := j.migrate("n3", nil, 1); rep.OK || !strings.Contains(rep.Error, "node n3 stopped responding") {
		t.Fatalf("migration to the gone node: %+v, want refused", rep)
	}
	j.step(NodeJoined{Node: "n3", Free: 2, Why: "pcmd on node n3 came back (pid 4242)"})
	j.wantLog(`node n3 joined \(2 free slots\): pcmd on node n3 came back \(pid 4242\)`)
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Errorf("migration to the returned node refused: %+v", rep)
	}
}

// A pcmd started after the job joins it: a recovery places the ranks of a lost node on its
// free slots, and the job keeps its size.
func TestNodeStartedAfterTheJobTakesTheRanksOfALostNodeAtRecovery(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.malleable()
	j.committed(1, 10)
	j.step(NodeJoined{Node: "n3", Free: 1, Why: "a pcmd started after the job"})
	j.wantLog(`node n3 joined \(1 free slots\): a pcmd started after the job`)
	acts := j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	j.killSurvivors(acts)
	j.restarted("n1", "n3")
	j.noLog(`shrinks`)
	if j.m.Info().Size != 2 {
		t.Errorf("size %d, want 2", j.m.Info().Size)
	}
}

// "A resize that names no node uses the free slots of the job's nodes, joined nodes
// included": the grow goes to the joined node, which is asked first like a named one.
func TestResizeNamingNoNodeGrowsOntoTheFreeSlotsOfJoinedNodes(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.step(NodeJoined{Node: "n3", Free: 2, Why: "a pcmd started after the job"})
	to, acts := j.resize(6)
	checks := only[CheckNode](acts)
	if len(checks) != 1 || checks[0].Node != "n3" {
		t.Fatalf("actions %+v, want a check of n3", acts)
	}
	j.step(NodeChecked{Check: checks[0].Check})
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	e := j.m.Log().Entries[0]
	if e.Kind != reconf.Resize || !slices.Equal(e.Nodes, []string{"n3", "n3"}) {
		t.Fatalf("entry %+v, want the new ranks on n3", e)
	}
	j.resizeHello(1, 0, 0)
	for i := range 2 {
		if s := j.takeStart(); s.Node != "n3" || s.Join != 1 || s.Size != 6 {
			t.Errorf("joiner %d: %+v, want a start on n3", i, s)
		}
	}
}

// A resize naming no node that the job's nodes have no room for is refused at once, listing
// the free slots there are, rather than aborting at the boundary.
func TestResizeNamingNoNodeIsRefusedAtOnceWithoutFreeSlots(t *testing.T) {
	j := fourOnTwoNodes(t)
	to, acts := j.resize(5)
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "1 new ranks but the job's nodes have 0 free slots (n1:0,n2:0); name nodes with --on") {
		t.Errorf("reply %+v", rep)
	}
	if len(only[CheckNode](acts)) != 0 || len(j.published()) != 0 {
		t.Error("a refused resize was checked or published")
	}
	j.step(NodeJoined{Node: "n3", Free: 1, Why: "a pcmd started after the job"})
	to, _ = j.resize(7)
	if rep := j.lastReply(to); !strings.Contains(rep.Error, "3 new ranks but the job's nodes have 1 free slots (n1:0,n2:0,n3:1)") {
		t.Errorf("reply %+v", rep)
	}
}

// A node that joins while it runs ranks of the job (its free slots grew) keeps them: its
// slots are those ranks plus the free ones.
func TestJoinOfANodeRunningRanksAddsItsFreeSlots(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.step(NodeJoined{Node: "n1", Free: 1, Why: "test"})
	to, acts := j.resize(5)
	for _, c := range only[CheckNode](acts) {
		j.step(NodeChecked{Check: c.Check})
	}
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	if e := j.m.Log().Entries[0]; !slices.Equal(e.Nodes, []string{"n1"}) {
		t.Errorf("new rank on %v, want n1", e.Nodes)
	}
}

// A join that is not one (a malformed node name, negative slots) changes nothing.
func TestMalformedJoinIsIgnored(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.step(NodeJoined{Node: "../n9", Free: 3})
	j.step(NodeJoined{Node: "n9", Free: -1})
	j.wantLog(`ignoring a join of node "\.\./n9" with 3 free slots`)
	if to, _ := j.resize(5); j.lastReply(to).OK {
		t.Error("a resize used the slots of a malformed join")
	}
}

// Issue 16's scenario, as the supervisor sees it: a node is lost with its disk, there is no
// slot for its ranks, and the malleable job shrinks 4 -> 2 onto the surviving node, restarted
// from the checkpoint into 2 ranks; the node's pcmd comes back and joins, and a resize that
// names no node grows the job back onto it.
func TestLostNodeShrinksAMalleableJobAndItsReturnLetsItGrowBack(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.beatAll(14)
	j.step(NodeGone{Node: "n2", Reason: "node n2 stopped responding"})
	acts := j.step(Exited{Proc: j.proc[2], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	acts = append(acts, j.step(Exited{Proc: j.proc[3], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})...)
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
	j.wantLog(`rank 2 \(pid 1002 on n2\): node n2 stopped responding; recovering \(1 of 3\): the job shrinks from 4 to 2 ranks \(2 slot\(s\) missing\) and every rank restarts from checkpoint 1 \(iteration 10\), 4 iterations lost`)
	e := j.m.Log().Entries[0]
	if e.Kind != reconf.Recover || e.NP != 2 || e.OldNP != 4 {
		t.Errorf("entry %+v, want a recovery from 4 to 2 ranks", e)
	}
	j.killSurvivors(acts)
	j.restarted("n1", "n1") // each a restart into 2 ranks
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Seq: 1, Iteration: 10})})
	j.wantLog(`recovered from the failure of rank 2: every rank restarted from checkpoint 1 \(iteration 10\), 4 iterations lost in .*; the job shrank from 4 to 2 ranks`)
	if info := j.m.Info(); info.Size != 2 || len(info.Ranks) != 2 {
		t.Fatalf("info %+v, want 2 ranks", info)
	}

	j.step(NodeJoined{Node: "n2", Free: 2, Why: "pcmd on node n2 came back (pid 99)"})
	to, acts := j.resize(4)
	for _, c := range only[CheckNode](acts) {
		if c.Node != "n2" {
			t.Errorf("check of %s, want n2", c.Node)
		}
		j.step(NodeChecked{Check: c.Check})
	}
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("grow refused: %+v", rep)
	}
	seq := j.m.Log().Entries[1].Seq
	j.resizeHello(seq, 0, 0)
	for i := range 2 {
		s := j.takeStart()
		if s.Node != "n2" || s.Rank != 2+i {
			t.Fatalf("joiner %+v, want rank %d on n2", s, 2+i)
		}
		j.step(Started{Proc: s.Proc, PID: 6000 + i, Node: "n2"})
	}
	j.resizeHello(seq, 1, 1)
	j.resizeHello(seq, 2, -1)
	j.resizeHello(seq, 3, -1)
	j.resizeReport(job.ResizeReport{Seq: seq, OK: true, Iteration: 20})
	if info := j.m.Info(); info.Size != 4 || info.Ranks[3].Node != "n2" {
		t.Errorf("info %+v, want 4 ranks, the last on n2", info)
	}
}

// A rigid job (no distributed data) is not shrunk: it ends, saying why (the dead end of
// TestNoSurvivingNodeWithRoomEndsTheJobNamingTheMissingSlots); nor is a job before rank 0
// said whether it is malleable.
func TestJobThatCannotShrinkEndsWhenSlotsAreMissing(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.committed(1, 10)
	j.loseNode("n2", 1)
	f := j.wantFailure(RankFailed, 1, StatusFailed)
	if !strings.Contains(f.Reason, "the job cannot shrink: its ranks registered no distributed data") {
		t.Errorf("reason %q", f.Reason)
	}
}

// Dead end: no surviving node has room for any rank, so not even a shrink helps.
func TestDeadEndNoNodeHasRoomForAnyRank(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.step(NodeGone{Node: "n1", Reason: "node n1 stopped responding"})
	j.loseNode("n2", 2)
	f := j.wantFailure(RankFailed, 2, StatusFailed)
	if !strings.HasSuffix(f.Reason, "; cannot recover: no surviving node has room for any rank (lost: n1, n2; surviving: none)") {
		t.Errorf("reason %q", f.Reason)
	}
	if len(j.pend) != 0 {
		t.Error("a rank was restarted")
	}
}

// Dead end: every copy of the checkpoint is lost. The restarted ranks find nothing to
// restore and say so; their failure ends the job with that reason instead of recovering
// again into the same loss.
func TestDeadEndEveryCopyOfTheCheckpointLost(t *testing.T) {
	j := fourOnTwoNodes(t)
	acts := j.killRank(0)
	j.advance(DefaultFailureWindow)
	j.killSurvivors(acts)
	procs := j.restarted("n1", "n1", "n2", "n2")
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Error: "pcm: restart from job j: no valid checkpoint in mem:n1; checkpoint 1 rank 2: piece missing"})})
	for i, p := range procs {
		j.exit(p, 1+i%2)
	}
	j.advance(DefaultFailureWindow)
	f := j.m.Failure()
	if f == nil {
		t.Fatalf("no failure; pending starts %+v", j.pend)
	}
	if !strings.Contains(f.Reason, "; cannot recover: no copy of checkpoint 1 or an older one can be restored (every copy of a piece is lost): pcm: restart from job j: no valid checkpoint") {
		t.Errorf("reason %q", f.Reason)
	}
	if len(j.pend) != 0 {
		t.Error("recovered again")
	}
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted {
		t.Errorf("recovery entry %+v, want aborted", e)
	}
}

// Dead end: recoveries are bounded also when the job shrank: the next failure after the last
// one ends the job, saying how many were used.
func TestDeadEndRecoveriesExhaustedAfterAShrink(t *testing.T) {
	j := recoveringJob(t, Config{MaxRecoveries: 1, Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.malleable()
	j.committed(1, 10)
	acts := j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	j.killSurvivors(acts)
	procs := j.restarted("n1")
	j.exit(procs[0], 1)
	j.advance(DefaultFailureWindow)
	f := j.wantFailure(RankFailed, 0, 1)
	if !strings.HasSuffix(f.Reason, "; cannot recover: 1 recoveries used (--max-recoveries 1)") {
		t.Errorf("reason %q", f.Reason)
	}
}

// A resize under way when the job fails is given up: its joiners are killed with the failed
// run, the recovery waits for them, and a new resize is taken afterwards.
func TestRecoveryGivesUpTheResizeUnderWay(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.step(NodeJoined{Node: "n3", Free: 1, Why: "test"})
	_, acts := j.resize(5)
	for _, c := range only[CheckNode](acts) {
		j.step(NodeChecked{Check: c.Check})
	}
	j.resizeHello(1, 0, 0)
	joiner := j.takeStart()
	j.step(Started{Proc: joiner.Proc, PID: 7000, Node: "n3"})
	j.killRank(1)
	acts = j.advance(DefaultFailureWindow)
	if !slices.Contains(signalled(acts, syscall.SIGKILL), joiner.Proc) {
		t.Fatalf("joiner not killed: %+v", acts)
	}
	for _, p := range signalled(acts, syscall.SIGKILL) {
		if p != joiner.Proc {
			j.exit(p, 137)
		}
	}
	if len(j.pend) != 0 {
		t.Fatal("restarted while the joiner runs")
	}
	j.exit(joiner.Proc, 137)
	j.restarted("n1", "n1", "n2", "n2")
	if e := j.m.Log().Entries[0]; e.Kind != reconf.Resize || e.State != reconf.Aborted {
		t.Errorf("resize entry %+v, want aborted", e)
	}
	if to, _ := j.resize(3); !j.lastReply(to).OK {
		t.Errorf("resize after the recovery refused: %+v", j.lastReply(to))
	}
}

// The race CI met: the ranks of n1 fail first (they lost their peers on n2), the recovery is
// decided while n2 still counts as alive, and n2 is found dead only when asked to kill its
// ranks. The restart must not go to n2: the placement is decided again, and the malleable job
// shrinks onto n1 as if n2's loss had been known from the start.
func TestNodeFoundLostWhileTheFailedRunStopsGetsNoRankOfTheRestart(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.beatAll(14)
	j.exit(j.proc[0], 1)
	acts := j.advance(DefaultFailureWindow)
	j.wantLog(`rank 0 .*; recovering \(1 of 3\): every rank restarts from checkpoint 1 \(iteration 10\), 4 iterations lost`)
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, []ProcID{j.proc[1], j.proc[2], j.proc[3]}) {
		t.Fatalf("SIGKILL to %v, want ranks 1-3", got)
	}
	j.exit(j.proc[1], 137)
	for _, r := range []int{2, 3} {
		j.step(Exited{Proc: j.proc[r], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	}
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
	j.wantLog(`node n2 was lost while the failed run was being stopped; recovering \(1 of 3\): the job shrinks from 4 to 2 ranks \(2 slot\(s\) missing\) and every rank restarts from checkpoint 1 \(iteration 10\), 4 iterations lost`)
	if e := j.m.Log().Entries[0]; e.Kind != reconf.Recover || e.NP != 2 || e.OldNP != 4 {
		t.Errorf("entry %+v, want a recovery from 4 to 2 ranks", e)
	}
	j.restarted("n1", "n1")
	j.step(Restored{Data: enc(t, job.Restored{From: "j", Seq: 1, Iteration: 10})})
	j.wantLog(`recovered from the failure of rank 0: .*; the job shrank from 4 to 2 ranks`)
}

// The same race when no rank can go on without the lost node: the job ends, saying which node
// was found lost and why the recovery cannot restart without it; nothing is started.
func TestNodeFoundLostWhileTheFailedRunStopsEndsAJobThatCannotGoOnWithoutIt(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.committed(1, 10)
	j.exit(j.proc[0], 1)
	j.advance(DefaultFailureWindow)
	j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	f := j.wantFailure(RankFailed, 0, StatusFailed)
	if !strings.HasSuffix(f.Reason, "; node n2 was lost while the failed run was being stopped; cannot recover: no surviving node has room for rank 1 (1 slot(s) missing; lost: n2; surviving: n1); the job cannot shrink: its ranks registered no distributed data (pcm.NewBlock)") {
		t.Errorf("reason %q", f.Reason)
	}
	if len(j.pend) != 0 {
		t.Error("a rank was restarted")
	}
	if e := j.m.Log().Entries[0]; e.Kind != reconf.Recover || e.State != reconf.Aborted {
		t.Errorf("entry %+v, want an aborted recovery", e)
	}
	if !j.m.Done() {
		t.Error("the job is not done: nothing runs and it failed")
	}
}

// A node lost between the placement of a restart and the spawn request: the start fails
// because the node is gone, which is the loss of a node, not a program that cannot start:
// the job is recovered again without it.
func TestRestartOnANodeGoneMeanwhileIsRecoveredWithoutIt(t *testing.T) {
	j := fourOnTwoNodes(t)
	j.beatAll(14)
	j.killRank(0)
	j.advance(DefaultFailureWindow)
	for _, want := range []string{"n1", "n1", "n2"} {
		s := j.takeStart()
		if s.Node != want {
			t.Fatalf("restart %+v, want on %s", s, want)
		}
		if want == "n1" {
			j.pid[s.Proc] = 3000 + s.Rank
			j.step(Started{Proc: s.Proc, PID: 3000 + s.Rank, Node: "n1"})
			continue
		}
		acts := j.step(Started{Proc: s.Proc, Err: errors.New("node n2 stopped responding (no pcmd listens on mpios.node.n2.spawn)"), NodeGone: true})
		if f := j.m.Failure(); f != nil {
			t.Fatalf("failure %+v", f)
		}
		j.wantLog(`cannot start rank 2: node n2 stopped responding \(no pcmd listens on mpios\.node\.n2\.spawn\); recovering \(2 of 3\): the job shrinks from 4 to 2 ranks \(2 slot\(s\) missing\) and every rank restarts from checkpoint 1 \(iteration 10\)`)
		j.killSurvivors(acts)
	}
	j.restarted("n1", "n1")
}
