package spawner

import (
	"bytes"
	"cmp"
	"fmt"
	"log"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
)

// A ledger keeps the latest output messages within its bounds, and answers a replay from
// any point: what is gone is gone, the rest comes in order.
func TestALedgerKeepsTheLatestOutputWithinItsBounds(t *testing.T) {
	var l ledger
	for seq := uint64(1); seq <= ledgerMaxLines+10; seq++ {
		l.add(job.RankOutput{Seq: seq, Line: []byte("x")})
	}
	if rep := l.since(0, 4<<20); len(rep.Output) != ledgerMaxLines || rep.Output[0].Seq != 11 || rep.Exit != nil {
		t.Fatalf("since 0: %d messages from %d, exit %v; want the latest %d", len(rep.Output), rep.Output[0].Seq, rep.Exit, ledgerMaxLines)
	}
	if rep := l.since(ledgerMaxLines+8, 4<<20); len(rep.Output) != 2 || rep.Output[0].Seq != ledgerMaxLines+9 {
		t.Errorf("since %d: %+v, want the last 2", ledgerMaxLines+8, rep.Output)
	}
	var long ledger // many times its bound: forgotten messages are compacted away
	for seq := uint64(1); seq <= 3*ledgerMaxLines+7; seq++ {
		long.add(job.RankOutput{Seq: seq, Line: []byte("x")})
	}
	if rep := long.since(0, 4<<20); len(rep.Output) != ledgerMaxLines || rep.Output[0].Seq != 2*ledgerMaxLines+8 ||
		!slices.IsSortedFunc(rep.Output, func(a, b job.RankOutput) int { return cmp.Compare(a.Seq, b.Seq) }) || len(long.out) > 2*ledgerMaxLines+1 {
		t.Errorf("a ledger fed %d messages: %d kept from %d, %d held; want the latest %d in order, at most %d held",
			3*ledgerMaxLines+7, len(rep.Output), rep.Output[0].Seq, len(long.out), ledgerMaxLines, 2*ledgerMaxLines+1)
	}
	var big ledger
	line := bytes.Repeat([]byte("y"), ledgerMaxBytes/3)
	for seq := uint64(1); seq <= 5; seq++ {
		big.add(job.RankOutput{Seq: seq, Line: line})
	}
	if rep := big.since(0, 4<<20); len(rep.Output) != 3 || rep.Output[0].Seq != 3 {
		t.Errorf("lines of a third of the bound: kept %d from %d, want the last 3", len(rep.Output), rep.Output[0].Seq)
	}
	buf := []byte("reused")
	big.add(job.RankOutput{Seq: 6, Line: buf})
	copy(buf, "XXXXXX")
	if rep := big.since(5, 4<<20); string(rep.Output[0].Line) != "reused" {
		t.Errorf("the ledger kept the caller's buffer: %q", rep.Output[0].Line)
	}
	if rep := big.since(0, replayOverhead+2*(len(line)+replayPerMessage)); len(rep.Output) != 2 || rep.Output[0].Seq != 4 || !rep.More {
		t.Errorf("a replay bounded to two lines: %d from %d, more %v; want 2 from 4 and more", len(rep.Output), rep.Output[0].Seq, rep.More)
	}
	if rep := big.since(0, 1); len(rep.Output) != 1 || !rep.More {
		t.Errorf("a replay bounded below one line: %d lines, more %v; want one line and more", len(rep.Output), rep.More)
	}
	big.ended(job.RankExit{Code: 3, Sent: 6}, time.Now())
	if rep := big.since(6, 4<<20); len(rep.Output) != 0 || rep.Exit == nil || rep.Exit.Code != 3 {
		t.Errorf("after the exit: %+v", rep)
	}
}

