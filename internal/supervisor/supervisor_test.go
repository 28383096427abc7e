package supervisor

// Tests of how the supervisor ends a job: which failure it blames and with which exit
// status, the rendezvous, signals and timeouts. Fake processes and a fake clock, as in
// reconf_paper_test.go.

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

func TestRanksStartInOrderAndTheRendezvousAnswersEveryRank(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "", "")
	j.launch()
	for i := range 3 {
		tabs := j.sent["hello."+string(rune('0'+i))]
		if len(tabs) != 1 {
			t.Fatalf("rank %d got %d answers", i, len(tabs))
		}
		if got := tabs[0].(job.Table).Addrs; !slices.Equal(got, []string{"h:0", "h:1", "h:2"}) {
			t.Errorf("rank %d got table %v", i, got)
		}
	}
	if _, ok := j.m.NextDeadline(); ok {
		t.Error("a deadline is armed after the rendezvous, without a job timeout")
	}
	for i := range 3 {
		if j.m.Done() {
			t.Fatal("done while ranks run")
		}
		j.exit(j.proc[i], 0)
	}
	if !j.m.Done() || j.m.Failure() != nil {
		t.Errorf("done %v failure %+v", j.m.Done(), j.m.Failure())
	}
}

// The rank that died first is blamed, not the peers that exited because they lost it: the
// first lost-peer report names it.
func TestRankFailureBlamesTheRankItsPeersLost(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "", "")
	j.launch()
	j.step(Lost{Data: enc(t, job.Lost{Observer: 0, Rank: 2, Reason: "connection reset"})})
	acts := j.exit(j.proc[0], 1) // the peer exits first...
	if len(only[Flush](acts)) != 1 {
		t.Error("no Flush when the first failure arrived")
	}
	if j.m.Failure() != nil {
		t.Fatal("decided before the failure window ended")
	}
	at, ok := j.m.NextDeadline()
	if !ok || at != j.now.Add(DefaultFailureWindow) {
		t.Errorf("deadline %v %v, want the end of the failure window", at, ok)
	}
	j.exit(j.proc[2], 3) // ...the culprit's exit is read later
	j.advance(DefaultFailureWindow)
	f := j.wantFailure(RankFailed, 2, 3)
	if f.Reason != "rank 2 (pid 1002) exited with status 3" {
		t.Errorf("reason %q", f.Reason)
	}
	j.wantLog(`rank 0 \(pid 1000\) exited with status 1 \(after rank 2 \(pid 1002\) failed\)`)
	ev := j.events()
	if len(ev) != 1 || ev[0].Kind != job.EventRankFailed || ev[0].Rank != 2 {
		t.Errorf("events %+v", ev)
	}
	if pubs := only[Publish](j.step(Tick{})); len(pubs) != 0 {
		t.Errorf("published again: %+v", pubs)
	}
}

// Without lost-peer reports the earliest exit is blamed, and the job's status is its.
func TestWithoutReportsTheEarliestFailureIsBlamed(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "", "")
	j.launch()
	t0 := j.now
	j.step(Exited{Proc: j.proc[1], Status: 4, Desc: "exited with status 4", At: t0.Add(2 * time.Millisecond)})
	acts := j.step(Exited{Proc: j.proc[0], Status: 137, Desc: "was killed by signal killed", At: t0.Add(time.Millisecond)})
	if j.m.Failure() != nil {
		t.Fatal("decided early")
	}
	_ = acts
	acts = j.exit(j.proc[2], 1) // the last process: no need to wait for the window
	f := j.wantFailure(RankFailed, 0, 137)
	if f.Reason != "rank 0 (pid 1000) was killed by signal killed" {
		t.Errorf("reason %q", f.Reason)
	}
	if !j.m.Done() {
		t.Error("not done after every process ended")
	}
}

// A rank lost with its node is the likelier cause of its peers' failures.
func TestRankLostWithItsNodeIsBlamedBeforeItsPeers(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true}, "n1", "n2", "n3")
	j.launch()
	j.exit(j.proc[0], 1)
	j.step(Exited{Proc: j.proc[2], Err: errors.New("node n3 stopped responding (no pcmd listens on mpios.node.n3.info)"), NodeGone: true, At: j.now.Add(time.Millisecond)})
	j.advance(DefaultFailureWindow)
	f := j.wantFailure(RankFailed, 2, StatusFailed)
	if f.Reason != "rank 2 (pid 1002 on n3): node n3 stopped responding (no pcmd listens on mpios.node.n3.info)" {
		t.Errorf("reason %q", f.Reason)
	}
}

