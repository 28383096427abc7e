package rankreconf

import (
	"slices"
	"testing"

	"github.com/mpios/mpios/internal/reconf"
)

// "Merge: ranks hand their data over and leave ... the world is rebuilt with contiguous
// ranks": the leavers get -1, the others keep their order.
func TestMergeNumbersTheSurvivorsContiguously(t *testing.T) {
	log := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 5, NP: 3, Ranks: []int{1, 3}}}
	p, err := Decide(Point{Rank: 0, Size: 5, Known: 1}, log)
	if err != nil || p.Resize == nil {
		t.Fatalf("plan %+v, %v", p, err)
	}
	if !slices.Equal(p.Resize.NewRank, []int{0, -1, 1, -1, 2}) || p.Resize.Grow() || !p.Resize.Leaves(3) {
		t.Errorf("resize %+v", p.Resize)
	}
}

// "Split: old ranks keep their numbers" and every rank enters at the same boundary: the
// plan depends on the agreed entries only.
func TestSplitKeepsTheOldRanksAndEveryRankPlansAlike(t *testing.T) {
	log := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Checkpoint}, {Seq: 2, Kind: reconf.Resize, OldNP: 4, NP: 6, State: reconf.Prepared}}
	var first *Resize
	for r := range 4 {
		p, err := Decide(Point{Rank: r, Size: 4, Known: 2, Checkpointing: true, InFlight: true}, log)
		if err != nil || p.Resize == nil {
			t.Fatalf("rank %d: %+v %v", r, p, err)
		}
		if !p.SettleFirst || !p.Checkpoint || !p.SettleCheckpoint {
			t.Errorf("a checkpoint spans the resize: %+v", p)
		}
		if first == nil {
			first = p.Resize
		} else if !slices.Equal(first.NewRank, p.Resize.NewRank) || first.NewSize != p.Resize.NewSize {
			t.Errorf("rank %d plans %+v, rank 0 %+v", r, p.Resize, first)
		}
	}
	if !slices.Equal(first.NewRank, []int{0, 1, 2, 3}) || !first.Grow() || first.Seq != 2 {
		t.Errorf("resize %+v", first)
	}
	// Not yet agreed by every rank: nothing happens.
	if p, _ := Decide(Point{Size: 4, Known: 1}, log); p.Resize != nil {
		t.Errorf("resize before the agreement: %+v", p.Resize)
	}
}

// A resize entry for another size is stale (a later entry or a restart changed the size)
// and a malformed shrink is an error on every rank alike.
func TestStaleAndMalformedResizes(t *testing.T) {
	stale := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 3, NP: 5}}
	if p, err := Decide(Point{Size: 4, Known: 1}, stale); err != nil || p.Resize != nil {
		t.Errorf("stale: %+v %v", p.Resize, err)
	}
	bad := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 4, NP: 2, Ranks: []int{3}}}
	if _, err := Decide(Point{Size: 4, Known: 1}, bad); err == nil {
		t.Error("a shrink by 2 naming one leaver was accepted")
	}
	outside := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 4, NP: 3, Ranks: []int{9}}}
	if _, err := Decide(Point{Size: 4, Known: 1}, outside); err == nil {
		t.Error("a leaver outside the world was accepted")
	}
}

// The commit rule: all ready commits; one failure aborts, naming the first.
func TestResizeCommitsOnlyIfEveryProcessIsReady(t *testing.T) {
	ok, failed, bytes := JudgeResize([]ResizeOutcome{{OK: true, Bytes: 10}, {OK: true, Bytes: 5}})
	if !ok || failed != -1 || bytes != 15 {
		t.Errorf("%v %d %d", ok, failed, bytes)
	}
	ok, failed, _ = JudgeResize([]ResizeOutcome{{OK: true}, {}, {}})
	if ok || failed != 1 {
		t.Errorf("%v %d", ok, failed)
	}
}

// "A way to re-weight blocks without changing the rank count (rebalancing)": a resize to
// the same size with weights keeps every rank and carries the weights; without weights, or
// with weights that do not match the size, it is no resize.
func TestRebalanceKeepsEveryRankAndCarriesTheWeights(t *testing.T) {
	w := []float64{1, 2, 1}
	log := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 3, NP: 3, Weights: w}}
	p, err := Decide(Point{Size: 3, Known: 1}, log)
	if err != nil || p.Resize == nil {
		t.Fatalf("plan %+v, %v", p, err)
	}
	if rs := p.Resize; !rs.Rebalance() || rs.Grow() || !slices.Equal(rs.NewRank, []int{0, 1, 2}) || !slices.Equal(rs.Weights, w) {
		t.Errorf("resize %+v", rs)
	}
	grow := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Resize, OldNP: 3, NP: 4, Weights: []float64{1, 1, 1, 3}}}
	if p, _ := Decide(Point{Size: 3, Known: 1}, grow); p.Resize == nil || !slices.Equal(p.Resize.Weights, grow[0].Weights) || !p.Resize.Grow() {
		t.Errorf("weighted grow: %+v", p.Resize)
	}
	for _, e := range []reconf.Reconfiguration{
		{Seq: 1, Kind: reconf.Resize, OldNP: 3, NP: 3},
		{Seq: 1, Kind: reconf.Resize, OldNP: 3, NP: 3, Weights: []float64{1, 2}},
	} {
		if p, err := Decide(Point{Size: 3, Known: 1}, []reconf.Reconfiguration{e}); err != nil || p.Resize != nil {
			t.Errorf("entry %+v planned %+v, %v", e, p.Resize, err)
		}
	}
}
