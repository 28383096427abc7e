package supervisor

// Tests of the rule that an accepted reconfiguration is never left hanging: it happens at
// the next agreement point or it is aborted, with a logged reason, within a bounded time,
// and the job's history says which (what pcmd status and the requester read). Found in a
// grid experiment run where "rank 4 moves to b3 at the next agreement point" was accepted
// 400 iterations before the job ended and neither happened nor was aborted.

import (
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/reconf"
)

// A rank that missed the one publication of the log (core NATS delivers at most once; a
// rank reconnecting after an outage loses what was published meanwhile) never joins the
// agreement on the entry, and the ranks act only on entries every one of them holds. The
// Machine therefore publishes the log again while an accepted migration waits for its
// rank, and stops once the rank asked for its successor.
func TestAcceptedMigrationIsRepublishedUntilItsRankActsOnIt(t *testing.T) {
	j := migratingJob(t)
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	at, ok := j.m.NextDeadline()
	if !ok || !at.After(j.now) || at.Sub(j.now) > RepublishEvery {
		t.Fatalf("next deadline %v (%v), want within %v of acceptance", at.Sub(j.now), ok, RepublishEvery)
	}
	j.advance(RepublishEvery)
	logs := j.published()
	if len(logs) != 2 {
		t.Fatalf("%d publications after %v, want the log published again", len(logs), RepublishEvery)
	}
	if e := logs[1].Entries; len(e) != 1 || e[0].Seq != 1 || e[0].State != reconf.Proposed {
		t.Errorf("republished log %+v, want the proposed entry", e)
	}
	j.askSuccessor(1, 1, 40)
	j.advance(3 * RepublishEvery)
	if n := len(j.published()); n != 2 {
		t.Errorf("%d publications, want none once the rank asked for its successor", n)
	}
}

// If the ranks still do not reach an agreement point on an accepted migration within the
// migration timeout, the Machine aborts it with the reason, logs it like any aborted
// migration, and refuses the successor should the rank ask for it later after all.
func TestAcceptedMigrationNotBegunInBoundedTimeIsAbortedWithAReason(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true, MigrationTimeout: 10 * time.Second}, "n1", "n2", "n1")
	j.launch()
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	for range 4 {
		j.advance(2 * time.Second)
	}
	if h := j.m.Info().Migrations[0]; h.State != reconf.Proposed {
		t.Fatalf("aborted after 8s of 10s: %+v", h)
	}
	at, ok := j.m.NextDeadline()
	if !ok || at.After(j.now.Add(2*time.Second)) {
		t.Fatalf("next deadline %v, %v: the timeout must wake the Machine", at, ok)
	}
	j.advance(2 * time.Second)
	info := j.m.Info()
	if h := info.Migrations[0]; h.State != reconf.Aborted || h.Error == "" {
		t.Errorf("history %+v, want aborted with a reason", h)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Aborted || e.Error == "" {
		t.Errorf("entry %+v, want aborted with a reason", e)
	}
	j.wantLog(`migration of rank 1 to n3 aborted, it continues on n2: the ranks reached no agreement point on it within 10s \(request 1\)`)
	logs := j.published()
	if last := logs[len(logs)-1]; last.Entries[0].State != reconf.Aborted {
		t.Errorf("last published log %+v, want the entry aborted", last.Entries)
	}
	n := len(logs)
	j.advance(5 * RepublishEvery)
	if len(j.published()) != n {
		t.Error("the log is still republished after the abort")
	}
	j.askSuccessor(1, 1, 400)
	if rep := j.successorReply(1, 1); rep.Error == "" {
		t.Errorf("late successor request granted: %+v", rep)
	}
	if len(j.pend) != 0 {
		t.Errorf("successor started after the abort: %+v", j.pend)
	}
	// The rank is free to move again.
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Errorf("new request refused: %+v", rep)
	}
}

// A rank that finishes (its process exits cleanly, the job is ending) before the agreement
// point of its accepted migration does not move; mpirun says so instead of leaving the
// request pending in silence, and the job did not fail.
func TestMigrationPendingWhenItsRankFinishesIsReportedNotCarriedOut(t *testing.T) {
	j := migratingJob(t)
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	for _, p := range j.proc {
		j.exit(p, 0)
	}
	if !j.m.Done() || j.m.Failure() != nil {
		t.Fatalf("done %v, failure %+v: want a job that finished", j.m.Done(), j.m.Failure())
	}
	j.wantLog(`migration of rank 1 to n3 not carried out: rank 1 finished first \(request 1\)`)
	info := j.m.Info()
	if h := info.Migrations[0]; h.State != reconf.Aborted || h.Error != "rank 1 finished first" {
		t.Errorf("history %+v, want aborted: rank 1 finished first", h)
	}
	if e := info.Reconfigurations[0]; e.State != reconf.Aborted {
		t.Errorf("entry %+v, want aborted", e)
	}
	if _, ok := j.m.NextDeadline(); ok {
		t.Error("a finished job still has a deadline")
	}
}

// A job stopped (here by a signal) while a migration waits for its agreement point ends the
// migration too, with the reason, and stops publishing the log to ranks that are leaving.
func TestMigrationPendingWhenTheJobStopsIsReportedNotCarriedOut(t *testing.T) {
	j := migratingJob(t)
	if rep := j.migrate("n3", nil, 1); !rep.OK {
		t.Fatalf("refused: %+v", rep)
	}
	j.step(Signal{Sig: syscall.SIGTERM})
	n := len(j.published())
	j.advance(3 * RepublishEvery)
	if len(j.published()) != n {
		t.Error("the log is republished to a stopping job")
	}
	for _, p := range j.proc {
		j.exit(p, 143)
	}
	j.wantLog(`migration of rank 1 to n3 not carried out: rank 1's process ended first: exited with status 143 \(request 1\)`)
	if h := j.m.Info().Migrations[0]; h.State != reconf.Aborted {
		t.Errorf("history %+v, want aborted", h)
	}
	j.advance(2 * DefaultMigrationTimeout)
	j.noLog(`no agreement point`)
}
