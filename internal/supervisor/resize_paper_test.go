package supervisor

// Tests of split and merge (Desell's thesis §2.1.2) from the supervisor's view, and of each
// way a resize fails before its commit, over a Machine with fake processes and a fake clock.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

func fourRanks(t *testing.T) *fakeJob {
	j := newFakeJob(t, Config{Migrations: true}, "n1", "n1", "n2", "n2")
	j.launch()
	return j
}

func (j *fakeJob) resize(np int, on ...job.NodeSlots) (string, []Action) {
	j.t.Helper()
	acts, to := j.control(job.ControlRequest{Kind: job.ControlResize, NP: np, On: on, Reason: "test"})
	return to, acts
}

// resizeHello is new rank r (old rank old, -1 for a joiner) of request seq at iteration 10.
func (j *fakeJob) resizeHello(seq uint64, r, old int) []Action {
	j.t.Helper()
	return j.step(ResizeHello{Reply: fmt.Sprintf("rh.%d", r), Data: enc(j.t, job.ResizeHello{
		Seq: seq, Rank: r, OldRank: old, Addr: fmt.Sprintf("new:%d", r), PID: 5000 + r, Iteration: 10})})
}

func (j *fakeJob) resizeTable(r int) (job.Table, bool) {
	got := j.sent[fmt.Sprintf("rh.%d", r)]
	if len(got) == 0 {
		return job.Table{}, false
	}
	return got[len(got)-1].(job.Table), true
}

func (j *fakeJob) resizeReport(rep job.ResizeReport) {
	j.t.Helper()
	j.step(ResizeReport{Data: enc(j.t, rep)})
}

