package nodeclient_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/launch"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/rankproc"
	"github.com/mpios/mpios/internal/testbin"
)

func TestParseHosts(t *testing.T) {
	good := map[string][]nodeclient.HostSlots{
		"n1":             {{"n1", 0}},
		"n1:2,n2:3":      {{"n1", 2}, {"n2", 3}},
		" n1:2 , node-b": {{"n1", 2}, {"node-b", 0}},
	}
	for in, want := range good {
		got, err := nodeclient.ParseHosts(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("nodeclient.ParseHosts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":            "want 1 to 64",
		"n1,":         "want 1 to 64",
		"n1:0":        "want an integer in [1,",
		"n1:x":        "want an integer",
		"n1:2:3":      "want an integer",
		"a.b:2":       "letters, digits",
		"n1:2,n1:3":   "named twice",
		"n1:99999999": "want an integer in",
	}
	for in, want := range bad {
		if _, err := nodeclient.ParseHosts(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("nodeclient.ParseHosts(%q) error %v, want one containing %q", in, err, want)
		}
	}
}

func TestParseHostfile(t *testing.T) {
	got, err := nodeclient.ParseHostfile(strings.NewReader("# cluster\nn1:4  # big one\n\n  n2\n"))
	if want := []nodeclient.HostSlots{{"n1", 4}, {"n2", 0}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if _, err := nodeclient.ParseHostfile(strings.NewReader("n1\nn2:zero\n")); err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Errorf("error %v does not name line 2", err)
	}
	if _, err := nodeclient.ParseHostfile(strings.NewReader("# nothing\n")); err == nil {
		t.Error("an empty hostfile was accepted")
	}
}

func ExampleParseHosts() {
	hosts, err := nodeclient.ParseHosts("n1:2,n2:1,n3")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hosts)
	// n3 offers 2 free slots, say: ranks go round-robin, each node up to its slots.
	place, err := nodeclient.Place([]string{"n1", "n2", "n3"}, []int{2, 1, 2}, 4)
	fmt.Println(place, err)
	// Output:
	// [n1:2 n2:1 n3]
	// [n1 n2 n3 n1] <nil>
}

func TestPlace(t *testing.T) {
	got, err := nodeclient.Place([]string{"a", "b"}, []int{3, 1}, 0)
	if want := []string{"a", "b", "a", "a"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("nodeclient.Place = %v, %v; want %v", got, err, want)
	}
	if _, err := nodeclient.Place([]string{"a", "b"}, []int{1, 1}, 3); !errors.Is(err, nodeclient.ErrNotEnoughSlots) {
		t.Errorf("3 ranks on 2 slots: %v, want nodeclient.ErrNotEnoughSlots", err)
	}
}

// testSecret is a job secret for the ranks the tests start without launch.Run: nodes with a
// key card get it sealed, and relay the ranks' output and exit under the key it derives.
var testSecret = job.EnvSecret + "=000102030405060708090a0b0c0d0e0f"

// fastBeat is the heartbeat period of fake nodes: a node is gone after job.MissedBeats of
// them, and at 50 ms that window (150 ms) was shorter than the stalls of a loaded 2-core
// machine running the race detector, which declared live fake nodes gone.
const fastBeat = 150 * time.Millisecond

// fakeNode speaks pcmd's side of the protocol without running anything: spawned ranks
// print what the test says and exit when signalled or told to.
type fakeNode struct {
	t        *testing.T
	nc       *nats.Conn
	name     string
	slots    int
	interval time.Duration
	pid      int // its pcmd's

	mu      sync.Mutex
	seq     uint64 // heartbeats sent
	subs    []*nats.Subscription
	ranks   map[int]job.SpawnRequest
	stopped chan struct{}
	onSpawn func(req job.SpawnRequest) // publishes the rank's output, in the spawn handler

	card   []byte              // its signed key card, as pcmd's
	signer *ctlauth.KeyWrapper // signs its heartbeats and info replies, as pcmd's
	keys   ctlauth.NodeKeys
	relays map[int]*ctlauth.JobChannel // per rank: its output and exit under the job key
	kept   map[int]job.ReplayReply     // per rank: what it answers a replay with, as pcmd's ledger
	batch  int                         // output messages per replay reply, 0: all

	// closed makes it refuse spawns as a draining pcmd does; draining is what its
	// heartbeats say (they may lag behind a refusal).
	closed, draining bool
	// slow delays its answers to spawn and signal requests (an attacker answers first).
	slow time.Duration
}

// wait delays an answer by n.slow.
func (n *fakeNode) wait() {
	n.mu.Lock()
	d := n.slow
	n.mu.Unlock()
	time.Sleep(d)
}

func startFakeNode(t *testing.T, url, name string, slots int, interval time.Duration) *fakeNode {
	t.Helper()
	return startFakeNodeAs(t, url, name, slots, interval, 4242, nil)
}

// startFakeNodeAs starts a fake node whose pcmd has pid and keys (nil: fresh ones, as a
// pcmd without --node-key makes).
func startFakeNodeAs(t *testing.T, url, name string, slots int, interval time.Duration, pid int, keys *ctlauth.NodeKeys) *fakeNode {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	n := &fakeNode{t: t, nc: nc, name: name, slots: slots, interval: interval, pid: pid,
		ranks: make(map[int]job.SpawnRequest), stopped: make(chan struct{})}
	if keys == nil {
		fresh, err := ctlauth.NewNodeKeys(name, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys = &fresh
	}
	n.keys, n.relays, n.kept = *keys, map[int]*ctlauth.JobChannel{}, map[int]job.ReplayReply{}
	if n.card, err = keys.SignedCard(time.Now()); err != nil {
		t.Fatal(err)
	}
	if n.signer, err = ctlauth.NewKeyWrapper(keys.Signing, ctlauth.Sender{Role: ctlauth.RoleNode, Node: name}, 0); err != nil {
		t.Fatal(err)
	}
	sub := func(subj string, fn nats.MsgHandler) {
		s, err := nc.Subscribe(subj, fn)
		if err != nil {
			t.Fatal(err)
		}
		n.subs = append(n.subs, s)
	}
	sub(job.NodeInfoSubject(name), func(m *nats.Msg) { n.signed(m.Reply, n.info()) })
	sub(job.NodesDiscoverSubject, func(m *nats.Msg) { n.signed(m.Reply, job.NodeView{Self: n.info()}) })
	sub(job.NodeSpawnSubject(name), func(m *nats.Msg) {
		n.wait()
		var req job.SpawnRequest
		if err := job.Decode(m.Data, &req); err != nil || req.Validate() != nil {
			n.signed(m.Reply, job.SpawnReply{Refusal: job.RefuseInvalid, Error: "bad request"})
			return
		}
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			n.signed(m.Reply, job.SpawnReply{Node: name, Refusal: job.RefuseStopping, Error: "pcmd: node " + name + " is draining: it takes no new ranks"})
			return
		}
		if req.Path == "/bin/sh" {
			n.signed(m.Reply, job.SpawnReply{Node: name, Refusal: job.RefuseNotAllowed,
				Error: "pcmd: node " + name + " refuses to run /bin/sh: not allowed by --allow"})
			return
		}
		// As pcmd: the job's secret, sealed for this node, keys the rank's relay.
		secret, err := ctlauth.OpenSecret(req.Job, req.SealedSecret, req.SealedFrom, n.keys.Curve)
		if err != nil {
			n.signed(m.Reply, job.SpawnReply{Refusal: job.RefuseInvalid, Error: "sealed secret: " + err.Error()})
			return
		}
		relay, err := ctlauth.NewJobChannel(req.Job, secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: req.Rank, Node: name}, time.Now())
		if err != nil {
			n.signed(m.Reply, job.SpawnReply{Refusal: job.RefuseInvalid, Error: err.Error()})
			return
		}
		n.mu.Lock()
		n.ranks[req.Rank] = req
		n.relays[req.Rank] = relay
		n.mu.Unlock()
		n.signed(m.Reply, job.SpawnReply{Node: name, PID: 1000 + req.Rank})
		if n.onSpawn != nil {
			n.onSpawn(req)
		}
	})
	sub(job.NodeSignalSubject(name), func(m *nats.Msg) {
		n.wait()
		var req job.SignalRequest
		if job.Decode(m.Data, &req) != nil {
			return
		}
		n.mu.Lock()
		_, ok := n.ranks[req.Rank]
		delete(n.ranks, req.Rank)
		n.mu.Unlock()
		n.signed(m.Reply, job.SignalReply{NotFound: !ok})
		if ok {
			n.relay(req.Rank, job.RankExitSubject(req.Job, req.Rank), job.RankExit{Code: -1, Signal: req.Signal})
		}
	})
	sub(job.NodeReplaySubject(name), func(m *nats.Msg) {
		var req job.ReplayRequest
		if job.Decode(m.Data, &req) != nil || req.Validate() != nil {
			return
		}
		n.mu.Lock()
		kept, ok := n.kept[req.Rank]
		n.mu.Unlock()
		if !ok {
			n.signed(m.Reply, job.ReplayReply{NotFound: true})
			return
		}
		rep := job.ReplayReply{Exit: kept.Exit}
		for _, o := range kept.Output {
			if o.Seq > req.After {
				if n.batch > 0 && len(rep.Output) == n.batch {
					rep.More = true
					break
				}
				rep.Output = append(rep.Output, o)
			}
		}
		n.relay(req.Rank, m.Reply, rep)
	})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(n.interval)
		defer tick.Stop()
		for {
			select {
			case <-n.stopped:
				return
			case <-tick.C:
				n.mu.Lock()
				n.seq++
				n.mu.Unlock()
				n.signed(job.NodesHeartbeatSubject, n.info())
			}
		}
	}()
	return n
}

