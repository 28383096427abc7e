package nodestatus

import (
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// pcmd status lists each resize with its state, the boundary, the pause and the data moved;
// a weighted resize and a rebalance in place say so.
func TestStatusListsResizes(t *testing.T) {
	st := Status{
		Nodes: []NodeStatus{{Name: "n1", State: StateAlive, Slots: 4}},
		Ranks: []RankStatus{{Job: "j1", Rank: 0, Node: "n1", Started: time.Now()}},
		Jobs: []job.JobInfo{{Job: "j1", Reconfigurations: []reconf.Reconfiguration{
			{Seq: 1, Kind: reconf.Checkpoint, State: reconf.Proposed},
			{Seq: 2, Kind: reconf.Resize, OldNP: 4, NP: 6, State: reconf.Committed, Iteration: 120, Pause: 31 * time.Millisecond, Bytes: 3 << 20, Reason: "grow"},
			{Seq: 3, Kind: reconf.Resize, OldNP: 6, NP: 9, State: reconf.Aborted, Reason: "more", Error: "cannot start rank 7 on n3"},
			{Seq: 4, Kind: reconf.Resize, OldNP: 6, NP: 7, Weights: []float64{1, 1, 1, 1, 1, 1, 2}, State: reconf.Committed, Iteration: 130, Pause: 20 * time.Millisecond, Bytes: 1 << 20, Reason: "n3"},
			{Seq: 5, Kind: reconf.Resize, OldNP: 7, NP: 7, Weights: []float64{2, 1, 1, 1, 1, 1, 1}, State: reconf.Committed, Iteration: 140, Pause: 5 * time.Millisecond, Bytes: 1 << 19, Reason: "skew"},
		}}},
	}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"JOB  RANKS            RESIZE     ITERATION  PAUSE  MOVED      REASON",
		"j1   4 -> 6           committed  120        31ms   3.0 MiB    grow",
		"j1   6 -> 9           aborted    -          -      -          more — cannot start rank 7 on n3",
		"j1   6 -> 7 weighted  committed  130        20ms   1.0 MiB    n3",
		"j1   7 rebalanced     committed  140        5ms    512.0 KiB  skew",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}
