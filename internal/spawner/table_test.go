package spawner

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// The admission table's decisions, each stated as pcmd's documentation states it; no
// process, socket or clock: time is passed in.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func start(t *testing.T, tb *Table, k RankKey, pid int, now time.Time, ttl time.Duration) (watch bool) {
	t.Helper()
	if code, why := tb.Admit(k); code != "" {
		t.Fatalf("Admit(%v) refused: %s %s", k, code, why)
	}
	watch, stop := tb.Started(k, pid, now, ttl)
	if stop != "" {
		t.Fatalf("Started(%v) = stop %q", k, stop)
	}
	return watch
}

// "At most --slots ranks at once"; a slot is held from admission, while the rank starts.
func TestANodeRunsAtMostItsSlots(t *testing.T) {
	tb := NewTable("n1", 2, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, time.Second)
	if code, _ := tb.Admit(RankKey{"j", 1}); code != "" {
		t.Fatalf("second slot refused: %s", code)
	}
	code, why := tb.Admit(RankKey{"j", 2})
	if code != job.RefuseNoSlot || why != "has no free slot for rank 2 of job j (2 of 2 in use)" {
		t.Errorf("third rank: %q %q", code, why)
	}
	if tb.Used() != 2 || len(tb.Ranks()) != 1 {
		t.Errorf("used %d, started %v; want 2 slots used, 1 rank started", tb.Used(), tb.Ranks())
	}
	tb.Abort(RankKey{"j", 1}) // its process could not be started
	if code, _ := tb.Admit(RankKey{"j", 2}); code != "" {
		t.Errorf("slot of an aborted start not freed: %s", code)
	}
}

// "One process per rank of a job": a second request for a running rank is refused.
func TestARankOfAJobRunsOnce(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	if code, why := tb.Admit(RankKey{"j", 0}); code != job.RefuseDuplicate || why != "already runs rank 0 of job j (pid 100)" {
		t.Errorf("duplicate: %q %q", code, why)
	}
	start(t, tb, RankKey{"k", 0}, 101, t0, 0) // the same rank of another job is another rank
	if _, unwatch := tb.Exited(RankKey{"j", 0}); !unwatch {
		t.Error("the last rank of job j left its lease behind")
	}
	start(t, tb, RankKey{"j", 0}, 102, t0, 0) // once it exited, it may start again
}

// "Every spawned rank needs a lease and is reaped without one" (issue 14): a request that
// names no lease gets the node's longest, and its ranks are stopped when no keepalive came
// for that long.
func TestEveryRankHoldsALeaseAndIsReapedWithoutKeepalives(t *testing.T) {
	tb := NewTable("n1", 4, 10*time.Second)
	if watch := start(t, tb, RankKey{"j", 0}, 100, t0, 0); !watch {
		t.Fatal("a rank started without a lease to watch")
	}
	if ex := tb.Expire(t0.Add(10 * time.Second)); len(ex) != 0 {
		t.Fatalf("expired at its TTL: %+v", ex)
	}
	ex := tb.Expire(t0.Add(10*time.Second + time.Millisecond))
	want := []Expiry{{Job: "j", Silence: 10*time.Second + time.Millisecond,
		Reason: "no keepalive from the launcher of job j for 10s", Ranks: []RankKey{{"j", 0}}}}
	if !reflect.DeepEqual(ex, want) {
		t.Fatalf("Expire = %+v, want %+v", ex, want)
	}
	if again := tb.Expire(t0.Add(time.Minute)); len(again) != 0 {
		t.Errorf("a lease expired twice: %+v", again)
	}
	if reason, unwatch := tb.Exited(RankKey{"j", 0}); reason != want[0].Reason || !unwatch {
		t.Errorf("Exited = %q, %v; want the expiry's reason and the lease gone", reason, unwatch)
	}
}

// A request's lease is capped to the node's longest: a launcher cannot hold slots past it.
func TestARequestedLeaseIsCappedToTheNodes(t *testing.T) {
	tb := NewTable("n1", 4, 10*time.Second)
	start(t, tb, RankKey{"j", 0}, 100, t0, time.Hour)
	if ex := tb.Expire(t0.Add(11 * time.Second)); len(ex) != 1 {
		t.Errorf("an hour-long lease outlived the node's 10s: %+v", ex)
	}
}

// Keepalives renew the lease; the lease lasts as long as the longest its ranks asked for.
func TestKeepalivesRenewTheLease(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, time.Second)
	if watch := start(t, tb, RankKey{"j", 1}, 101, t0, 3*time.Second); watch {
		t.Error("a second rank of the job opened a second lease")
	}
	tb.KeepAlive("j", t0.Add(2*time.Second))
	tb.KeepAlive("j", t0.Add(time.Second)) // late and out of order: ignored
	tb.KeepAlive("other", t0.Add(time.Hour))
	if ex := tb.Expire(t0.Add(5 * time.Second)); len(ex) != 0 {
		t.Errorf("expired 3s after a keepalive with a 3s lease: %+v", ex)
	}
	ex := tb.Expire(t0.Add(5*time.Second + time.Millisecond))
	if len(ex) != 1 || !reflect.DeepEqual(ex[0].Ranks, []RankKey{{"j", 0}, {"j", 1}}) {
		t.Errorf("Expire = %+v, want both ranks of j", ex)
	}
	// The lease ends with the job's last rank, not before.
	if _, unwatch := tb.Exited(RankKey{"j", 1}); unwatch {
		t.Error("lease ended with ranks left")
	}
	if _, unwatch := tb.Exited(RankKey{"j", 0}); !unwatch {
		t.Error("lease outlived the job's ranks")
	}
}