func (n *fakeNode) info() job.NodeInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	info := job.NodeInfo{Name: n.name, Slots: n.slots, Used: len(n.ranks), PID: n.pid, Interval: n.interval, Seq: n.seq, Card: n.card, Draining: n.draining}
	for r, req := range n.ranks {
		info.Ranks = append(info.Ranks, job.RankInfo{Job: req.Job, Rank: r, PID: 1000 + r})
	}
	return info
}

// signed publishes v on subj signed by the node's key, as pcmd does its heartbeats and
// info replies.
func (n *fakeNode) signed(subj string, v any) {
	body, err := job.Encode(v)
	if err == nil {
		var data []byte
		if data, err = n.signer.Wrap(subj, body, time.Now()); err == nil {
			err = n.nc.Publish(subj, data)
		}
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		n.t.Errorf("fake node publish: %v", err)
	}
}

// relay publishes v, a message of rank's, on subj under the job key, as pcmd relays a
// rank's output and exit.
func (n *fakeNode) relay(rank int, subj string, v any) {
	n.mu.Lock()
	ch := n.relays[rank]
	n.mu.Unlock()
	data, err := ch.Encode(subj, v, time.Now())
	if err == nil {
		err = n.nc.Publish(subj, data)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		n.t.Errorf("fake node relay: %v", err)
	}
}

