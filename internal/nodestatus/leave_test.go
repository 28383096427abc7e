package nodestatus

import (
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// "A node is gone after job.MissedBeats heartbeat intervals without one": pcmd drain --wait
// takes a node for left only once nobody has answered for it that long, counted from the
// first silence, with the interval the node itself gave; an answer meanwhile (a pcmd that
// reconnected to NATS) starts the count again.
func TestANodeHasLeftAfterMissedBeatsIntervalsOfSilence(t *testing.T) {
	w := newLeaveWatch()
	t0 := time.Unix(1000, 0)
	if !w.answered(job.NodeInfo{Name: "n1", Interval: 2 * time.Second, Used: 2, Draining: true}) {
		t.Error("the first description says nothing new")
	}
	if w.answered(job.NodeInfo{Name: "n1", Interval: 2 * time.Second, Used: 2, Draining: true}) {
		t.Error("the same description again says something new")
	}
	if !w.answered(job.NodeInfo{Name: "n1", Interval: 2 * time.Second, Used: 1, Draining: true}) {
		t.Error("a rank that left is not news")
	}
	if w.noResponders(t0) || w.noResponders(t0.Add(5*time.Second)) {
		t.Fatal("left before 3 intervals of 2s")
	}
	w.answered(job.NodeInfo{Name: "n1", Interval: 2 * time.Second})
	if w.noResponders(t0.Add(6*time.Second)) || w.noResponders(t0.Add(11*time.Second)) {
		t.Fatal("the silence before its last answer counted")
	}
	if !w.noResponders(t0.Add(12 * time.Second)) {
		t.Fatal("not left after 6s of silence")
	}
}

// A node that never answered (it had left before the wait began) is gone after
// job.MissedBeats of pcmd's default interval.
func TestANodeNeverHeardHasLeftAfterTheDefaultSilence(t *testing.T) {
	w := newLeaveWatch()
	t0 := time.Unix(1000, 0)
	if w.noResponders(t0) || w.noResponders(t0.Add(job.MissedBeats*assumedHeartbeat-time.Millisecond)) {
		t.Fatal("left too soon")
	}
	if !w.noResponders(t0.Add(job.MissedBeats * assumedHeartbeat)) {
		t.Fatal("not left")
	}
}

func TestJobsOfNamesEachJobsRanks(t *testing.T) {
	got := jobsOf([]job.RankInfo{{Job: "b", Rank: 1}, {Job: "a", Rank: 3}, {Job: "a", Rank: 0}})
	if want := " (job a: ranks 0 3; job b: rank 1)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
