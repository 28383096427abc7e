package rankreconf

// Tests named after the reconfiguration scenario of the MPI/IOS paper (K. El Maghraoui,
// B. Szymanski, C. Varela: "An architecture for reconfigurable iterative MPI applications in
// dynamic environments") and the failure cases mpios handles, in the style of etcd's
// raft_paper_test.go: each statement of the paper is one test over the protocol with fake
// effects — no sockets, NATS, clocks or sleeps.

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/rewire"
)

func migrateEntry(seq uint64, to string, ranks ...int) reconf.Reconfiguration {
	return reconf.Reconfiguration{Seq: seq, Kind: reconf.Migrate, Ranks: ranks, To: to, State: reconf.Proposed}
}

func checkpointEntry(seq uint64) reconf.Reconfiguration {
	return reconf.Reconfiguration{Seq: seq, Kind: reconf.Checkpoint, State: reconf.Proposed}
}

// "mpi process gets notified migration event ... iteration": a request takes effect at an
// agreement point, an iteration boundary, once every rank has it; until then it waits, and
// it is applied exactly once.
func TestRequestTakesEffectAtABoundaryOnceEveryRankHasIt(t *testing.T) {
	log := []reconf.Reconfiguration{migrateEntry(1, "n1", 1), migrateEntry(2, "n2", 3)}
	// Rank 0 has both entries, some rank only the first: the agreed minimum is 1.
	p, err := Decide(Point{Rank: 0, Size: 4, Known: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Move{{Rank: 1, Seq: 1, To: "n1"}}; !reflect.DeepEqual(p.Moves, want) || p.Applied != 1 {
		t.Fatalf("plan %+v, want moves %v and 1 entry applied", p, want)
	}
	// At the next boundary every rank has both: only the second applies.
	p, _ = Decide(Point{Rank: 0, Size: 4, Known: 2, Applied: 1}, log)
	if want := []Move{{Rank: 3, Seq: 2, To: "n2"}}; !reflect.DeepEqual(p.Moves, want) || p.Applied != 2 {
		t.Fatalf("plan %+v, want moves %v and 2 entries applied", p, want)
	}
	// And then nothing is left.
	p, _ = Decide(Point{Rank: 0, Size: 4, Known: 2, Applied: 2}, log)
	if len(p.Moves) != 0 || len(p.Entries) != 0 || p.Checkpoint {
		t.Fatalf("plan %+v after everything was applied, want nothing", p)
	}
}

// "migration request forces running mpi processes enter reconfiguration phase": every rank
// enters the reconfiguration at the same boundary, with the same plan, whatever the length
// of its own copy of the log and whatever state the supervisor has since recorded for an
// entry.
func TestEveryRankEntersReconfigurationAtTheSameBoundary(t *testing.T) {
	full := []reconf.Reconfiguration{migrateEntry(1, "n1", 1), checkpointEntry(2), migrateEntry(3, "n2", 0, 2), migrateEntry(4, "n3", 3)}
	aborted := append([]reconf.Reconfiguration(nil), full...)
	aborted[2].State = reconf.Aborted
	logs := [][]reconf.Reconfiguration{full, full[:3], aborted, full[:3]}
	var plans []Plan
	for rank, log := range logs {
		p, err := Decide(Point{Rank: rank, Size: 4, Known: 3, Checkpointing: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		p.Entries = nil // their recorded states may differ; the decisions may not
		plans = append(plans, p)
	}
	for rank := range plans {
		if !reflect.DeepEqual(plans[rank], plans[0]) {
			t.Fatalf("rank %d plans %+v, rank 0 %+v", rank, plans[rank], plans[0])
		}
	}
	want := []Move{{0, 3, "n2", false}, {1, 1, "n1", false}, {2, 3, "n2", false}}
	if !reflect.DeepEqual(plans[0].Moves, want) || !plans[0].Checkpoint {
		t.Fatalf("plan %+v, want moves %v and a checkpoint", plans[0], want)
	}
	// A rank whose log is shorter than the agreed prefix cannot act like the others.
	if _, err := Decide(Point{Rank: 1, Size: 4, Known: 3}, full[:2]); err == nil {
		t.Fatal("a rank with 2 of 3 agreed entries decided a plan")
	}
}

// A rank named twice moves where the first entry sends it; ranks outside the world are
// ignored on every rank alike.
func TestMovesAreUniquePerRankAndInsideTheWorld(t *testing.T) {
	log := []reconf.Reconfiguration{migrateEntry(1, "n1", 2, 9), migrateEntry(2, "n3", 2, 0)}
	p, _ := Decide(Point{Size: 4, Known: 2}, log)
	if want := []Move{{0, 2, "n3", false}, {2, 1, "n1", false}}; !reflect.DeepEqual(p.Moves, want) {
		t.Fatalf("moves %v, want %v", p.Moves, want)
	}
	if mv, ok := p.MoveOf(2); !ok || mv.To != "n1" {
		t.Fatalf("MoveOf(2) = %v, %v", mv, ok)
	}
	if _, ok := p.MoveOf(1); ok {
		t.Fatal("rank 1 does not move")
	}
}

// "migrating process checkpoints local state spawns image remote processor": the moving
// rank asks the supervisor to start its successor on the target for its log entry, at this
// iteration, and tells it where to find the hand-over.
func TestMigratingProcessSpawnsSuccessorOnTarget(t *testing.T) {
	moves := []Move{{Rank: 1, Seq: 7, To: "n1"}}
	r := newRank(1, 2, 120, moves, alone(1, make([]Outcome, 2)))
	if _, err := r.m.Run(); err != nil {
		t.Fatal(err)
	}
	if len(r.ctl.started) != 1 {
		t.Fatalf("%d successors started, want 1 (trace: %s)", len(r.ctl.started), r.tr)
	}
	req := r.ctl.started[0]
	if req.Seq != 7 || req.Rank != 1 || req.Iteration != 120 || req.StateBytes != 1<<20 || req.Handover != r.pred.Spec() {
		t.Fatalf("successor request %+v", req)
	}
	if rep := r.ctl.reports[0]; rep.To != "n1" || rep.Seq != 7 {
		t.Fatalf("report %+v, want entry 7 to n1", rep)
	}
	// A rank that does not move starts nothing.
	other := newRank(0, 2, 120, moves, alone(0, []Outcome{{}, {Moved: true, Addr: "n1:8001"}}))
	if _, err := other.m.Run(); err != nil || len(other.ctl.started) != 0 {
		t.Fatalf("rank 0 started %v (err %v)", other.ctl.started, err)
	}
}

// "takes care transferring checkpointed state newly created process": the state reaches the
// successor before the commit point, and the commit gives it the address table, with its
// own address in the rank's place, and the messages the old process had not received.
func TestStateIsHandedOverBeforeTheCommit(t *testing.T) {
	moves := []Move{{Rank: 1, Seq: 1, To: "n1"}}
	r := newRank(1, 3, 10, moves, alone(1, make([]Outcome, 3)))
	r.world.snap = rewire.Snapshot{NextCtx: 5, Unexpected: []rewire.Message{{Peer: 0, Tag: 3, Data: []byte("late")}}}
	if _, err := r.m.Run(); err != nil {
		t.Fatal(err)
	}
	want := "listen, watch, start successor of rank 1 for entry 1, accept, send state, unwatch, agree moved=true, retire, commit hand-over, report ok=true"
	if got := r.tr.String(); got != want {
		t.Fatalf("effects:\n got %s\nwant %s", got, want)
	}
	final := r.pred.finals[0]
	if want := []string{"n1:7000", "n1:8001", "n1:7002"}; !reflect.DeepEqual(final.Addrs, want) {
		t.Fatalf("address table %v, want %v", final.Addrs, want)
	}
	if !reflect.DeepEqual(final.Snap, r.world.snap) {
		t.Fatalf("snapshot %+v, want %+v", final.Snap, r.world.snap)
	}
}

// "pcm library takes care rearranging com world communicator removing old process including
// new ... newly created process gets assigned rank": every rank learns the same outcomes at
// the commit point and sends the moved ranks' messages to their successors; the moving
// ranks do the same for each other. The run is four ranks with two moves.
func TestCommunicatorIsRewiredOnEveryRank(t *testing.T) {
	moves := []Move{{Rank: 0, Seq: 3, To: "n2"}, {Rank: 2, Seq: 3, To: "n2"}}
	g := newGroup(4)
	ranks := make([]*rankSim, 4)
	for i := range ranks {
		ranks[i] = newRank(i, 4, 50, moves, g.agreeFor(i))
	}
	leaves := runAll(t, ranks)
	for i, r := range ranks {
		var want []Redirect
		for _, mv := range moves {
			if mv.Rank != i {
				want = append(want, Redirect{mv.Rank, ranks[mv.Rank].pred.addr})
			}
		}
		if !reflect.DeepEqual(r.world.redirects, want) {
			t.Errorf("rank %d redirected %v, want %v", i, r.world.redirects, want)
		}
		if moving := i == 0 || i == 2; leaves[i] != moving {
			t.Errorf("rank %d: leave %v", i, leaves[i])
		}
	}
}

// runAll runs every rank's migration concurrently, as the processes of a job do, and
// returns whether each leaves.
func runAll(t *testing.T, ranks []*rankSim) []bool {
	t.Helper()
	leaves := make([]bool, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leaves[i], errs[i] = r.m.Run()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v (trace: %s)", i, err, ranks[i].tr)
		}
	}
	return leaves
}

// "removing old process": after the commit the old process retires its data plane, gives
// the successor the last word and leaves; its report says how long the job paused.
func TestOldProcessLeavesAfterTheCommit(t *testing.T) {
	r := newRank(1, 2, 10, []Move{{Rank: 1, Seq: 1, To: "n1"}}, alone(1, make([]Outcome, 2)))
	leave, err := r.m.Run()
	if err != nil || !leave {
		t.Fatalf("Run = %v, %v; want leave", leave, err)
	}
	if !r.world.retired || !r.pred.closed {
		t.Fatalf("retired %v, hand-over closed %v", r.world.retired, r.pred.closed)
	}
	rep := r.ctl.reports[0]
	if !rep.OK || rep.Error != "" || rep.Pause != 5e6 {
		t.Fatalf("report %+v, want OK with a pause of one clock step (5ms)", rep)
	}
}

// The failure cases before the commit: the target is unknown, gone or refuses, the
// successor dies before it connects or in the middle of the transfer, the listener cannot
// open. Each aborts this one migration: the rank continues where it is, tells the
// supervisor why, releases a successor that connected, and no rank redirects it.
func TestFailureBeforeTheCommitLeavesTheRankInPlace(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(r *rankSim)
		reason string // in the report
		effect string // the last effects on the hand-over
	}{
		{"target-unknown", func(r *rankSim) {
			r.ctl.startErr = errors.New("node nowhere: no pcmd serves it")
		}, "start successor on n1: node nowhere: no pcmd serves it", "start successor of rank 1 for entry 1, unwatch, agree moved=false"},
		{"target-refuses", func(r *rankSim) {
			r.ctl.startErr = errors.New("cannot start the successor on n1: not allowed by --allow")
		}, "not allowed by --allow", "start successor of rank 1 for entry 1, unwatch, agree moved=false"},
		{"target-gone", func(r *rankSim) {
			r.ctl.startErr = errors.New("no answer from the launcher: nats: timeout")
		}, "no answer from the launcher", "start successor of rank 1 for entry 1, unwatch, agree moved=false"},
		{"successor-dies-before-connecting", func(r *rankSim) {
			r.ctl.goneWhen = "start"
		}, "successor (pid 42 on n1) did not connect: its successor on n1 (pid 42) ended before taking over", "accept, unwatch, agree moved=false"},
		{"successor-dies-mid-transfer", func(r *rankSim) {
			r.pred.stateErr = errors.New("rewire: state not taken: EOF")
		}, "hand state to the successor on n1: rewire: state not taken: EOF", "send state, unwatch, agree moved=false, abort hand-over"},
		{"no-listener", func(r *rankSim) {
			r.m.Handover = &fakeHandover{tr: r.tr, listenErr: errors.New("listen tcp: address in use")}
		}, "address in use", "listen, agree moved=false"},
		{"address-too-long", func(r *rankSim) {
			r.pred.addr = strings.Repeat("h", MaxAddr) + ":1"
		}, "longer than", "accept, unwatch, agree moved=false, abort hand-over"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			moves := []Move{{Rank: 1, Seq: 1, To: "n1"}}
			g := newGroup(2)
			mover, other := newRank(1, 2, 10, moves, g.agreeFor(1)), newRank(0, 2, 10, moves, g.agreeFor(0))
			tc.setup(mover)
			leaves := runAll(t, []*rankSim{other, mover})
			if leaves[0] || leaves[1] {
				t.Fatalf("leave %v after a failed migration", leaves)
			}
			if len(other.world.redirects) != 0 || mover.world.retired {
				t.Fatalf("redirects %v, retired %v", other.world.redirects, mover.world.retired)
			}
			if len(mover.ctl.reports) != 1 {
				t.Fatalf("%d reports (trace: %s)", len(mover.ctl.reports), mover.tr)
			}
			if rep := mover.ctl.reports[0]; rep.OK || !strings.Contains(rep.Error, tc.reason) {
				t.Fatalf("report %+v, want a failure with %q", rep, tc.reason)
			}
			if got := mover.tr.String(); !strings.Contains(got, tc.effect+", report ok=false") {
				t.Fatalf("effects %s, want them to end with %q", got, tc.effect)
			}
			if opened := tc.name != "no-listener"; mover.pred.closed != opened {
				t.Fatalf("hand-over closed: %v, want %v", mover.pred.closed, opened)
			}
		})
	}
}

// The supervisor reports the successor's end while the predecessor waits for it: the wait
// ends at once (Cancel), it does not last until the accept timeout.
func TestSuccessorGoneCancelsTheWait(t *testing.T) {
	r := newRank(1, 2, 10, []Move{{Rank: 1, Seq: 1, To: "n1"}}, alone(1, make([]Outcome, 2)))
	r.ctl.goneWhen = "start"
	if _, err := r.m.Run(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.pred.cancelled, "ended before taking over") || !r.pred.closed {
		t.Fatalf("cancelled %q, closed %v", r.pred.cancelled, r.pred.closed)
	}
}

// When the ranks cannot agree (a peer failed at the commit point), nothing is committed:
// a moving rank tells its successor to give up and the supervisor why; no rank redirects.
func TestAgreementFailureCommitsNothing(t *testing.T) {
	moves := []Move{{Rank: 1, Seq: 1, To: "n1"}}
	g := newGroup(2)
	g.fail = errors.New("mpi: rank 0 failed")
	mover, other := newRank(1, 2, 10, moves, g.agreeFor(1)), newRank(0, 2, 10, moves, g.agreeFor(0))
	var wg sync.WaitGroup
	var leaves [2]bool
	var errs [2]error
	for i, r := range []*rankSim{other, mover} {
		wg.Add(1)
		go func() { defer wg.Done(); leaves[i], errs[i] = r.m.Run() }()
	}
	wg.Wait()
	for i := range errs {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), "rank 0 failed") || leaves[i] {
			t.Fatalf("rank %d: leave %v, err %v", i, leaves[i], errs[i])
		}
	}
	if f := mover.pred.finals; len(f) != 1 || !strings.Contains(f[0].Abort, "ranks failed to agree") {
		t.Fatalf("finals %+v, want an abort", f)
	}
	if len(other.world.redirects)+len(mover.world.redirects) != 0 || mover.world.retired {
		t.Fatal("a failed agreement changed the address tables")
	}
	if r := mover.ctl.reports; len(r) != 1 || r[0].OK {
		t.Fatalf("reports %+v", r)
	}
}