// keepsAndRelays is an onSpawn that keeps lines for replays, as pcmd's ledger, and relays
// those at the indexes relayed: the others are lost on the way.
func (n *fakeNode) keepsAndRelays(lines []job.RankOutput, relayed ...int) func(job.SpawnRequest) {
	return func(req job.SpawnRequest) {
		n.mu.Lock()
		n.kept[req.Rank] = job.ReplayReply{Output: lines}
		n.mu.Unlock()
		for _, i := range relayed {
			n.relay(req.Rank, job.RankOutSubject(req.Job, req.Rank), lines[i])
		}
	}
}

// die makes the node vanish as a killed pcmd does: no more answers, no more heartbeats.
func (n *fakeNode) die() {
	close(n.stopped)
	for _, s := range n.subs {
		_ = s.Unsubscribe()
	}
	_ = n.nc.Flush()
}

// logBuffer collects a nodeclient.Remote's messages.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func newRemote(t *testing.T, url string, hosts string, np int) (*nodeclient.Remote, *logBuffer, error) {
	t.Helper()
	h, err := nodeclient.ParseHosts(hosts)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	r, err := nodeclient.NewRemote(nodeclient.RemoteConfig{NATSURL: url, Hosts: h, NP: np, Logf: logs.logf,
		RequestTimeout: 2 * time.Second, DiscoverWait: 200 * time.Millisecond})
	if err == nil {
		t.Cleanup(func() { r.Close() })
	}
	return r, logs, err
}

