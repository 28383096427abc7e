package spawner

import (
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// fullNode is a node with --slots 2, both in use by ranks 0 and 2 of job j.
func fullNode(t *testing.T) *Table {
	tb := NewTable("n1", 2, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	start(t, tb, RankKey{"j", 2}, 102, t0, 0)
	return tb
}

// A full node takes a rank in exchange for one of the same job that leaves it in the same
// joint move: the two share its slot, the node counts 2 of 2 in use, and once the leaver
// exits (the commit) the arrival holds the slot alone.
func TestAFullNodeAdmitsARankInExchangeForOneLeavingInTheSameMove(t *testing.T) {
	tb := fullNode(t)
	if code, why := tb.Admit(RankKey{"j", 1}); code != job.RefuseNoSlot {
		t.Fatalf("a full node admitted rank 1 without an exchange: %q %q", code, why)
	}
	if code, why := tb.Admit(RankKey{"j", 1}, 2); code != "" {
		t.Fatalf("rank 1 replacing rank 2 refused: %s %s", code, why)
	}
	if tb.Used() != 2 {
		t.Fatalf("used %d during the hand-over, want 2 (the two share a slot)", tb.Used())
	}
	tb.Started(RankKey{"j", 1}, 101, t0, 0)
	if code, _ := tb.Admit(RankKey{"j", 3}, 1); code != job.RefuseNoSlot {
		t.Errorf("the arrival lent a slot it has only borrowed: %q", code)
	}
	tb.Exited(RankKey{"j", 2}) // rank 2 handed over and left
	if tb.Used() != 2 {
		t.Fatalf("used %d after the leaver exited, want 2", tb.Used())
	}
	if code, why := tb.Admit(RankKey{"j", 3}, 1); code != "" {
		t.Errorf("rank 1, now the slot's owner, cannot be exchanged in turn: %q %q", code, why)
	}
}

// A joint move that aborts stops the arrival: the leaver keeps its slot, which it may lend
// again, and the node is back to its slots.
func TestAnAbortedJointMoveGivesTheSharedSlotBackToTheRankThatStays(t *testing.T) {
	tb := fullNode(t)
	if code, _ := tb.Admit(RankKey{"j", 1}, 2); code != "" {
		t.Fatal("rank 1 replacing rank 2 refused")
	}
	tb.Abort(RankKey{"j", 1}) // its successor could not be started
	if tb.Used() != 2 {
		t.Fatalf("used %d after the abort, want 2", tb.Used())
	}
	if code, _ := tb.Admit(RankKey{"j", 3}, 2); code != "" {
		t.Fatal("rank 2's slot was not lendable again after the aborted move")
	}
	tb.Started(RankKey{"j", 3}, 103, t0, 0)
	tb.Exited(RankKey{"j", 3}) // that move aborted after its successor started
	if tb.Used() != 2 || len(tb.Ranks()) != 2 {
		t.Fatalf("used %d, ranks %v after the second abort, want ranks 0 and 2 in 2 slots", tb.Used(), tb.Ranks())
	}
}

// A leaving rank lends its slot once, only to its own job, and only while it runs: a node
// is never more than one rank per leaver over its slots.
func TestALeavingRankLendsItsSlotOnceAndOnlyToItsJob(t *testing.T) {
	tb := fullNode(t)
	if code, _ := tb.Admit(RankKey{"j", 1}, 2); code != "" {
		t.Fatal("first arrival refused")
	}
	code, why := tb.Admit(RankKey{"j", 3}, 2)
	if code != job.RefuseNoSlot || !strings.Contains(why, "none of the ranks it replaces (2)") {
		t.Errorf("a second arrival for the same leaver: %q %q", code, why)
	}
	if code, _ := tb.Admit(RankKey{"k", 1}, 0); code != job.RefuseNoSlot {
		t.Errorf("job k borrowed a slot of job j's rank 0: %q", code)
	}
	if code, _ := tb.Admit(RankKey{"j", 4}, 7); code != job.RefuseNoSlot {
		t.Errorf("a rank that does not run here lent a slot: %q", code)
	}
	tb.Drain()
	if code, _ := tb.Admit(RankKey{"j", 5}, 0); code != job.RefuseStopping {
		t.Errorf("a draining node admitted an exchange: %q", code)
	}
}