// A process whose fate is unknown (its node is gone) fails the job at once.
func TestLostProcessFailsTheJobAtOnce(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true}, "n1", "n2")
	j.launch()
	acts := j.step(Exited{Proc: j.proc[1], Err: errors.New("node n2 stopped responding"), NodeGone: true})
	j.wantFailure(RankFailed, 1, StatusFailed)
	if got := signalled(acts, syscall.SIGTERM); !slices.Equal(got, []ProcID{j.proc[0]}) {
		t.Errorf("SIGTERM to %v", got)
	}
}

// mpi.Abort publishes and exits: the Abort may arrive after the exit status, within the
// window, and it wins with its code.
func TestAbortArrivingAfterTheExitStatusWins(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "", "")
	j.launch()
	j.exit(j.proc[1], 7)
	j.step(Abort{Data: enc(t, job.Abort{Rank: 1, Code: 7, Message: "gives up"})})
	f := j.wantFailure(RankAborted, 1, 7)
	if f.Reason != "rank 1 (pid 1001) called abort with code 7: gives up" {
		t.Errorf("reason %q", f.Reason)
	}
	j.advance(time.Second)
	if f := j.m.Failure(); f.Kind != RankAborted {
		t.Errorf("the window's end replaced the abort: %+v", f)
	}
	// Code 0 (or a multiple of 256) must not look like success.
	k := newFakeJob(t, Config{}, "")
	k.launch()
	k.step(Abort{Data: enc(t, job.Abort{Rank: 0, Code: 256})})
	k.wantFailure(RankAborted, 0, StatusFailed)
}

func TestRendezvousTimeoutNamesTheMissingRanksAndTellsTheWaitingOnes(t *testing.T) {
	j := newFakeJob(t, Config{RendezvousTimeout: 700 * time.Millisecond}, "", "", "")
	j.startRanks()
	if _, ok := j.m.NextDeadline(); ok {
		t.Error("the rendezvous deadline runs before the first hello")
	}
	j.hello(0)
	j.now = j.now.Add(300 * time.Millisecond)
	j.hello(2)
	j.advance(399 * time.Millisecond)
	if j.m.Failure() != nil {
		t.Fatal("timed out early: the deadline runs from the first hello")
	}
	acts := j.advance(time.Millisecond)
	f := j.wantFailure(RendezvousFailed, -1, StatusFailed)
	if f.Reason != "rendezvous timed out after 700ms: no hello from rank 1" {
		t.Errorf("reason %q", f.Reason)
	}
	for _, r := range []string{"hello.0", "hello.2"} {
		if tab := j.sent[r]; len(tab) != 1 || tab[0].(job.Table).Error != "mpirun: "+f.Reason {
			t.Errorf("%s answered %+v", r, tab)
		}
	}
	if got := signalled(acts, syscall.SIGTERM); len(got) != 3 {
		t.Errorf("SIGTERM to %v, want every rank", got)
	}
}

// A clean exit before the rendezvous is fine for a program that never calls Init, not once
// a rank said hello.
func TestCleanExitBeforeTheRendezvous(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "")
	j.startRanks()
	j.exit(j.proc[1], 0)
	if j.m.Failure() != nil {
		t.Fatalf("failure %+v", j.m.Failure())
	}
	j.hello(0)
	f := j.wantFailure(RendezvousFailed, -1, StatusFailed)
	if f.Reason != "rank 1 exited before the rendezvous completed" {
		t.Errorf("reason %q", f.Reason)
	}
}

func TestBadHellosAreIgnored(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "")
	j.startRanks()
	j.step(Hello{Reply: "garbage", Data: []byte("not msgpack")})
	j.step(Hello{Reply: "bad", Data: enc(t, job.Hello{Rank: 7, Addr: "h:1"})})
	j.hello(0)
	j.step(Hello{Reply: "dup", Data: enc(t, job.Hello{Rank: 0, Addr: "h:9", PID: 99, Host: "x"})})
	j.wantLog(`ignoring malformed hello: decode \*job.Hello: .*`)
	j.wantLog(`ignoring invalid hello: hello from rank 7: outside \[0,2\)`)
	j.wantLog(`ignoring duplicate hello for rank 0 from pid 99 on "x" \(pid 1000 on "h" said hello first\)`)
	if r := j.sent["dup"]; len(r) != 1 || r[0].(job.Table).Error != "mpirun: duplicate hello for rank 0" {
		t.Errorf("duplicate answered %+v", r)
	}
	j.hello(1)
	if tab := j.sent["hello.1"]; len(tab) != 1 || tab[0].(job.Table).Addrs[0] != "h:0" {
		t.Errorf("rendezvous %+v", tab)
	}
	if j.m.Failure() != nil {
		t.Fatalf("failure %+v", j.m.Failure())
	}
}