func TestRemotePlacementErrors(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	startFakeNode(t, url, "n1", 2, fastBeat)
	_, _, err := newRemote(t, url, "n1,n9", 0)
	if !errors.Is(err, nodeclient.ErrUnknownNode) || !strings.Contains(err.Error(), "node n9: no pcmd serves it") ||
		!strings.Contains(err.Error(), "nodes answering: n1") || strings.Contains(err.Error(), "u:p@") {
		t.Errorf("unknown node: %v (want it named, the nodes answering listed, no credentials)", err)
	}
	if _, _, err := newRemote(t, url, "n1:3", 0); !errors.Is(err, nodeclient.ErrNotEnoughSlots) || !strings.Contains(err.Error(), "node n1 has 2 free slots") {
		t.Errorf("too many slots: %v", err)
	}
	if _, _, err := newRemote(t, url, "n1:2", 3); !errors.Is(err, nodeclient.ErrNotEnoughSlots) {
		t.Errorf("-np above the slots: %v", err)
	}
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil || r.NP() != 2 {
		t.Fatalf("all free slots: NP %v, %v", r, err)
	}
}

// TestRemoteRun runs a job through launch.Run on two fake nodes: output comes back in
// order (a long line in pieces), malformed messages are dropped, and lost ones reported.
func TestRemoteRun(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	nodes := []*fakeNode{startFakeNode(t, url, "n1", 2, fastBeat), startFakeNode(t, url, "n2", 2, fastBeat)}
	for _, n := range nodes {
		n.onSpawn = func(req job.SpawnRequest) {
			out := job.RankOutSubject(req.Job, req.Rank)
			n.relay(req.Rank, out, job.RankOutput{Stream: job.StreamStdout, Seq: 1, Line: []byte(fmt.Sprintf("rank %d on %s bind=%s", req.Rank, n.name, rankproc.EnvValue(req.Env, job.EnvBind)))})
			n.relay(req.Rank, out, job.RankOutput{Stream: job.StreamStderr, Seq: 2, Line: []byte("long-"), Partial: true})
			n.relay(req.Rank, out, job.RankOutput{Stream: job.StreamStderr, Seq: 3, Line: []byte("line")})
			if err := n.nc.Publish(out, []byte("\xc1garbage")); err != nil {
				t.Error(err)
			}
			n.relay(req.Rank, out, job.RankOutput{Stream: 7, Seq: 4, Line: []byte("bad stream")})
			sent := uint64(3)
			if req.Rank == 3 {
				sent = 5 // as if two messages were lost
			}
			n.mu.Lock()
			delete(n.ranks, req.Rank)
			n.mu.Unlock()
			n.relay(req.Rank, job.RankExitSubject(req.Job, req.Rank), job.RankExit{Sent: sent})
		}
	}
	r, logs, err := newRemote(t, url, "n1:2,n2:2", 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Placement(), []string{"n1", "n2", "n1", "n2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("placement %v, want %v", got, want)
	}
	// The fake nodes run nothing: any executable will do as the program.
	prog, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testbin.Buffer
	err = launch.Run(context.Background(), launch.Config{NP: r.NP(), Program: prog, Starter: r, JobID: "remote-run",
		Env: []string{"PATH=/bin", "MPIOS_CKPT_EVERY=5", "MPIOS_CKPT_EVERY=7"}, NATSURL: url,
		Stdout: &stdout, Stderr: &stderr, RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	for rank, node := range r.Placement() {
		// mpirun's bind is not passed on: pcmd sets its --advertise (job.TypedEnv).
		wantLine(t, stdout.String(), fmt.Sprintf("rank %d on %s bind=", rank, node))
	}
	if n := strings.Count(stderr.String(), "long-line\n"); n != 4 {
		t.Errorf("%d reassembled long lines, want 4:\n%s", n, stderr.String())
	}
	for _, want := range []string{"ignoring a malformed output message for rank 0", "2 output messages of rank 3 on node n2 were lost"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), "bad stream") {
		t.Error("a message with an invalid stream was printed")
	}
}

func TestRemoteSpawnEnvAndRefusal(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n := startFakeNode(t, url, "n1", 2, fastBeat)
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/root", "LD_PRELOAD=/evil.so", "MPIOS_JOB_ID=stale", "MPIOS_JOB_ID=j1", "MPIOS_RANK=0", testSecret}
	_, err = r.Start(rankproc.Spec{Rank: 0, Path: "/bin/sh", Env: env, Output: func(rankproc.Stream, []byte) {}})
	var se *nodeclient.SpawnError
	if !errors.As(err, &se) || se.Refusal != job.RefuseNotAllowed || !strings.Contains(err.Error(), "refuses to run /bin/sh") {
		t.Fatalf("refused spawn: %v", err)
	}
	p, err := r.Start(rankproc.Spec{Rank: 1, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	req := n.ranks[1]
	n.mu.Unlock()
	wd, _ := os.Getwd()
	if want := []string{"MPIOS_JOB_ID=j1", "MPIOS_RANK=0"}; !reflect.DeepEqual(req.Env, want) || req.Dir != wd || req.KeepAlive <= 0 {
		t.Errorf("spawn request env %q dir %q keepalive %v; want env %q, dir %q, a keepalive", req.Env, req.Dir, req.KeepAlive, want, wd)
	}
	if p.Host() != "n1" || p.PID() != 1001 {
		t.Errorf("host %q pid %d", p.Host(), p.PID())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil || ex.Signal != syscall.SIGTERM {
		t.Errorf("Wait = %v, %v; want killed by SIGTERM", ex, err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("signalling an exited rank: %v", err)
	}
}

// A node of the job that drains (pcmd drain) is reported as draining, from its heartbeats or
// from a spawn it refused because it takes no new ranks, and as taking ranks again when its
// heartbeats say so: mpirun's recoveries place no rank on it meanwhile. A start it refuses
// matches ErrNodeClosed, not ErrNodeGone: its ranks run on.
func TestRemoteReportsADrainingNode(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n1 := startFakeNode(t, url, "n1", 2, fastBeat)
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	p0 := startRank(t, r, "drains")
	set := func(closed, draining bool) {
		n1.mu.Lock()
		n1.closed, n1.draining = closed, draining
		n1.mu.Unlock()
	}
	wantDraining := func(draining bool) {
		t.Helper()
		if d := nextEvent(t, r).Draining; d == nil || d.Node != "n1" || d.Draining != draining {
			t.Fatalf("node event %+v, want n1 draining=%v", d, draining)
		}
	}
	set(true, true)
	wantDraining(true)
	spec := rankproc.Spec{Rank: 1, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=drains", testSecret}, Output: func(rankproc.Stream, []byte) {}}
	_, err = r.StartOn("n1", spec)
	if !errors.Is(err, nodeclient.ErrNodeClosed) || errors.Is(err, nodeclient.ErrNodeGone) || !strings.Contains(err.Error(), "is draining") {
		t.Fatalf("start on a draining node: %v, want nodeclient.ErrNodeClosed", err)
	}
	set(false, false)
	wantDraining(false)
	// A refusal ahead of the heartbeats: the node counts as draining until they say it is not.
	set(true, false)
	if _, err := r.StartOn("n1", spec); !errors.Is(err, nodeclient.ErrNodeClosed) {
		t.Fatalf("start on a node that refuses: %v, want nodeclient.ErrNodeClosed", err)
	}
	wantDraining(false)
	select {
	case <-nodeclient.Finished(p0):
		t.Error("the rank on the draining node was failed")
	default:
	}
}

// "Nothing received from NATS is trusted until it is authenticated": anyone on the NATS
// server can answer a request to a node before its pcmd does. An attacker who answers every
// spawn and signal request at once, with a refusal in clear, an answer signed by another key
// and a forged "no responders" status, changes nothing: the launcher waits for the answer its
// node signed, and neither fails the start nor takes the node for dead.
func TestAnswersTheNodeDidNotSignAreIgnored(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n1 := startFakeNode(t, url, "n1", 2, fastBeat)
	n1.mu.Lock()
	n1.slow = 100 * time.Millisecond
	n1.mu.Unlock()
	attacker := testbin.Connect(t, url)
	impostor, err := ctlauth.NewNodeKeys("n1", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := ctlauth.NewKeyWrapper(impostor.Signing, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	answerFirst := func(m *nats.Msg) {
		refusal, _ := job.Encode(job.SpawnReply{Node: "n1", Refusal: job.RefuseNotAllowed, Error: "pcmd: node n1 refuses (forged)"})
		attacker.Publish(m.Reply, refusal)
		if signed, err := forger.Wrap(m.Reply, refusal, time.Now()); err == nil {
			attacker.Publish(m.Reply, signed)
		}
		noResponders := nats.NewMsg(m.Reply)
		noResponders.Header.Set("Status", "503")
		attacker.PublishMsg(noResponders)
	}
	for _, subj := range []string{job.NodeSpawnSubject("n1"), job.NodeSignalSubject("n1")} {
		if _, err := attacker.Subscribe(subj, answerFirst); err != nil {
			t.Fatal(err)
		}
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	r, logs, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	p := startRank(t, r, "forged")
	if p.PID() != 1000 {
		t.Errorf("pid %d, want the node's 1000", p.PID())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("signal: %v", err)
	}
	if ex, err := p.Wait(); err != nil || ex.Signal != syscall.SIGTERM {
		t.Errorf("Wait = %v, %v; want killed by SIGTERM, the node not taken for gone", ex, err)
	}
	if !strings.Contains(logs.String(), "ignoring an answer on behalf of node n1 that it did not sign") {
		t.Errorf("the forgeries were not logged:\n%s", logs)
	}
}

// TestRemoteNodeGone: a node that stops beating fails its ranks, without a hang.
func TestRemoteNodeGone(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n1, _ := startFakeNode(t, url, "n1", 1, fastBeat), startFakeNode(t, url, "n2", 1, fastBeat)
	r, logs, err := newRemote(t, url, "n1,n2", 0)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"MPIOS_JOB_ID=gone", testSecret}
	p0, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := r.Start(rankproc.Spec{Rank: 1, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n1.die()
	done := make(chan error, 1)
	go func() { _, err := p0.Wait(); done <- err }()
	select {
	case err := <-done:
		var ge *nodeclient.NodeGoneError
		if !errors.As(err, &ge) || !errors.Is(err, nodeclient.ErrNodeGone) || ge.Node != "n1" ||
			!strings.Contains(err.Error(), "node n1 stopped responding (no heartbeat for") {
			t.Errorf("Wait error %v, want a nodeclient.NodeGoneError for n1", err)
		}
		if took := time.Since(start); took < job.MissedBeats*n1.interval {
			t.Errorf("declared gone after %v, before %d beats were missed", took, job.MissedBeats)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait of a rank on a dead node did not return")
	}
	if !strings.Contains(logs.String(), "its rank 0 is lost") {
		t.Errorf("log: %s", logs)
	}
	wantGoneDelivered(t, r, "n1")
	select {
	case <-nodeclient.Finished(p1):
		t.Error("the rank on the live node was failed too")
	default:
	}
	if _, err := r.StartOn("n1", rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}}); !errors.Is(err, nodeclient.ErrNodeGone) {
		t.Errorf("Start on a gone node: %v, want nodeclient.ErrNodeGone", err)
	}
}

// TestRemoteSpawnOnDeadNode: starting a rank on a node of the job that nobody answers for any
// more says the node is gone (a recovery then restarts the job without it), not that the node
// is unknown or the program cannot start.
func TestRemoteSpawnOnDeadNode(t *testing.T) {
	t.Parallel()
	n1, r := quietNode(t)
	n1.die()
	_, err := r.StartOn("n1", rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=spawn", testSecret}, Output: func(rankproc.Stream, []byte) {}})
	if !errors.Is(err, nodeclient.ErrNodeGone) || !strings.Contains(err.Error(), "node n1 stopped responding (no pcmd listens on") {
		t.Errorf("spawn on a dead node: %v, want nodeclient.ErrNodeGone", err)
	}
	wantGoneDelivered(t, r, "n1")
}

// quietNode is a Remote on a node n1 whose heartbeats come too rarely to tell it is gone.
func quietNode(t *testing.T) (*fakeNode, *nodeclient.Remote) {
	t.Helper()
	url := testbin.NATSServer(t, "u", "p")
	n1 := startFakeNode(t, url, "n1", 1, time.Hour)
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	return n1, r
}

// wantGoneDelivered checks that r's Events already delivered node gone, having stopped
// responding.
func wantGoneDelivered(t *testing.T, r *nodeclient.Remote, node string) {
	t.Helper()
	select {
	case ev := <-r.Events():
		wantGone(t, ev, node)
		if !strings.Contains(ev.Gone.Reason, "node "+node+" stopped responding") {
			t.Errorf("%s gone: %q, want it stopped responding", node, ev.Gone.Reason)
		}
	default:
		t.Errorf("Events did not deliver the loss of %s", node)
	}
}

// TestRemoteSignalDeadNode: signalling a rank whose pcmd vanished marks the node gone at once.
func TestRemoteSignalDeadNode(t *testing.T) {
	t.Parallel()
	n1, r := quietNode(t)
	p, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=sig", testSecret}, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	n1.die()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal: %v", err)
	}
	if _, err := p.Wait(); !errors.Is(err, nodeclient.ErrNodeGone) {
		t.Errorf("Wait: %v, want nodeclient.ErrNodeGone", err)
	}
}

func wantLine(t *testing.T, out, pattern string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + pattern + `$`).MatchString(out) {
		t.Errorf("no line matching %q in:\n%s", pattern, out)
	}
}

// TestRemoteFetchesLostOutputAgain: output messages that NATS dropped on the way (the node
// published them while our connection was down) are asked from the node again when the
// rank's exit shows them missing: every line is printed once, the missing ones late.
func TestRemoteFetchesLostOutputAgain(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n := startFakeNode(t, url, "n1", 1, fastBeat)
	n.batch = 1 // one message per reply: a replay takes several requests
	lines := []job.RankOutput{
		{Stream: job.StreamStdout, Seq: 1, Line: []byte("one")},
		{Stream: job.StreamStdout, Seq: 2, Line: []byte("two")},
		{Stream: job.StreamStderr, Seq: 3, Line: []byte("three")},
		{Stream: job.StreamStdout, Seq: 4, Line: []byte("four")},
	}
	n.onSpawn = func(req job.SpawnRequest) {
		n.keepsAndRelays(lines, 0, 3, 0)(req) // 2 and 3 lost, 1 again
		n.relay(req.Rank, job.RankExitSubject(req.Job, req.Rank), job.RankExit{Sent: 4})
	}
	r, logs, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	p, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=replay", testSecret}, Output: func(_ rankproc.Stream, line []byte) {
		mu.Lock()
		got = append(got, string(line))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := p.Wait(); err != nil || !ex.Success() {
		t.Fatalf("Wait = %v, %v; want success", ex, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"one", "four", "two", "three"}; !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q (each once, the lost ones late)", got, want)
	}
	if s := logs.String(); !strings.Contains(s, "2 output messages of rank 0 on node n1 were lost on the way and fetched again from the node") || regexp.MustCompile(`(?m)were lost$`).MatchString(s) {
		t.Errorf("log: %s", s)
	}
}

// TestRemoteAsksAgainForALostExit: a rank the node's heartbeats no longer list, whose exit
// never arrived (published while our connection was down), ends with the exit the node
// kept, not as lost; a node that kept nothing leaves it lost; a rank the node says runs
// (the heartbeats were older than its start, queued while mpirun was stopped) runs on.
func TestRemoteAsksAgainForALostExit(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n := startFakeNode(t, url, "n1", 3, fastBeat)
	n.onSpawn = func(req job.SpawnRequest) {
		switch req.Rank {
		case 1:
			return // keeps nothing: a pcmd of an older version
		case 2:
			n.mu.Lock()
			n.kept[req.Rank] = job.ReplayReply{} // runs
			n.mu.Unlock()
			return
		}
		n.mu.Lock()
		n.kept[req.Rank] = job.ReplayReply{Output: []job.RankOutput{{Stream: job.StreamStdout, Seq: 1, Line: []byte("done")}}, Exit: &job.RankExit{Code: 0, Sent: 1}}
		n.mu.Unlock()
	}
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out testbin.Buffer
	env := []string{"MPIOS_JOB_ID=lostexit", testSecret}
	p0, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: env, Output: func(_ rankproc.Stream, line []byte) { out.Write(line) }})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := r.Start(rankproc.Spec{Rank: 1, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := r.Start(rankproc.Spec{Rank: 2, Path: "/opt/prog", Env: env, Output: func(rankproc.Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	delete(n.ranks, 0) // both end; their exit messages are lost
	delete(n.ranks, 1)
	delete(n.ranks, 2) // not listed, but it runs
	n.mu.Unlock()
	if ex, err := p0.Wait(); err != nil || !ex.Success() || out.String() != "done" {
		t.Errorf("rank 0: Wait = %v, %v, output %q; want success and its output", ex, err, out.String())
	}
	if _, err := p1.Wait(); err == nil || !strings.Contains(err.Error(), "no longer runs rank 1 and its exit status was lost") {
		t.Errorf("rank 1: Wait error %v, want its exit status lost", err)
	}
	select {
	case <-nodeclient.Finished(p2):
		_, err := p2.Wait()
		t.Fatalf("rank 2, which its node says runs, ended: %v", err)
	case <-time.After(10 * fastBeat):
	}
	n.relay(2, job.RankExitSubject("lostexit", 2), job.RankExit{Code: 0})
	if ex, err := p2.Wait(); err != nil || !ex.Success() {
		t.Errorf("rank 2: Wait = %v, %v; want success", ex, err)
	}
}

// TestRemoteFillsAGapAsSoonAsItShows: output messages lost in the middle of a rank's run are
// asked from the node when the next one arrives, not only at its exit.
func TestRemoteFillsAGapAsSoonAsItShows(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	n := startFakeNode(t, url, "n1", 1, fastBeat)
	lines := []job.RankOutput{
		{Stream: job.StreamStdout, Seq: 1, Line: []byte("one")},
		{Stream: job.StreamStdout, Seq: 2, Line: []byte("two")},
		{Stream: job.StreamStdout, Seq: 3, Line: []byte("three")},
	}
	n.onSpawn = n.keepsAndRelays(lines, 0, 2) // 2 lost; the rank runs on
	r, _, err := newRemote(t, url, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out testbin.Buffer
	if _, err := r.Start(rankproc.Spec{Rank: 0, Path: "/opt/prog", Env: []string{"MPIOS_JOB_ID=gap", testSecret},
		Output: func(_ rankproc.Stream, line []byte) { out.Write(append(line, ' ')) }}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != "one three two " {
		if time.Now().After(deadline) {
			t.Fatalf("printed %q, want the lost line fetched while the rank runs", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
