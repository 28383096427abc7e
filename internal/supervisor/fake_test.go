package supervisor

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// fakeJob drives a Machine with a fake clock and fake processes: every StartRank is
// answered by the test, nothing runs.
type fakeJob struct {
	t     *testing.T
	m     *Machine
	now   time.Time
	nodes []string         // node of each initial rank
	pid   map[ProcID]int   // of every started process
	rank  map[ProcID]int   // rank of every started process
	proc  []ProcID         // initial process of each rank
	logs  []string         // every Log line so far
	pend  []StartRank      // StartRanks not yet answered
	sent  map[string][]any // Replies and Publishes by subject
	ctls  int              // control requests sent
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFakeJob(t *testing.T, cfg Config, nodes ...string) *fakeJob {
	t.Helper()
	if cfg.JobID == "" {
		cfg.JobID = "j"
	}
	if cfg.RendezvousTimeout == 0 {
		cfg.RendezvousTimeout = time.Second
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 3 * time.Second
	}
	if cfg.NP == 0 {
		cfg.NP = len(nodes)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeJob{t: t, m: m, now: epoch, nodes: nodes, pid: map[ProcID]int{}, rank: map[ProcID]int{}, sent: map[string][]any{}}
}

// step feeds ev and records what came out.
func (j *fakeJob) step(ev Event) []Action {
	j.t.Helper()
	acts := j.m.Step(j.now, ev)
	for _, a := range acts {
		switch a := a.(type) {
		case Log:
			j.logs = append(j.logs, a.Line)
		case StartRank:
			j.pend = append(j.pend, a)
			j.rank[a.Proc] = a.Rank
		case Reply:
			j.sent[a.To] = append(j.sent[a.To], a.Msg)
		case Publish:
			j.sent[a.Subject] = append(j.sent[a.Subject], a.Msg)
		}
	}
	return acts
}

// advance moves the clock and ticks.
func (j *fakeJob) advance(d time.Duration) []Action {
	j.now = j.now.Add(d)
	return j.step(Tick{})
}

// takeStart removes and returns the oldest unanswered StartRank.
func (j *fakeJob) takeStart() StartRank {
	j.t.Helper()
	if len(j.pend) == 0 {
		j.t.Fatal("no StartRank pending")
	}
	s := j.pend[0]
	j.pend = j.pend[1:]
	return s
}

// startRanks launches the job and starts every rank (on j.nodes), in order, as pid 1000+rank.
func (j *fakeJob) startRanks() {
	j.t.Helper()
	j.step(Launch{})
	for i := range j.m.cfg.NP {
		s := j.takeStart()
		if s.Rank != i || s.Node != "" {
			j.t.Fatalf("start %d: %+v, want rank %d where placed", i, s, i)
		}
		j.pid[s.Proc] = 1000 + i
		j.proc = append(j.proc, s.Proc)
		j.step(Started{Proc: s.Proc, PID: 1000 + i, Node: j.nodes[i]})
	}
}

// launch starts every rank and completes the rendezvous.
func (j *fakeJob) launch() {
	j.t.Helper()
	j.startRanks()
	for i := range j.m.cfg.NP {
		j.hello(i)
	}
	tables := j.sent["hello.0"]
	if len(tables) != 1 || tables[0].(job.Table).Error != "" {
		j.t.Fatalf("rendezvous answer %+v", tables)
	}
}

func (j *fakeJob) hello(rank int) []Action {
	j.t.Helper()
	return j.step(Hello{Reply: fmt.Sprintf("hello.%d", rank), Data: enc(j.t, job.Hello{Rank: rank, Addr: fmt.Sprintf("h:%d", rank), PID: 1000 + rank, Host: "h"})})
}

// exit ends process p with status (0 success) a millisecond after the last event.
func (j *fakeJob) exit(p ProcID, status int) []Action {
	j.now = j.now.Add(time.Millisecond)
	desc := fmt.Sprintf("exited with status %d", status)
	return j.step(Exited{Proc: p, Status: status, Desc: desc, At: j.now})
}

// control sends a control request as the job's owner; it returns the actions and the
// reply subject.
func (j *fakeJob) control(c job.ControlRequest) ([]Action, string) {
	j.t.Helper()
	return j.controlFrom(Requester{Owner: true}, c)
}

// controlFrom sends a control request authenticated as from.
func (j *fakeJob) controlFrom(from Requester, c job.ControlRequest) ([]Action, string) {
	j.t.Helper()
	to := fmt.Sprintf("ctl.%d", j.ctls)
	j.ctls++
	return j.step(Control{Reply: to, Data: enc(j.t, c), From: from}), to
}

func (j *fakeJob) lastReply(to string) job.ControlReply {
	if r := j.sent[to]; len(r) > 0 {
		return r[len(r)-1].(job.ControlReply)
	}
	return job.ControlReply{}
}

// migrate asks for ranks to move to node and answers the node check, if one is made, with
// checkErr. It returns the reply to the request.
func (j *fakeJob) migrate(to string, checkErr error, ranks ...int) job.ControlReply {
	j.t.Helper()
	acts, subj := j.control(job.ControlRequest{Kind: job.ControlMigrate, Ranks: ranks, To: to, Reason: "test"})
	if checks := only[CheckNode](acts); len(checks) == 1 {
		if checks[0].Node != to {
			j.t.Fatalf("check of node %q, want %q", checks[0].Node, to)
		}
		j.step(NodeChecked{Check: checks[0].Check, Err: checkErr})
	}
	return j.lastReply(subj)
}

// askSuccessor is rank at the agreement point of request seq asking for its successor.
func (j *fakeJob) askSuccessor(seq uint64, rank, iter int) []Action {
	j.t.Helper()
	return j.step(SuccessorRequest{Reply: fmt.Sprintf("succ.%d.%d", seq, rank),
		Data: enc(j.t, job.MigrateRequest{Seq: seq, Rank: rank, Handover: "10.0.0.1:7000", Iteration: iter, StateBytes: 4096})})
}

func (j *fakeJob) successorReply(seq uint64, rank int) job.MigrateReply {
	j.t.Helper()
	r := j.sent[fmt.Sprintf("succ.%d.%d", seq, rank)]
	if len(r) != 1 {
		j.t.Fatalf("successor request %d of rank %d: %d replies, want 1", seq, rank, len(r))
	}
	return r[0].(job.MigrateReply)
}

func (j *fakeJob) report(rep job.MigrateReport) []Action {
	j.t.Helper()
	return j.step(MigrateReport{Data: enc(j.t, rep)})
}

// published returns the reconfiguration logs published to the ranks.
func (j *fakeJob) published() []reconf.Log {
	var out []reconf.Log
	for _, v := range j.sent[job.ReconfSubject(j.m.cfg.JobID)] {
		out = append(out, v.(reconf.Log))
	}
	return out
}

func (j *fakeJob) events() []job.Event {
	var out []job.Event
	for _, v := range j.sent[job.EventSubject(j.m.cfg.JobID)] {
		out = append(out, v.(job.Event))
	}
	return out
}

// wantLog fails unless a Log line matches pattern (anchored).
func (j *fakeJob) wantLog(pattern string) {
	j.t.Helper()
	re := regexp.MustCompile(`^` + pattern + `$`)
	for _, l := range j.logs {
		if re.MatchString(l) {
			return
		}
	}
	j.t.Errorf("no log line matches %q in:\n%s", pattern, strings.Join(j.logs, "\n"))
}

func (j *fakeJob) noLog(pattern string) {
	j.t.Helper()
	re := regexp.MustCompile(pattern)
	for _, l := range j.logs {
		if re.MatchString(l) {
			j.t.Errorf("unexpected log line %q", l)
		}
	}
}

func (j *fakeJob) wantFailure(kind FailureKind, rank, code int) *Failure {
	j.t.Helper()
	f := j.m.Failure()
	if f == nil {
		j.t.Fatalf("no failure; log:\n%s", strings.Join(j.logs, "\n"))
	}
	if f.Kind != kind || f.Rank != rank || f.Code != code {
		j.t.Errorf("failure %+v, want kind %d rank %d code %d", f, kind, rank, code)
	}
	return f
}

// signalled returns the processes sent sig by acts.
func signalled(acts []Action, sig syscall.Signal) []ProcID {
	var out []ProcID
	for _, s := range only[SignalProc](acts) {
		if s.Sig == sig {
			out = append(out, s.Proc)
		}
	}
	return out
}

// only returns the actions of type T.
func only[T Action](acts []Action) []T {
	var out []T
	for _, a := range acts {
		if t, ok := a.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func enc(t *testing.T, v any) []byte {
	t.Helper()
	b, err := job.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