// After the commit the peers already talk to the successor: if it does not take the final
// message, the old process cannot go back. It leaves, and says the rank is lost.
func TestHandOverFailureAfterTheCommitLosesTheRank(t *testing.T) {
	r := newRank(1, 2, 10, []Move{{Rank: 1, Seq: 1, To: "n1"}}, alone(1, make([]Outcome, 2)))
	r.pred.finalErr = errors.New("rewire: final: connection reset")
	leave, err := r.m.Run()
	if !leave || err == nil || !strings.Contains(err.Error(), "after the commit") {
		t.Fatalf("Run = %v, %v", leave, err)
	}
	if rep := r.ctl.reports[0]; rep.OK || !strings.Contains(rep.Error, "connection reset") {
		t.Fatalf("report %+v", rep)
	}
}

// A checkpoint due at the migration's boundary is taken and finished there, before the
// ranks move: the leaving process could not finish it later, and its successor never began
// it. A checkpoint still in flight from an earlier boundary is finished first.
func TestCheckpointDueAtTheMigrationBoundaryIsFinishedFirst(t *testing.T) {
	log := []reconf.Reconfiguration{migrateEntry(1, "n1", 1)}
	for _, tc := range []struct {
		pt   Point
		want Plan
	}{
		{Point{Size: 2, Known: 1, Scheduled: true, Checkpointing: true},
			Plan{Checkpoint: true, SettleCheckpoint: true}},
		{Point{Size: 2, Known: 1, Scheduled: true, Checkpointing: true, InFlight: true},
			Plan{SettleFirst: true, Checkpoint: true, SettleCheckpoint: true}},
		{Point{Size: 2, Known: 1, InFlight: true},
			Plan{SettleFirst: true}},
		{Point{Size: 2, Known: 1, Asked: true}, // a request, but the job does not checkpoint
			Plan{}},
	} {
		got, err := Decide(tc.pt, log)
		if err != nil {
			t.Fatal(err)
		}
		tc.want.Applied, tc.want.Entries, tc.want.Moves = 1, log, []Move{{1, 1, "n1", false}}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v:\n got %+v\nwant %+v", tc.pt, got, tc.want)
		}
	}
}

