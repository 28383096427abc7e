package nodestatus

import (
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// pcmd status lists each resize with its state, the boundary, the pause and the data moved.
func TestStatusListsResizes(t *testing.T) {
	st := Status{
		Nodes: []NodeStatus{{Name: "n1", State: StateAlive, Slots: 4}},
		Ranks: []RankStatus{{Job: "j1", Rank: 0, Node: "n1", Started: time.Now()}},
		Jobs: []job.JobInfo{{Job: "j1", Reconfigurations: []reconf.Reconfiguration{
			{Seq: 1, Kind: reconf.Checkpoint, State: reconf.Proposed},
			{Seq: 2, Kind: reconf.Resize, OldNP: 4, NP: 6, State: reconf.Committed, Iteration: 120, Pause: 31 * time.Millisecond, Bytes: 3 << 20, Reason: "grow"},
			{Seq: 3, Kind: reconf.Resize, OldNP: 6, NP: 9, State: reconf.Aborted, Reason: "more", Error: "cannot start rank 7 on n3"},
		}}},
	}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"JOB  RANKS   RESIZE     ITERATION  PAUSE  MOVED    REASON",
		"j1   4 -> 6  committed  120        31ms   3.0 MiB  grow",
		"j1   6 -> 9  aborted    -          -      -        more — cannot start rank 7 on n3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}