// "Split ... new processes spawned on named nodes": a grow is published with the new size
// and the nodes, the joiners start at the first hello of the boundary, everybody gets the
// new world's table once all said hello, and the commit gives the job its new size.
func TestSplitStartsJoinersAtTheBoundaryAndCommitsTheNewSize(t *testing.T) {
	j := fourRanks(t)
	to, acts := j.resize(6, job.NodeSlots{Node: "n3", Slots: 2})
	checks := only[CheckNode](acts)
	if len(checks) != 1 || checks[0].Node != "n3" {
		t.Fatalf("actions %+v, want one check of n3", acts)
	}
	j.step(NodeChecked{Check: checks[0].Check})
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	e := j.published()[0].Entries[0]
	if e.Kind != reconf.Resize || e.NP != 6 || e.OldNP != 4 || !slices.Equal(e.Nodes, []string{"n3", "n3"}) || e.State != reconf.Proposed {
		t.Fatalf("entry %+v", e)
	}
	j.resizeHello(1, 0, 0)
	if len(j.pend) != 2 {
		t.Fatalf("%d starts after the first hello, want 2 joiners", len(j.pend))
	}
	for i := range 2 {
		s := j.takeStart()
		if s.Rank != 4+i || s.Node != "n3" || s.Join != 1 || s.Size != 6 {
			t.Errorf("start %+v", s)
		}
		j.step(Started{Proc: s.Proc, PID: 2000 + i, Node: "n3"})
	}
	for r := 1; r < 4; r++ {
		j.resizeHello(1, r, r)
	}
	j.resizeHello(1, 4, -1)
	if _, ok := j.resizeTable(0); ok {
		t.Fatal("table sent before the whole new world said hello")
	}
	j.resizeHello(1, 5, -1)
	for r := range 6 {
		tab, ok := j.resizeTable(r)
		if !ok || tab.Error != "" || len(tab.Addrs) != 6 || tab.Addrs[5] != "new:5" {
			t.Fatalf("rank %d table %+v", r, tab)
		}
	}
	if st := j.m.Log().Entries[0].State; st != reconf.Prepared {
		t.Errorf("state %v after the tables, want prepared", st)
	}
	j.resizeReport(job.ResizeReport{Seq: 1, OK: true, Iteration: 10, Pause: 120 * time.Millisecond, Bytes: 1 << 20})
	info := j.m.Info()
	if info.Size != 6 || len(info.Ranks) != 6 || info.Ranks[5].Node != "n3" || info.Ranks[5].PID != 2001 {
		t.Errorf("info %+v", info)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Committed || e.Pause != 120*time.Millisecond || e.Bytes != 1<<20 {
		t.Errorf("entry %+v", e)
	}
	j.wantLog(`resized 4 -> 6 ranks at iteration 10 in 120 ms, 1.0 MiB moved \(test\)`)
	// The joiners are ranks now: a failure of one is the job's.
	j.exit(j.m.ranks[5].proc, 3)
	j.advance(time.Second)
	j.wantFailure(RankFailed, 5, 3)
}

// "Merge: ranks hand their data over and leave": a shrink names the highest ranks as
// leavers; only the survivors say hello; after the commit the survivors are the job and
// the leavers' clean exits are no failure.
func TestMergeLetsTheHighestRanksLeaveAndTheirExitIsNoFailure(t *testing.T) {
	j := fourRanks(t)
	to, _ := j.resize(3)
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	e := j.published()[0].Entries[0]
	if !slices.Equal(e.Ranks, []int{3}) || e.NP != 3 {
		t.Fatalf("entry %+v", e)
	}
	for r := range 3 {
		j.resizeHello(1, r, r)
	}
	if len(j.pend) != 0 {
		t.Fatal("a shrink started processes")
	}
	if tab, ok := j.resizeTable(2); !ok || len(tab.Addrs) != 3 {
		t.Fatalf("table %+v", tab)
	}
	j.resizeReport(job.ResizeReport{Seq: 1, OK: true, Iteration: 10})
	j.exit(j.proc[3], 0)
	if f := j.m.Failure(); f != nil || j.m.Info().Size != 3 {
		t.Fatalf("failure %+v, size %d", f, j.m.Info().Size)
	}
	j.wantLog(`resized 4 -> 3 ranks at iteration 10 in 0 ms, 0 B moved \(test\)`)
	for _, p := range j.proc[:3] {
		j.exit(p, 0)
	}
	if !j.m.Done() || j.m.Failure() != nil {
		t.Errorf("done %v failure %+v", j.m.Done(), j.m.Failure())
	}
}

// Merge off named nodes: "--on n1" makes the ranks on n1 leave and renumbers the others.
func TestMergeOffANamedNodeRenumbersTheSurvivors(t *testing.T) {
	j := fourRanks(t)
	to, _ := j.resize(2, job.NodeSlots{Node: "n1"})
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	if e := j.published()[0].Entries[0]; !slices.Equal(e.Ranks, []int{0, 1}) {
		t.Fatalf("leavers %v, want 0 and 1", e.Ranks)
	}
	j.resizeHello(1, 0, 2)
	j.resizeHello(1, 1, 3)
	j.resizeReport(job.ResizeReport{Seq: 1, OK: true, Iteration: 10})
	info := j.m.Info()
	if len(info.Ranks) != 2 || info.Ranks[0].PID != 1002 || info.Ranks[1].PID != 1003 {
		t.Fatalf("ranks %+v", info.Ranks)
	}
	j.exit(j.proc[0], 0)
	j.exit(j.proc[2], 7) // now rank 0
	j.advance(time.Second)
	j.wantFailure(RankFailed, 0, 7)
}

// "Bad requests (M < 1, more ranks than free slots, unknown nodes ...) are refused with a
// clear reason", and nothing is published.
func TestBadResizeRequestsAreRefusedWithAReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		np    int
		on    []job.NodeSlots
		check error
		want  string
	}{
		{"zero ranks", 0, nil, nil, "0 ranks, want at least 1"},
		{"same size", 4, nil, nil, "already has 4 ranks"},
		{"too few named slots", 7, []job.NodeSlots{{Node: "n3", Slots: 2}}, nil, "3 new ranks but only 2 slots named"},
		{"unknown node", 5, []job.NodeSlots{{Node: "n9"}}, errors.New("node n9 is not known"), "node n9 is not known"},
		{"no rank on the node", 3, []job.NodeSlots{{Node: "n7"}}, nil, "no rank of the job runs on n7"},
		{"wrong count on the node", 3, []job.NodeSlots{{Node: "n1"}}, nil, "1 ranks must leave but n1 run 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := fourRanks(t)
			to, acts := j.resize(tc.np, tc.on...)
			for _, c := range only[CheckNode](acts) {
				j.step(NodeChecked{Check: c.Check, Err: tc.check})
			}
			rep := j.lastReply(to)
			if rep.OK || !strings.Contains(rep.Error, tc.want) {
				t.Errorf("reply %+v, want an error with %q", rep, tc.want)
			}
			if len(j.published()) != 0 {
				t.Error("a refused request was published")
			}
		})
	}
	j := newFakeJob(t, Config{}, "", "")
	j.launch()
	to, _ := j.resize(3, job.NodeSlots{Node: "n3"})
	if rep := j.lastReply(to); !strings.Contains(rep.Error, "runs its ranks locally") {
		t.Errorf("local job with nodes: %+v", rep)
	}
	j.step(NodeGone{Node: "n3", Reason: "node n3 shut down"})
	j2 := fourRanks(t)
	j2.step(NodeGone{Node: "n3", Reason: "node n3 shut down"})
	to, _ = j2.resize(5, job.NodeSlots{Node: "n3"})
	if rep := j2.lastReply(to); !strings.Contains(rep.Error, "node n3 shut down") {
		t.Errorf("gone node: %+v", rep)
	}
}

