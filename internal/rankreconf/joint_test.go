package rankreconf

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/reconf"
)

// An exchange is one entry with a target per rank: every rank plans both moves, each to its
// own node, at the same boundary.
func TestAJointEntryMovesEachRankToItsOwnTarget(t *testing.T) {
	log := []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Migrate, Ranks: []int{1, 2}, Targets: []string{"n1", "n2"}, Joint: true, State: reconf.Proposed}}
	p, err := Decide(Point{Rank: 0, Size: 4, Known: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	want := []Move{{Rank: 1, Seq: 1, To: "n1", Joint: true}, {Rank: 2, Seq: 1, To: "n2", Joint: true}}
	if !reflect.DeepEqual(p.Moves, want) {
		t.Fatalf("moves %+v, want %+v", p.Moves, want)
	}
}

// All or nothing at the commit point: a joint move happens only if every move of its entry
// is ready; a move of another entry is judged alone.
func TestAJointMoveHappensOnlyIfEveryMoveOfItsEntryIsReady(t *testing.T) {
	moves := []Move{{1, 1, "n1", true}, {2, 1, "n2", true}, {3, 2, "n2", false}}
	outcomes := []Outcome{{}, {Moved: true, Addr: "n1:1"}, {}, {Moved: true, Addr: "n2:3"}}
	for me, want := range []Verdict{
		{Redirects: []Redirect{{3, "n2:3"}}},
		{Redirects: []Redirect{{3, "n2:3"}}, Abort: true, Unready: []int{2}},
		{Redirects: []Redirect{{3, "n2:3"}}, Abort: true, Unready: []int{2}},
		{Leave: true},
	} {
		if got := Judge(moves, outcomes, me); !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d: verdict %+v, want %+v", me, got, want)
		}
	}
	outcomes[2] = Outcome{Moved: true, Addr: "n2:2"}
	if got := Judge(moves, outcomes, 1); !got.Leave || len(got.Redirects) != 2 {
		t.Errorf("every joint move ready: rank 1's verdict %+v, want it to leave and redirect ranks 2 and 3", got)
	}
}

// A swap whose second half cannot start its successor (the target refused it) leaves both
// ranks where they were: the rank whose successor was ready releases it, reports the abort
// with the rank that was not ready, and nobody redirects.
func TestAJointMoveWithAFailedHalfRollsBothRanksBack(t *testing.T) {
	moves := []Move{{Rank: 0, Seq: 3, To: "n2", Joint: true}, {Rank: 1, Seq: 3, To: "n1", Joint: true}}
	g := newGroup(2)
	a, b := newRank(0, 2, 10, moves, g.agreeFor(0)), newRank(1, 2, 10, moves, g.agreeFor(1))
	b.ctl.startErr = errors.New("node n1 has no free slot")
	leaves := runAll(t, []*rankSim{a, b})
	if leaves[0] || leaves[1] {
		t.Fatalf("leave %v after half of a joint move failed", leaves)
	}
	if len(a.world.redirects) != 0 || len(b.world.redirects) != 0 || a.world.retired || b.world.retired {
		t.Fatalf("redirects %v %v, retired %v %v", a.world.redirects, b.world.redirects, a.world.retired, b.world.retired)
	}
	ra := a.ctl.reports
	if len(ra) != 1 || ra[0].OK || !strings.Contains(ra[0].Error, "rank 1 not ready") {
		t.Fatalf("rank 0's reports %+v, want one failure naming rank 1", ra)
	}
	if !strings.Contains(a.tr.String(), "abort hand-over") {
		t.Fatalf("rank 0's ready successor was not released: %s", a.tr)
	}
	if rb := b.ctl.reports; len(rb) != 1 || rb[0].OK || !strings.Contains(rb[0].Error, "no free slot") {
		t.Fatalf("rank 1's reports %+v", rb)
	}
}