// Without a migration, a background checkpoint is finished at a later agreement point, and
// one in flight is finished only when the next is due.
func TestCheckpointWithoutMigration(t *testing.T) {
	for _, tc := range []struct {
		pt   Point
		log  []reconf.Reconfiguration
		want Plan
	}{
		{Point{Scheduled: true, Checkpointing: true}, nil, Plan{Checkpoint: true}},
		{Point{Scheduled: true, Checkpointing: true, SyncCheckpoints: true}, nil, Plan{Checkpoint: true, SettleCheckpoint: true}},
		{Point{InFlight: true}, nil, Plan{}},
		{Point{Asked: true, Checkpointing: true, InFlight: true}, nil, Plan{SettleFirst: true, Checkpoint: true}},
		{Point{Known: 1, Checkpointing: true}, []reconf.Reconfiguration{checkpointEntry(1)},
			Plan{Applied: 1, Entries: []reconf.Reconfiguration{checkpointEntry(1)}, Checkpoint: true}},
	} {
		tc.pt.Size = 2
		got, err := Decide(tc.pt, tc.log)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v:\n got %+v\nwant %+v", tc.pt, got, tc.want)
		}
	}
}

// The outcome records of the commit point decode to what was encoded, and a damaged record
// is an error, not a move.
func TestOutcomeRecords(t *testing.T) {
	in := []Outcome{{}, {Moved: true, Addr: "10.0.0.7:41234"}, {Moved: true, Addr: strings.Repeat("a", MaxAddr)}}
	var b []byte
	for _, o := range in {
		b = AppendOutcome(b, o)
	}
	out, err := ParseOutcomes(b)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("ParseOutcomes = %v, %v; want %v", out, err, in)
	}
	b[OutcomeSize] = 7
	if _, err := ParseOutcomes(b); err == nil {
		t.Fatal("a damaged record decoded")
	}
	if _, err := ParseOutcomes(b[:OutcomeSize+1]); err == nil {
		t.Fatal("a truncated record decoded")
	}
	if got := AppendOutcome(nil, Outcome{Moved: true, Addr: strings.Repeat("a", MaxAddr+1)}); got[0] != 0 {
		t.Fatal("an address too long for the record was sent as a move")
	}
}

// The verdict of the commit point, for each kind of rank: one whose move happened leaves,
// one whose move failed aborts and stays, the others redirect the moves that happened.
func TestVerdictOfTheCommitPoint(t *testing.T) {
	moves := []Move{{0, 1, "n2", false}, {2, 1, "n2", false}, {3, 2, "n1", false}}
	outcomes := []Outcome{{Moved: true, Addr: "n2:1"}, {}, {}, {Moved: true, Addr: "n1:3"}}
	for me, want := range []Verdict{
		{Redirects: []Redirect{{3, "n1:3"}}, Leave: true},
		{Redirects: []Redirect{{0, "n2:1"}, {3, "n1:3"}}},
		{Redirects: []Redirect{{0, "n2:1"}, {3, "n1:3"}}, Abort: true},
		{Redirects: []Redirect{{0, "n2:1"}}, Leave: true},
	} {
		if got := Judge(moves, outcomes, me); !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d: verdict %+v, want %+v", me, got, want)
		}
	}
}