// "A new rank that does not start ... the resize aborts, the job continues at its old
// size": every hello gets the reason instead of a table, also the ones that come later.
func TestJoinerThatDoesNotStartAbortsTheResize(t *testing.T) {
	j := fourRanks(t)
	j.resize(5)
	j.resizeHello(1, 0, 0)
	s := j.takeStart()
	if s.Node != "" || s.Join != 1 {
		t.Fatalf("start %+v", s)
	}
	j.step(Started{Proc: s.Proc, Err: errors.New("no free slot")})
	if tab, _ := j.resizeTable(0); !strings.Contains(tab.Error, "cannot start rank 4 on local: no free slot") {
		t.Errorf("table %+v", tab)
	}
	j.resizeHello(1, 1, 1)
	if tab, _ := j.resizeTable(1); !strings.Contains(tab.Error, "aborted") {
		t.Errorf("late hello got %+v", tab)
	}
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted || !strings.Contains(e.Error, "no free slot") {
		t.Errorf("entry %+v", e)
	}
	j.wantLog(`resize 4 -> 5 aborted: cannot start rank 4 on local: no free slot; the job continues with 4 ranks`)
	j.resizeReport(job.ResizeReport{Seq: 1, Error: "mpirun refused", Iteration: 10})
	if j.m.Info().Size != 4 || j.m.Failure() != nil {
		t.Errorf("size %d failure %+v", j.m.Info().Size, j.m.Failure())
	}
	// A new resize may follow.
	if to, _ := j.resize(3); !j.lastReply(to).OK {
		t.Errorf("second resize refused: %+v", j.lastReply(to))
	}
}

// "A process that dies mid-redistribution before the commit": a joiner that ends after
// the table is logged; the ranks' abort report keeps the old size and kills the joiners.
func TestJoinerDeathBeforeTheCommitAbortsTheResize(t *testing.T) {
	j := fourRanks(t)
	j.resize(6)
	j.resizeHello(1, 0, 0)
	var joiners []ProcID
	for i := range 2 {
		s := j.takeStart()
		j.step(Started{Proc: s.Proc, PID: 3000 + i})
		joiners = append(joiners, s.Proc)
	}
	// One joiner dies before the table: abort at once.
	j.exit(joiners[0], 2)
	if tab, _ := j.resizeTable(0); !strings.Contains(tab.Error, "new rank 4 on local (pid 3000) ended: exited with status 2") {
		t.Errorf("table %+v", tab)
	}
	if acts := j.resizeReportActs(job.ResizeReport{Seq: 1, Error: "resize refused by mpirun", Iteration: 10}); len(signalled(acts, syscall.SIGKILL)) != 0 {
		t.Errorf("the other joiner was killed twice: %+v", acts)
	}
	if j.m.Failure() != nil || j.m.Info().Size != 4 {
		t.Errorf("failure %+v", j.m.Failure())
	}

	// Data moving: the ranks report the abort; the joiners are killed, the size stays.
	j = fourRanks(t)
	j.resize(5)
	for r := range 4 {
		j.resizeHello(1, r, r)
	}
	s := j.takeStart()
	j.step(Started{Proc: s.Proc, PID: 3100})
	j.resizeHello(1, 4, -1)
	acts := j.resizeReportActs(job.ResizeReport{Seq: 1, Error: "rank 4 lost during the redistribution", Iteration: 10})
	if k := signalled(acts, syscall.SIGKILL); len(k) != 1 || k[0] != s.Proc {
		t.Errorf("kills %v, want the joiner", k)
	}
	j.exit(s.Proc, 137)
	if j.m.Failure() != nil || j.m.Info().Size != 4 {
		t.Errorf("failure %+v size %d", j.m.Failure(), j.m.Info().Size)
	}
	j.wantLog(`resize 4 -> 5 ranks aborted at iteration 10: rank 4 lost during the redistribution; the job continues with 4 ranks \(test\)`)
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted {
		t.Errorf("entry %+v", e)
	}
}