// mpirun --restart keeps the job id: a rank started while the silent launcher's ranks are
// still being stopped gets a fresh lease, and is reaped in turn if its launcher is silent.
func TestARestartedJobGetsAFreshLease(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, time.Second)
	if ex := tb.Expire(t0.Add(2 * time.Second)); len(ex) != 1 {
		t.Fatalf("Expire = %+v", ex)
	}
	start(t, tb, RankKey{"j", 1}, 101, t0.Add(3*time.Second), time.Second)
	if ex := tb.Expire(t0.Add(4 * time.Second)); len(ex) != 0 {
		t.Fatalf("the new launcher's lease expired early: %+v", ex)
	}
	ex := tb.Expire(t0.Add(5 * time.Second))
	if len(ex) != 1 || !reflect.DeepEqual(ex[0].Ranks, []RankKey{{"j", 0}, {"j", 1}}) {
		t.Errorf("Expire = %+v, want the new rank reaped too", ex)
	}
	if r := tb.Reason(RankKey{"j", 0}); !strings.Contains(r, "for 2s") {
		t.Errorf("the first rank's reason %q was overwritten", r)
	}
}

// "When pcmd is stopped it stops its ranks": the started ones at once, one that is still
// starting as soon as it started; no rank is admitted any more.
func TestShutdownStopsEveryRankAndAdmitsNone(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 1}, 101, t0, 0)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	if code, _ := tb.Admit(RankKey{"k", 0}); code != "" { // starting
		t.Fatal(code)
	}
	if got := tb.Shutdown(); !reflect.DeepEqual(got, []RankKey{{"j", 0}, {"j", 1}}) {
		t.Errorf("Shutdown = %v, want the started ranks, sorted", got)
	}
	if _, stop := tb.Started(RankKey{"k", 0}, 102, t0, 0); stop != "pcmd on node n1 is shutting down" {
		t.Errorf("a rank that started during the shutdown: stop %q", stop)
	}
	if code, why := tb.Admit(RankKey{"k", 1}); code != job.RefuseStopping || why != "is shutting down" {
		t.Errorf("admitted during shutdown: %q %q", code, why)
	}
	if r, _ := tb.Exited(RankKey{"j", 0}); r != "pcmd on node n1 is shutting down" {
		t.Errorf("exit reason %q", r)
	}
}

// A draining node (issue 16: graceful leave) takes no new ranks and leaves its own alone.
func TestADrainingNodeTakesNoNewRanks(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	tb.Drain()
	if code, why := tb.Admit(RankKey{"j", 1}); code != job.RefuseStopping || !strings.Contains(why, "draining") {
		t.Errorf("admitted while draining: %q %q", code, why)
	}
	if r := tb.Reason(RankKey{"j", 0}); r != "" || len(tb.Running()) != 1 {
		t.Errorf("draining touched the running rank: reason %q, running %v", r, tb.Running())
	}
	tb.Reopen() // the drain could not place the ranks: the node goes on as before
	if code, _ := tb.Admit(RankKey{"j", 1}); code != "" {
		t.Errorf("after Reopen: %q", code)
	}
	tb.Drain()
	tb.Shutdown()
	tb.Reopen() // does not undo a shutdown
	if _, why := tb.Admit(RankKey{"j", 2}); why != "is shutting down" {
		t.Errorf("after drain then shutdown: %q", why)
	}
}

// The node's counts for MPIOS_NODE_RANKS include ranks still starting.
func TestCountsIncludeStartingRanks(t *testing.T) {
	tb := NewTable("n1", 4, time.Minute)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	tb.Admit(RankKey{"j", 1})
	tb.Admit(RankKey{"k", 0})
	if same, other := tb.Counts("j"); same != 2 || other != 1 {
		t.Errorf("Counts(j) = %d, %d; want 2, 1", same, other)
	}
	want := []job.RankInfo{{Job: "j", Rank: 0, PID: 100, Started: t0}}
	if got := tb.Ranks(); !reflect.DeepEqual(got, want) {
		t.Errorf("Ranks = %+v, want %+v", got, want)
	}
}

func ExampleTable() {
	tb := NewTable("n1", 1, 10*time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tb.Admit(RankKey{Job: "j", Rank: 0})
	tb.Started(RankKey{Job: "j", Rank: 0}, 4242, t0, 0) // no lease asked: the node's 10s
	fmt.Println(tb.Admit(RankKey{Job: "j", Rank: 1}))
	tb.KeepAlive("j", t0.Add(5*time.Second))
	for _, e := range tb.Expire(t0.Add(16 * time.Second)) {
		fmt.Println(e.Reason, e.Ranks)
	}
	// Output:
	// no-slot has no free slot for rank 1 of job j (1 of 1 in use)
	// no keepalive from the launcher of job j for 11s [{j 0}]
}