// The first signal stops the job gracefully, with status 128+signal; a second one kills.
// Ranks that ignore SIGTERM are killed when the grace expires.
func TestSignalsStopThenKillTheJob(t *testing.T) {
	j := newFakeJob(t, Config{KillGrace: 300 * time.Millisecond}, "", "")
	j.launch()
	acts := j.step(Signal{Sig: syscall.SIGINT})
	f := j.wantFailure(Interrupted, -1, 130)
	if f.Reason != "received interrupt, stopping the job" {
		t.Errorf("reason %q", f.Reason)
	}
	if ev := j.events(); len(ev) != 1 || ev[0].Kind != job.EventAbort || ev[0].Reason != "mpirun received interrupt" {
		t.Errorf("events %+v", ev)
	}
	if got := signalled(acts, syscall.SIGTERM); !slices.Equal(got, j.proc) {
		t.Errorf("SIGTERM to %v", got)
	}
	j.exit(j.proc[0], 143)
	acts = j.advance(300 * time.Millisecond)
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, j.proc[1:]) {
		t.Errorf("SIGKILL to %v, want the rank still running", got)
	}
	j.wantLog(`rank 1 \(pid 1001\) did not stop within 300ms of SIGTERM, killing it`)
	acts = j.step(Signal{Sig: syscall.SIGINT})
	j.wantLog(`received interrupt again, killing the job`)
	if got := signalled(acts, syscall.SIGKILL); !slices.Equal(got, j.proc[1:]) {
		t.Errorf("second signal: SIGKILL to %v", got)
	}
	if f := j.m.Failure(); f.Kind != Interrupted {
		t.Errorf("failure changed to %+v", f)
	}
}

func TestJobTimeoutAndCancellation(t *testing.T) {
	j := newFakeJob(t, Config{Timeout: time.Minute}, "")
	j.launch()
	j.advance(time.Minute)
	f := j.wantFailure(TimedOut, -1, StatusTimedOut)
	if f.Reason != "job timed out after 1m0s" {
		t.Errorf("reason %q", f.Reason)
	}
	c := newFakeJob(t, Config{}, "")
	c.launch()
	c.step(Cancel{Cause: "context canceled"})
	c.wantFailure(Cancelled, -1, StatusFailed)
}

// A rank that cannot be started stops the job; the ranks after it are not started.
func TestStartFailureStopsTheJob(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "", "")
	j.step(Launch{})
	s0 := j.takeStart()
	j.step(Started{Proc: s0.Proc, PID: 1000})
	s1 := j.takeStart()
	acts := j.step(Started{Proc: s1.Proc, Err: errors.New("fork/exec: permission denied")})
	f := j.wantFailure(StartFailed, 1, StatusFailed)
	if f.Reason != "cannot start rank 1: fork/exec: permission denied" {
		t.Errorf("reason %q", f.Reason)
	}
	if len(j.pend) != 0 {
		t.Errorf("rank 2 started after rank 1 failed: %+v", j.pend)
	}
	if got := signalled(acts, syscall.SIGTERM); !slices.Equal(got, []ProcID{s0.Proc}) {
		t.Errorf("SIGTERM to %v", got)
	}
	j.exit(s0.Proc, 143)
	if !j.m.Done() {
		t.Error("not done")
	}
}

func TestNewRejectsBadConfigs(t *testing.T) {
	for _, c := range []Config{
		{NP: 0, RendezvousTimeout: time.Second, KillGrace: time.Second},
		{NP: 1, KillGrace: time.Second},
		{NP: 1, RendezvousTimeout: time.Second, KillGrace: time.Second, Timeout: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// A rank whose start completes after the job began stopping is stopped too, and no further
// rank is started.
func TestRankStartedWhileStoppingIsStopped(t *testing.T) {
	j := newFakeJob(t, Config{}, "", "")
	j.step(Launch{})
	s0 := j.takeStart()
	j.step(Signal{Sig: syscall.SIGTERM})
	acts := j.step(Started{Proc: s0.Proc, PID: 1000})
	if got := signalled(acts, syscall.SIGTERM); !slices.Equal(got, []ProcID{s0.Proc}) {
		t.Errorf("SIGTERM to %v, want the late rank", got)
	}
	if len(j.pend) != 0 {
		t.Errorf("started more ranks while stopping: %+v", j.pend)
	}
	j.exit(s0.Proc, 143)
	if !j.m.Done() {
		t.Error("not done")
	}
	j.wantFailure(Interrupted, -1, 143)
}