func (j *fakeJob) resizeReportActs(rep job.ResizeReport) []Action {
	j.t.Helper()
	return j.step(ResizeReport{Data: enc(j.t, rep)})
}

// A second resize is refused while one is under way.
func TestOneResizeAtATime(t *testing.T) {
	j := fourRanks(t)
	j.resize(5)
	to, _ := j.resize(3)
	if rep := j.lastReply(to); !strings.Contains(rep.Error, "already being resized (request 1)") {
		t.Errorf("reply %+v", rep)
	}
}

// "A job without distributed data" is refused once rank 0 said so.
func TestResizeOfAJobWithoutDistributedDataIsRefused(t *testing.T) {
	j := fourRanks(t)
	j.step(Malleable{Data: enc(t, job.Malleable{Distributed: false})})
	to, _ := j.resize(6)
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "has no distributed data to redistribute") {
		t.Errorf("reply %+v", rep)
	}
	j.step(Malleable{Data: enc(t, job.Malleable{Distributed: true})})
	if to, _ := j.resize(6); !j.lastReply(to).OK {
		t.Errorf("refused with distributed data: %+v", j.lastReply(to))
	}
}

// A joiner that ends after the new world's table went out leaves its members waiting in
// vain: they are told (job.ResizeGone), and the ranks' report aborts the resize.
func TestJoinerDeathAfterTheTableIsPublishedToTheNewWorld(t *testing.T) {
	j := fourRanks(t)
	j.resize(5)
	for r := range 4 {
		j.resizeHello(1, r, r)
	}
	s := j.takeStart()
	j.step(Started{Proc: s.Proc, PID: 3200})
	j.resizeHello(1, 4, -1)
	j.exit(s.Proc, 3)
	gone := j.sent[job.ResizeGoneSubject("j")]
	if len(gone) != 1 || gone[0].(job.ResizeGone).Seq != 1 || !strings.Contains(gone[0].(job.ResizeGone).Reason, "exited with status 3") {
		t.Fatalf("published %+v, want one ResizeGone for request 1", gone)
	}
	if j.m.Failure() != nil {
		t.Fatalf("failure %+v", j.m.Failure())
	}
	j.resizeReport(job.ResizeReport{Seq: 1, Error: "rank 4 gone", Iteration: 10})
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted || j.m.Info().Size != 4 {
		t.Errorf("entry %+v size %d", e, j.m.Info().Size)
	}
}

// A resize and a migration never share a boundary: the successor of a moving rank would not
// take part in the resize. Each is refused while the other is under way.
func TestResizeAndMigrationExcludeEachOther(t *testing.T) {
	j := fourRanks(t)
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Fatalf("migration refused: %+v", rep)
	}
	to, _ := j.resize(6)
	if rep := j.lastReply(to); !strings.Contains(rep.Error, "rank 1 of job j is migrating") {
		t.Errorf("resize during a migration: %+v", rep)
	}
	j2 := fourRanks(t)
	j2.resize(3)
	if rep := j2.migrate("n3", nil, 1); !strings.Contains(rep.Error, "is being resized (request 1)") {
		t.Errorf("migration during a resize: %+v", rep)
	}
}

// growToSix takes j to a grow to 6 ranks whose new world has its table: the joiners run.
func (j *fakeJob) growToSix() []ProcID {
	j.t.Helper()
	j.resize(6)
	var joiners []ProcID
	for r := range 4 {
		j.resizeHello(1, r, r)
		if r == 0 {
			for i := range 2 {
				s := j.takeStart()
				j.step(Started{Proc: s.Proc, PID: 3000 + i})
				joiners = append(joiners, s.Proc)
			}
		}
	}
	j.resizeHello(1, 4, -1)
	j.resizeHello(1, 5, -1)
	if tab, ok := j.resizeTable(5); !ok || tab.Error != "" {
		j.t.Fatalf("table %+v", tab)
	}
	return joiners
}

