package supervisor

// Recovery beside a graceful leave (issue 16: "the node takes no new ranks, its ranks migrate
// to nodes with free slots"). A draining node's running ranks go on, but a recovery, which
// restarts every rank, must not place one there: the node would refuse it, and it is leaving.

import (
	"errors"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/job"
)

// sixSlotsFourRanks is a checkpointing 4-rank job on n1 and n2 (2 each) with n3's 2 slots
// free, checkpoint 1 committed.
func sixSlotsFourRanks(t *testing.T) *fakeJob {
	j := recoveringJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 2, "n2": 2, "n3": 2}}, "n1", "n1", "n2", "n2")
	j.committed(1, 10)
	return j
}

// "The node takes no new ranks": the ranks of a draining node restart elsewhere when a rank
// of another node fails.
func TestARecoveryStartsNoRankOnADrainingNode(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.step(NodeDraining{Node: "n1", Draining: true})
	j.killRank(2)
	j.advance(DefaultFailureWindow)
	j.restarted("n3", "n3", "n2", "n2")
}

// A drain cancelled (pcmd could not place its ranks and keeps serving): the node takes ranks
// again.
func TestANodeThatStopsDrainingTakesRanksAgain(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.step(NodeDraining{Node: "n1", Draining: true})
	j.step(NodeDraining{Node: "n1", Draining: false})
	j.killRank(2)
	j.advance(DefaultFailureWindow)
	j.restarted("n1", "n1", "n2", "n2")
}

// What the compound test met (a rank of n1 stopped, then n1 drained): the recovery was
// decided before mpirun knew n1 drains, and n1 refused the restart of rank 0 ("takes no new
// ranks"), which ended the job as a program that cannot start. A start refused because the
// node takes no new ranks is no fault of the program: the job is recovered again without it.
func TestARestartRefusedByADrainingNodeIsRecoveredWithoutIt(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.killRank(0)
	j.advance(DefaultFailureWindow)
	s := j.takeStart()
	if s.Rank != 0 || s.Node != "n1" {
		t.Fatalf("restart %+v, want rank 0 on n1", s)
	}
	acts := j.step(Started{Proc: s.Proc, Err: errors.New("pcmd: node n1 is draining: it takes no new ranks"), NodeClosed: true})
	if f := j.m.Failure(); f != nil {
		t.Fatalf("failure %+v", f)
	}
	j.wantLog(`cannot start rank 0: pcmd: node n1 is draining: it takes no new ranks; recovering \(2 of 3\): every rank restarts from checkpoint 1 \(iteration 10\)`)
	j.killSurvivors(acts)
	j.restarted("n3", "n3", "n2", "n2")
}

// The same when mpirun learns that the node drains while the failed run is being stopped:
// the placement is decided again before anything starts.
func TestNodeDrainingWhileTheFailedRunStopsGetsNoRankOfTheRestart(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.exit(j.proc[0], 1)
	j.advance(DefaultFailureWindow)
	j.step(NodeDraining{Node: "n1", Draining: true})
	for r := 1; r < 4; r++ {
		j.exit(j.proc[r], 137)
	}
	j.wantLog(`node n1 began draining while the failed run was being stopped; recovering \(1 of 3\): every rank restarts from checkpoint 1 \(iteration 10\)`)
	j.restarted("n3", "n3", "n2", "n2")
}

// Dead end: the only other node drains, and the job cannot shrink: it ends at once, saying
// which node drains.
func TestNoRoomButOnADrainingNodeEndsTheJobNamingIt(t *testing.T) {
	j := recoveringJob(t, Config{Slots: map[string]int{"n1": 1, "n2": 1}}, "n1", "n2")
	j.committed(1, 10)
	j.step(NodeGone{Node: "n2", Reason: "node n2 stopped responding"})
	j.step(NodeDraining{Node: "n1", Draining: true})
	j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true, At: j.now})
	f := j.wantFailure(RankFailed, 1, StatusFailed)
	if want := "; cannot recover: no surviving node has room for rank 0, 1 (2 slot(s) missing; lost: n2; draining: n1; surviving: none)"; !strings.Contains(f.Reason, want) {
		t.Errorf("reason %q, want it to contain %q", f.Reason, want)
	}
	if len(j.pend) != 0 {
		t.Error("a rank was restarted")
	}
}

// A node that drained and left comes back (its pcmd restarted): it joins, and takes ranks
// again.
func TestANodeThatDrainedLeftAndCameBackTakesRanks(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.step(NodeDraining{Node: "n3", Draining: true})
	j.step(NodeGone{Node: "n3", Reason: "pcmd on node n3 shut down"})
	j.step(NodeJoined{Node: "n3", Free: 2, Why: "pcmd on node n3 came back (pid 4243)"})
	j.step(NodeGone{Node: "n1", Reason: "node n1 stopped responding"})
	for _, r := range []int{0, 1} {
		j.step(Exited{Proc: j.proc[r], Err: errors.New("node n1 stopped responding"), NodeGone: true, At: j.now})
	}
	j.exit(j.proc[2], 1)
	j.exit(j.proc[3], 1)
	j.advance(DefaultFailureWindow)
	j.restarted("n3", "n3", "n2", "n2")
}

// A resize that grows the job takes no slot of a draining node: the free slots it counts
// leave them out, and naming the node is refused with the reason.
func TestAGrowTakesNoSlotOfADrainingNode(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.malleable()
	j.step(NodeDraining{Node: "n3", Draining: true})
	to, _ := j.resize(6)
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "the job's nodes have 0 free slots (n1:0,n2:0,n3:0)") {
		t.Errorf("grow onto the free slots: %+v, want refused, n3's slots not counted", rep)
	}
	to, _ = j.resize(5, job.NodeSlots{Node: "n3", Slots: 1})
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "node n3 is draining: it takes no new ranks") {
		t.Errorf("grow onto n3: %+v, want refused as draining", rep)
	}
}

// Nor does a migration go to a draining node: it is refused at once, saying why.
func TestAMigrationToADrainingNodeIsRefused(t *testing.T) {
	j := sixSlotsFourRanks(t)
	j.step(NodeDraining{Node: "n3", Draining: true})
	if rep := j.migrate("n3", nil, 0); rep.OK || !strings.Contains(rep.Error, "cannot migrate to n3: it is draining and takes no new ranks") {
		t.Errorf("migration to a draining node: %+v, want refused", rep)
	}
	j.step(NodeDraining{Node: "n3", Draining: false})
	if rep := j.migrate("n3", nil, 0); !rep.OK {
		t.Errorf("migration once n3 takes ranks again: %+v, want accepted", rep)
	}
}