// Through a real NATS server and a real process: the launcher that started a rank gets its
// output and exit again after the rank ended; another launcher of the same job does not,
// and a process the node never ran is not found.
func TestTheLauncherThatStartedARankGetsItsOutputAndExitAgain(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	var logs testbin.Buffer
	m, err := Start(testbin.Connect(t, url), Config{Node: "n1", Allow: []string{"/bin/*"}, Slots: 2, KillGrace: time.Second,
		MaxLease: time.Minute, Open: true, Log: log.New(&logs, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	nc := testbin.Connect(t, url)
	alice, _ := nkeys.CreateUser()
	wrappers := map[nkeys.KeyPair]*ctlauth.KeyWrapper{}
	wrap := func(kp nkeys.KeyPair, subject string, v any) []byte {
		t.Helper()
		w := wrappers[kp]
		if w == nil {
			var err error
			if w, err = ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: "j"}, uint64(time.Now().UnixNano())); err != nil {
				t.Fatal(err)
			}
			wrappers[kp] = w
		}
		body, _ := job.Encode(v)
		data, err := w.Wrap(subject, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	exits, _ := nc.SubscribeSync("mpios.job.j.rank.0.exit")
	spawn := job.SpawnRequest{Job: "j", Rank: 0, Path: "/bin/sh", Args: []string{"-c", "echo one; echo two >&2; exit 3"}, Env: []string{"MPIOS_JOB_ID=j"}}
	msg, err := nc.Request(job.NodeSpawnSubject("n1"), wrap(alice, job.NodeSpawnSubject("n1"), spawn), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var sr job.SpawnReply
	if err := job.Decode(msg.Data, &sr); err != nil || sr.Error != "" {
		t.Fatalf("spawn: %v %s", err, sr.Error)
	}
	if _, err := exits.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no exit: %v", err)
	}
	ask := func(kp nkeys.KeyPair, req job.ReplayRequest) job.ReplayReply {
		t.Helper()
		msg, err := nc.Request(job.NodeReplaySubject("n1"), wrap(kp, job.NodeReplaySubject("n1"), req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep job.ReplayReply
		if err := job.Decode(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	out := job.RankOutSubject("j", 0)
	rep := ask(alice, job.ReplayRequest{Job: "j", Rank: 0, Out: out})
	var lines []string
	for _, o := range rep.Output {
		lines = append(lines, fmt.Sprintf("%d:%d:%s", o.Seq, o.Stream, o.Line))
	}
	if got := strings.Join(lines, " "); rep.Error != "" || rep.Exit == nil || rep.Exit.Code != 3 || rep.Exit.Sent != 2 ||
		(got != "1:1:one 2:2:two" && got != "1:2:two 2:1:one") {
		t.Fatalf("replay: %+v (output %s), want both lines and exit 3", rep, got)
	}
	if rep := ask(alice, job.ReplayRequest{Job: "j", Rank: 0, Out: out, After: 1}); len(rep.Output) != 1 || rep.Output[0].Seq != 2 {
		t.Errorf("replay after 1: %+v, want message 2 only", rep)
	}
	mallory, _ := nkeys.CreateUser()
	if rep := ask(mallory, job.ReplayRequest{Job: "j", Rank: 0, Out: out}); rep.Error == "" || len(rep.Output) != 0 || rep.Exit != nil ||
		!strings.Contains(rep.Error, "not signed by the launcher that started it") {
		t.Errorf("another launcher's replay: %+v, want it refused", rep)
	}
	if rep := ask(alice, job.ReplayRequest{Job: "j", Rank: 0, Out: "mpios.job.j.rank.0.inc.9.out"}); !rep.NotFound {
		t.Errorf("replay of a process never run: %+v, want not found", rep)
	}
}

// The ledgers of ended ranks are kept for a while, within a count and a size: a node whose
// ranks printed much does not grow without bound.
func TestEndedLedgersAreKeptWithinBounds(t *testing.T) {
	m := &Manager{}
	now := time.Now()
	ended := func(jobID string, n int, at time.Time) *rank {
		r := &rank{key: RankKey{jobID, 0}}
		r.ledger.add(job.RankOutput{Seq: 1, Line: bytes.Repeat([]byte("z"), n)})
		r.ledger.ended(job.RankExit{}, at)
		m.keepEnded(r, at)
		return r
	}
	old := ended("old", 10, now)
	ended("recent", 10, now.Add(ledgerKeptFor))
	if len(m.ended) != 2 {
		t.Fatalf("%d kept, want 2", len(m.ended))
	}
	ended("later", 10, now.Add(ledgerKeptFor+time.Second))
	if len(m.ended) != 2 || m.ended[0] == old {
		t.Errorf("the ledger ended %v before the last was kept", ledgerKeptFor+time.Second)
	}
	m.ended = nil
	for i := range ledgersKept + 5 {
		ended(fmt.Sprint("count", i), 1, now)
	}
	if len(m.ended) != ledgersKept || m.ended[0].key.Job != "count5" {
		t.Errorf("%d kept from %s, want the latest %d", len(m.ended), m.ended[0].key.Job, ledgersKept)
	}
	m.ended = nil
	for i := range ledgersKeptBytes/ledgerMaxBytes + 3 {
		ended(fmt.Sprint("big", i), ledgerMaxBytes, now)
	}
	if len(m.ended) != ledgersKeptBytes/ledgerMaxBytes || m.ended[0].key.Job != "big3" {
		t.Errorf("%d kept from %s, want the latest %d (%d bytes)", len(m.ended), m.ended[0].key.Job, ledgersKeptBytes/ledgerMaxBytes, ledgersKeptBytes)
	}
}