// "A process that dies mid-redistribution before the commit: the resize aborts": an old
// rank that fails while the new world moves the data aborts the resize, naming it; the new
// world's members are told, the joiners killed, and the failure is the job's as any other
// (here without recovery: the job fails with the rank's status). A late report of the
// commit changes nothing.
func TestOldRankDeathBeforeTheCommitAbortsTheResizeThenFailsTheJob(t *testing.T) {
	j := fourRanks(t)
	joiners := j.growToSix()
	acts := j.exit(j.proc[2], 9)
	why := "rank 2 (pid 1002 on n2) ended: exited with status 9"
	gone := j.sent[job.ResizeGoneSubject("j")]
	if len(gone) != 1 || !strings.Contains(gone[0].(job.ResizeGone).Reason, why) {
		t.Errorf("published to the new world %+v, want %q", gone, why)
	}
	if k := signalled(acts, syscall.SIGKILL); !slices.Equal(k, joiners) {
		t.Errorf("killed %v, want the joiners %v", k, joiners)
	}
	for _, p := range joiners {
		j.exit(p, 137)
	}
	j.resizeReport(job.ResizeReport{Seq: 1, OK: true, Iteration: 10})
	j.advance(time.Second)
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted || !strings.Contains(e.Error, why) {
		t.Errorf("entry %+v, want aborted naming %q", e, why)
	}
	j.wantLog(`resize 4 -> 6 ranks aborted: ` + regexp.QuoteMeta(why))
	j.wantFailure(RankFailed, 2, 9)
	if n := j.m.Info().Size; n != 4 {
		t.Errorf("size %d after the aborted resize, want 4", n)
	}
}

// The exit reaped first need not be the cause: a rank that lost its peer may exit before
// the peer's death is seen. The resize's abort names the rank the failure window blames
// (the one a lost-peer report named), as the job's failure does, not the first exit.
func TestAResizeLostToAFailureIsAbortedNamingTheRankTheFailureWindowBlames(t *testing.T) {
	j := fourRanks(t)
	j.growToSix()
	j.step(Lost{Data: enc(t, job.Lost{Observer: 1, Rank: 2, Reason: "connection reset"})})
	j.exit(j.proc[1], 1)
	j.now = j.now.Add(time.Millisecond)
	j.step(Exited{Proc: j.proc[2], Status: 137, Desc: "was killed by signal killed", At: j.now})
	j.advance(time.Second)
	why := "rank 2 (pid 1002 on n2) ended: was killed by signal killed"
	if e := j.m.Log().Entries[0]; e.State != reconf.Aborted || e.Error != why {
		t.Errorf("entry %+v, want aborted naming %q", e, why)
	}
	j.wantLog(`resize 4 -> 6 ranks aborted: ` + regexp.QuoteMeta(why))
	j.wantFailure(RankFailed, 2, 137)
}

// The same loss in a job that recovers: the resize is aborted first, then the job restarts
// from its checkpoint at its old size, and may be resized again.
func TestOldRankDeathBeforeTheCommitAbortsTheResizeThenRecovers(t *testing.T) {
	j := recoveringJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 2, "n2": 4}}, "n1", "n1", "n2", "n2")
	j.committed(1, 5)
	// Two slots left on n2: the joiners go there.
	_, acts := j.resize(6)
	for _, c := range only[CheckNode](acts) {
		j.step(NodeChecked{Check: c.Check})
	}
	for r := range 4 {
		j.resizeHello(1, r, r)
	}
	var joiners []ProcID
	for i := range 2 {
		s := j.takeStart()
		if s.Node != "n2" {
			t.Fatalf("joiner %+v, want it in n2's free slots", s)
		}
		j.step(Started{Proc: s.Proc, PID: 3000 + i, Node: "n2"})
		joiners = append(joiners, s.Proc)
	}
	j.killRank(1)
	if tab, _ := j.resizeTable(0); !strings.Contains(tab.Error, "aborted: rank 1") {
		t.Errorf("pending hello answered %+v, want the abort", tab)
	}
	j.advance(time.Second)
	j.wantLog(`resize 4 -> 6 ranks aborted: rank 1 \(pid 1001 on n1\) ended: was killed by signal killed`)
	for _, p := range joiners {
		j.exit(p, 137)
	}
	j.wantLog(`rank 1 .*killed; recovering \(1 of \d+\).*`)
	j.restarted("n1", "n1", "n2", "n2")
	if f := j.m.Failure(); f != nil || j.m.Info().Size != 4 {
		t.Fatalf("failure %+v, size %d", f, j.m.Info().Size)
	}
	if to, _ := j.resize(3); !j.lastReply(to).OK {
		t.Errorf("resize after the recovery refused: %+v", j.lastReply(to))
	}
}

// "More ranks than free slots" is refused at once: a grow without named nodes takes the
// job's free slots (its nodes' slots less its ranks there), or is refused listing them.
func TestGrowWithoutNodesTakesTheJobsFreeSlotsOrIsRefusedAtOnce(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 3, "n2": 2}}, "n1", "n1", "n2", "n2")
	j.launch()
	to, _ := j.resize(7)
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "3 new ranks but the job's nodes have 1 free slots (n1:1,n2:0); name nodes with --on") {
		t.Errorf("reply %+v, want a refusal listing the free slots", rep)
	}
	if len(j.published()) != 0 {
		t.Error("a refused request was published")
	}
	j.step(NodeGone{Node: "n1", Reason: "node n1 shut down"})
	to, _ = j.resize(5)
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "(n1:0,n2:0)") {
		t.Errorf("reply %+v, want no free slot on a gone node", rep)
	}
	j = newFakeJob(t, Config{Migrations: true, Slots: map[string]int{"n1": 3, "n2": 2}}, "n1", "n1", "n2", "n2")
	j.launch()
	to, acts := j.resize(5)
	checks := only[CheckNode](acts)
	if len(checks) != 1 || checks[0].Node != "n1" {
		t.Fatalf("actions %+v, want a check of n1", acts)
	}
	j.step(NodeChecked{Check: checks[0].Check})
	if rep := j.lastReply(to); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	if e := j.published()[0].Entries[0]; !slices.Equal(e.Nodes, []string{"n1"}) {
		t.Errorf("entry %+v, want the new rank on n1", e)
	}
}

// "Uneven blocks by weight" and "a way to re-weight blocks without changing the rank
// count": the weights of a request go into the log entry; at the job's own size they make
// a rebalance in place, which commits without a new world (no hello, no joiner).
func TestWeightsGoToTheRanksAndTheSameSizeRebalancesInPlace(t *testing.T) {
	j := fourRanks(t)
	acts, to := j.control(job.ControlRequest{Kind: job.ControlResize, NP: 4, Weights: []float64{1, 3, 1, 1}, Reason: "test"})
	if rep := j.lastReply(to); !rep.OK || !strings.Contains(rep.Message, "rebalances its 4 ranks") {
		t.Fatalf("reply %+v", rep)
	}
	if len(only[CheckNode](acts)) != 0 || len(j.pend) != 0 {
		t.Errorf("a rebalance checked nodes or started processes: %+v", acts)
	}
	e := j.published()[0].Entries[0]
	if e.NP != 4 || e.OldNP != 4 || !slices.Equal(e.Weights, []float64{1, 3, 1, 1}) || len(e.Ranks) != 0 {
		t.Fatalf("entry %+v", e)
	}
	j.wantLog(`rebalance of 4 ranks \(weights 1,3,1,1\) requested \(request 1: test\)`)
	j.resizeReport(job.ResizeReport{Seq: 1, OK: true, Iteration: 10, Pause: 5 * time.Millisecond, Bytes: 1 << 20})
	j.wantLog(`rebalanced 4 ranks at iteration 10 in 5 ms, 1.0 MiB moved \(test\)`)
	if info := j.m.Info(); info.Size != 4 || info.Reconfigurations[0].State != reconf.Committed || info.Ranks[3].PID != 1003 {
		t.Errorf("info %+v", info)
	}
	for _, tc := range []struct {
		c    job.ControlRequest
		want string
	}{
		{job.ControlRequest{Kind: job.ControlResize, NP: 4}, "already has 4 ranks (give --weights to rebalance them)"},
		{job.ControlRequest{Kind: job.ControlResize, NP: 4, Weights: []float64{1, 1, 1, 1}, On: []job.NodeSlots{{Node: "n1"}}}, "a rebalance keeps its 4 ranks where they run"},
	} {
		if _, to := j.control(tc.c); !strings.Contains(j.lastReply(to).Error, tc.want) {
			t.Errorf("request %+v: reply %+v, want %q", tc.c, j.lastReply(to), tc.want)
		}
	}
	_, to = j.control(job.ControlRequest{Kind: job.ControlResize, NP: 5, Weights: []float64{1, 1, 1, 1, 4}})
	if !j.lastReply(to).OK || !slices.Equal(j.m.Log().Entries[1].Weights, []float64{1, 1, 1, 1, 4}) {
		t.Errorf("weighted grow: %+v, entry %+v", j.lastReply(to), j.m.Log().Entries[1])
	}
}
