package pcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/agentdriver"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/spawner"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/profiler"
)

type node struct {
	cfg    Config
	log    *testbin.Buffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startNode runs Serve in the background and waits until the node answers.
func startNode(t *testing.T, nc *nats.Conn, cfg Config) *node {
	t.Helper()
	n := &node{cfg: cfg, log: &testbin.Buffer{}, done: make(chan error, 1)}
	if n.cfg.Heartbeat == 0 {
		n.cfg.Heartbeat = 50 * time.Millisecond
	}
	if n.cfg.KillGrace == 0 {
		n.cfg.KillGrace = 500 * time.Millisecond
	}
	n.cfg.Log = log.New(n.log, "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- Serve(ctx, n.cfg) }()
	t.Cleanup(func() {
		if err := n.stop(t); err != nil {
			t.Errorf("node %s: %v", cfg.Node, err)
		}
		if t.Failed() {
			t.Logf("log of node %s:\n%s", cfg.Node, n.log)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := nc.Request(job.NodeInfoSubject(cfg.Node), nil, time.Second); err == nil {
			return n
		}
		select {
		case err := <-n.done:
			n.done <- err
			t.Fatalf("Serve: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("node %s did not come up", cfg.Node)
	return nil
}

// stop cancels Serve and returns its result; later calls return the same.
func (n *node) stop(t *testing.T) error {
	n.once.Do(func() {
		n.cancel()
		select {
		case n.err = <-n.done:
		case <-time.After(10 * time.Second):
			n.err = fmt.Errorf("Serve of %s did not return after cancel", n.cfg.Node)
		}
	})
	return n.err
}

// rankScript writes the test rank program into a new directory and returns both.
func rankScript(t *testing.T) (dir, path string) {
	dir = t.TempDir()
	path = filepath.Join(dir, "rank.sh")
	script := `#!/bin/sh
case "$1" in
out) echo "bind=$MPIOS_BIND node=$MPIOS_NODE ckpt=$MPIOS_CKPT_DIR job=$MPIOS_JOB_ID pwd=$(pwd)"; echo "to stderr" >&2; exit 3;;
sleep) exec sleep 30;;
env) env;;
esac
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func spawnRaw(t *testing.T, nc *nats.Conn, node string, data []byte) job.SpawnReply {
	t.Helper()
	m, err := nc.Request(job.NodeSpawnSubject(node), data, 5*time.Second)
	if err != nil {
		t.Fatalf("spawn request: %v", err)
	}
	var rep job.SpawnReply
	testbin.NodeAnswer(t, m, &rep)
	return rep
}

func spawn(t *testing.T, nc *nats.Conn, node string, req job.SpawnRequest) job.SpawnReply {
	t.Helper()
	data, err := job.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	return spawnRaw(t, nc, node, data)
}

// watchRank subscribes to a rank's output and exit before it is spawned.
func watchRank(t *testing.T, nc *nats.Conn, jobID string, rank int) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(job.RankSubjects(jobID, rank))
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// waitExit reads a rank's messages up to its exit and returns the output lines and the exit.
func waitExit(t *testing.T, sub *nats.Subscription, limit time.Duration) ([]string, job.RankExit) {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(limit)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no exit message on %s within %v (lines %q): %v", sub.Subject, limit, lines, err)
		}
		if strings.HasSuffix(m.Subject, ".exit") {
			var e job.RankExit
			if err := job.Decode(m.Data, &e); err != nil {
				t.Fatal(err)
			}
			return lines, e
		}
		var o job.RankOutput
		if err := job.Decode(m.Data, &o); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%d:%s", o.Stream, o.Line))
	}
}

func info(t *testing.T, nc *nats.Conn, node string) job.NodeInfo {
	t.Helper()
	m, err := nc.Request(job.NodeInfoSubject(node), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("node %s info: %v", node, err)
	}
	ni, err := ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{})
	if err != nil {
		t.Fatal(err)
	}
	return ni
}

func TestSpawnOutputExitAndEnv(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	store := filepath.Join(t.TempDir(), "store")
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"},
		Slots: 2, Advertise: "127.0.0.2", Store: store})
	// The variables the node sets itself cannot come from a request: such a request is refused
	// whole, naming the variable, rather than silently overridden.
	for _, kv := range []string{"MPIOS_BIND=10.9.9.9", "MPIOS_NODE=fake", "MPIOS_CKPT_DIR=/elsewhere"} {
		rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j1", Rank: 0, Path: prog, Args: []string{"out"}, Dir: dir,
			Env: []string{"MPIOS_JOB_ID=j1", "MPIOS_RANK=0", kv}})
		name, _, _ := strings.Cut(kv, "=")
		if rep.PID != 0 || !strings.Contains(rep.Error, name) {
			t.Fatalf("spawn with %s: reply %+v, want a refusal naming it", kv, rep)
		}
	}
	sub := watchRank(t, nc, "j1", 0)
	rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j1", Rank: 0, Path: prog, Args: []string{"out"}, Dir: dir,
		Env: []string{"MPIOS_JOB_ID=j1", "MPIOS_RANK=0"}})
	if rep.Error != "" || rep.PID <= 0 || rep.Node != "n1" {
		t.Fatalf("spawn reply %+v", rep)
	}
	lines, exit := waitExit(t, sub, 5*time.Second)
	out := fmt.Sprintf("1:bind=127.0.0.2 node=n1 ckpt=%s job=j1 pwd=%s", store, dir)
	if len(lines) != 2 || !strings.Contains(strings.Join(lines, "\n"), out) || !strings.Contains(strings.Join(lines, "\n"), "2:to stderr") {
		t.Errorf("output %q, want %q and a stderr line", lines, out)
	}
	if exit.Code != 3 || exit.Signal != 0 || exit.Sent != 2 || exit.Error != "" {
		t.Errorf("exit %+v, want code 3 after 2 messages", exit)
	}
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store not created 0700: %v %v", fi, err)
	}
}

// TestRankEnvironmentIsMinimal: pcmd's own environment — its NATS token, anything else an
// operator's shell holds — never reaches a rank; only the variables spawner.PassedEnv and
// --pass-env name do, besides the job's and the node's MPIOS_* variables.
func TestRankEnvironmentIsMinimal(t *testing.T) { // not parallel: it sets pcmd's environment
	t.Setenv("PCMD_NATS_TOKEN", "s3cret-token")
	t.Setenv("PCMD_NATS_PASS", "s3cret-pass")
	t.Setenv("OPERATOR_ONLY", "1")
	t.Setenv("SITE_LICENSE", "42")
	t.Setenv("MPIOS_SECRET", "pcmd-own")
	t.Setenv("HOME", "/home/pcmd-test")
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, PassEnv: []string{"SITE_LICENSE"}})
	sub := watchRank(t, nc, "j1", 0)
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j1", Rank: 0, Path: prog, Args: []string{"env"},
		Env: []string{"MPIOS_JOB_ID=j1", "MPIOS_RANK=0"}}); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	lines, exit := waitExit(t, sub, 5*time.Second)
	if exit.Code != 0 {
		t.Fatalf("env exited %+v", exit)
	}
	got := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(strings.TrimPrefix(l, "1:"), "=")
		got[k] = v
	}
	for _, leak := range []string{"PCMD_NATS_TOKEN", "PCMD_NATS_PASS", "OPERATOR_ONLY", "MPIOS_SECRET"} {
		if v, ok := got[leak]; ok {
			t.Errorf("pcmd's %s=%s reached the rank", leak, v)
		}
	}
	for k, want := range map[string]string{"HOME": "/home/pcmd-test", "SITE_LICENSE": "42", "MPIOS_JOB_ID": "j1",
		"MPIOS_RANK": "0", "MPIOS_NODE": "n1", "MPIOS_BIND": DefaultAdvertise} {
		if got[k] != want {
			t.Errorf("rank's %s = %q, want %q", k, got[k], want)
		}
	}
	if got["PATH"] == "" {
		t.Error("the rank has no PATH")
	}
}

func TestSpawnRefusals(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 2})
	startNode(t, nc, Config{Node: "closed", InsecureOpen: true, NATS: NATSOptions{URL: url}, Slots: 2})
	startNode(t, nc, Config{Node: "pinned", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, PinArgs: []string{prog + " out"}})
	trick := dir + strings.Repeat("/..", strings.Count(dir, "/")) + "/bin/sh"
	ok := job.SpawnRequest{Job: "j", Rank: 0, Path: prog}
	with := func(f func(*job.SpawnRequest)) job.SpawnRequest { r := ok; f(&r); return r }
	cases := []struct {
		name string
		node string
		req  any // job.SpawnRequest or raw bytes
		code job.SpawnRefusal
		msg  string
	}{
		{"garbage", "n1", []byte("\xc1\xff\x00garbage"), job.RefuseInvalid, "pcmd: node n1 rejects a malformed spawn request"},
		{"wrong type", "n1", []byte("\xa5hello"), job.RefuseInvalid, "malformed"},
		{"not allowed", "n1", with(func(r *job.SpawnRequest) { r.Path = "/bin/sh" }), job.RefuseNotAllowed,
			"pcmd: node n1 refuses to run /bin/sh: not allowed by --allow"},
		{"dot-dot", "n1", with(func(r *job.SpawnRequest) { r.Path = trick }), job.RefuseNotAllowed,
			"refuses to run /bin/sh (given as " + trick + "): not allowed by --allow"},
		{"relative", "n1", with(func(r *job.SpawnRequest) { r.Path = "../../bin/sh" }), job.RefuseNotAllowed,
			"refuses to run ../../bin/sh: not an absolute path"},
		{"no allow", "closed", ok, job.RefuseNotAllowed, "pcmd: node closed refuses to run " + prog + ": no --allow given"},
		{"LD_PRELOAD", "n1", with(func(r *job.SpawnRequest) { r.Env = []string{"LD_PRELOAD=/tmp/x.so"} }), job.RefuseInvalid,
			"only MPIOS_* variables"},
		{"env mismatch", "n1", with(func(r *job.SpawnRequest) { r.Env = []string{"MPIOS_JOB_ID=other"} }), job.RefuseInvalid,
			"MPIOS_JOB_ID is \"other\""},
		{"missing program", "n1", with(func(r *job.SpawnRequest) { r.Path = dir + "/missing" }), job.RefuseFailed,
			"no such file on this node"},
		{"not executable", "n1", with(func(r *job.SpawnRequest) { r.Path = dir }), job.RefuseNotAllowed, "not allowed"},
		{"bad dir", "n1", with(func(r *job.SpawnRequest) { r.Dir = "/nonexistent" }), job.RefuseInvalid, "not an existing absolute directory"},
		{"foreign subject", "n1", with(func(r *job.SpawnRequest) { r.Out = "mpios.job.other.hello" }), job.RefuseInvalid, "reply subject"},
		{"wildcard subject", "n1", with(func(r *job.SpawnRequest) { r.Exit = "mpios.job.j.>" }), job.RefuseInvalid, "reply subject"},
		{"bad job id", "n1", with(func(r *job.SpawnRequest) { r.Job = "a.b" }), job.RefuseInvalid, "invalid spawn request"},
		{"negative rank", "n1", with(func(r *job.SpawnRequest) { r.Rank = -1 }), job.RefuseInvalid, "negative"},
		{"pinned arguments", "pinned", with(func(r *job.SpawnRequest) { r.Args = []string{"out", "-dump", "/etc/passwd"} }), job.RefuseNotAllowed,
			"pcmd: node pinned refuses to run " + prog + ` with arguments ["out" "-dump" "/etc/passwd"]: --pin-args allows only`},
	}
	for _, c := range cases {
		var rep job.SpawnReply
		if raw, isRaw := c.req.([]byte); isRaw {
			rep = spawnRaw(t, nc, c.node, raw)
		} else {
			rep = spawn(t, nc, c.node, c.req.(job.SpawnRequest))
		}
		if rep.Refusal != c.code || !strings.Contains(rep.Error, c.msg) || rep.PID != 0 {
			t.Errorf("%s: reply %+v, want refusal %q with %q", c.name, rep, c.code, c.msg)
		}
	}
	// The pinned arguments are allowed.
	sub := watchRank(t, nc, "pin", 0)
	if rep := spawn(t, nc, "pinned", job.SpawnRequest{Job: "pin", Rank: 0, Path: prog, Args: []string{"out"}}); rep.Error != "" {
		t.Errorf("pinned arguments refused: %v", rep.Error)
	} else if _, e := waitExit(t, sub, 5*time.Second); e.Code != 3 {
		t.Errorf("pinned rank exit %+v", e)
	}
	// A request without a reply subject is dropped, and nothing above crashed the node.
	if err := nc.Publish(job.NodeSpawnSubject("n1"), []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if ni := info(t, nc, "n1"); ni.Used != 0 {
		t.Errorf("refused requests hold %d slots", ni.Used)
	}
}

func TestSlotsDuplicatesAndSignals(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 2})
	sleeper := func(rank int) job.SpawnRequest {
		return job.SpawnRequest{Job: "j2", Rank: rank, Path: prog, Args: []string{"sleep"}}
	}
	sub0 := watchRank(t, nc, "j2", 0)
	sub1 := watchRank(t, nc, "j2", 1)
	rep0 := spawn(t, nc, "n1", sleeper(0))
	if rep0.Error != "" {
		t.Fatal(rep0.Error)
	}
	if rep := spawn(t, nc, "n1", sleeper(0)); rep.Refusal != job.RefuseDuplicate ||
		!strings.Contains(rep.Error, fmt.Sprintf("already runs rank 0 of job j2 (pid %d)", rep0.PID)) {
		t.Errorf("duplicate: %+v", rep)
	}
	if rep := spawn(t, nc, "n1", sleeper(1)); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if rep := spawn(t, nc, "n1", sleeper(2)); rep.Refusal != job.RefuseNoSlot || !strings.Contains(rep.Error, "no free slot for rank 2 of job j2 (2 of 2 in use)") {
		t.Errorf("over the slots: %+v", rep)
	}
	ni := info(t, nc, "n1")
	if ni.Used != 2 || len(ni.Ranks) != 2 || ni.Ranks[0].PID != rep0.PID || ni.Ranks[1].Rank != 1 {
		t.Errorf("info %+v, want 2 ranks", ni)
	}

	signal := func(data []byte) job.SignalReply {
		m, err := nc.Request(job.NodeSignalSubject("n1"), data, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep job.SignalReply
		testbin.NodeAnswer(t, m, &rep)
		return rep
	}
	enc := func(r job.SignalRequest) []byte { b, _ := job.Encode(r); return b }
	if rep := signal([]byte{0xc1}); !strings.Contains(rep.Error, "malformed signal request") {
		t.Errorf("garbage signal: %+v", rep)
	}
	if rep := signal(enc(job.SignalRequest{Job: "j2", Rank: 0, Signal: 0})); !strings.Contains(rep.Error, "not a signal") {
		t.Errorf("signal 0: %+v", rep)
	}
	if rep := signal(enc(job.SignalRequest{Job: "j2", Rank: 7, Signal: 15})); !rep.NotFound {
		t.Errorf("unknown rank: %+v", rep)
	}
	if rep := signal(enc(job.SignalRequest{Job: "j2", Rank: 0, Signal: int(syscall.SIGTERM)})); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if _, e := waitExit(t, sub0, 5*time.Second); e.Signal != int(syscall.SIGTERM) || e.Code != -1 {
		t.Errorf("rank 0 exit %+v, want SIGTERM", e)
	}
	if rep := signal(enc(job.SignalRequest{Job: "j2", Rank: 1, Signal: int(syscall.SIGKILL)})); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if _, e := waitExit(t, sub1, 5*time.Second); e.Signal != int(syscall.SIGKILL) {
		t.Errorf("rank 1 exit %+v, want SIGKILL", e)
	}
	// The slots are free again (the exit is published just before the slot is released).
	deadline := time.Now().Add(2 * time.Second)
	for info(t, nc, "n1").Used != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if rep := spawn(t, nc, "n1", sleeper(0)); rep.Error != "" {
		t.Errorf("respawn after exit: %v", rep.Error)
	}
}

// TestKeepAliveLease: ranks of a launcher that stopped sending keepalives are stopped;
// those of a live one are not. Every rank holds a lease: one whose request named none, or
// a longer one than the node's --lease, is stopped after the node's.
func TestKeepAliveLease(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 4, Lease: 400 * time.Millisecond})
	subs := map[string]*nats.Subscription{}
	for id, lease := range map[string]time.Duration{"dead": 300 * time.Millisecond, "live": 300 * time.Millisecond, "unleased": 0, "greedy": time.Hour} {
		subs[id] = watchRank(t, nc, id, 0)
		if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: id, Rank: 0, Path: prog, Args: []string{"sleep"},
			KeepAlive: lease}); rep.Error != "" {
			t.Fatal(rep.Error)
		}
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_ = nc.Publish(job.KeepAliveSubject("live"), nil)
			}
		}
	}()
	for _, id := range []string{"dead", "unleased", "greedy"} {
		_, e := waitExit(t, subs[id], 5*time.Second)
		if e.Signal != int(syscall.SIGTERM) || !strings.Contains(e.Reason, "no keepalive from the launcher of job "+id) {
			t.Errorf("job %s: exit %+v, want SIGTERM for lack of keepalive", id, e)
		}
	}
	time.Sleep(500 * time.Millisecond)
	ni := info(t, nc, "n1")
	close(stop)
	if len(ni.Ranks) != 1 || ni.Ranks[0].Job != "live" {
		t.Errorf("ranks %+v, want the live job's rank still running", ni.Ranks)
	}
	if _, e := waitExit(t, subs["live"], 5*time.Second); e.Signal == 0 {
		t.Errorf("live job's rank %+v, want it stopped once its keepalives stop", e)
	}
}

func TestShutdownStopsRanksAndDeregisters(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	n := startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 1})
	beats, err := nc.SubscribeSync(job.NodesHeartbeatSubject)
	if err != nil {
		t.Fatal(err)
	}
	sub := watchRank(t, nc, "j", 0)
	rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j", Rank: 0, Path: prog, Args: []string{"sleep"}})
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if err := n.stop(t); err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	_, e := waitExit(t, sub, time.Second)
	if e.Signal != int(syscall.SIGTERM) || !strings.Contains(e.Reason, "pcmd on node n1 is shutting down") {
		t.Errorf("exit %+v", e)
	}
	if err := syscall.Kill(rep.PID, 0); err == nil {
		t.Errorf("rank pid %d survived pcmd", rep.PID)
	}
	leaving := false
	for !leaving {
		m, err := beats.NextMsg(time.Second)
		if err != nil {
			t.Fatal("no leaving heartbeat")
		}
		ni, err := ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{})
		leaving = err == nil && ni.Leaving
	}
	if _, err := nc.Request(job.NodeInfoSubject("n1"), nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("stopped node still listens: %v", err)
	}
}

func TestNodeNameInUse(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}})
	err := Serve(context.Background(), Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Log: log.New(&testbin.Buffer{}, "", 0)})
	if !errors.Is(err, ErrNodeNameInUse) || !strings.Contains(err.Error(), "node n1 is already served by pcmd pid") {
		t.Errorf("second pcmd for n1: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]Config{
		"node name":                        {Node: "a.b"},
		"want a pattern of absolute paths": {Node: "n", Allow: []string{"bin/*"}},
		"syntax error in pattern":          {Node: "n", Allow: []string{"/bin/["}},
		"slots: want 1 to":                 {Node: "n", Slots: job.MaxSlots + 1},
		"advertise address":                {Node: "n", Advertise: "a b"},
		"heartbeat 1ns":                    {Node: "n", Heartbeat: time.Nanosecond},
		"lease 2h0m0s":                     {Node: "n", Lease: 2 * time.Hour},
		"--pin-args \"x\"":                 {Node: "n", PinArgs: []string{"x"}},
		"no NATS URL":                      {Node: "n"},
		"give only one of":                 {Node: "n", NATS: NATSOptions{URL: "nats://x", Token: "t", User: "u", Password: "p"}},
		"needs a password":                 {Node: "n", NATS: NATSOptions{URL: "nats://x", User: "u"}},
		"--policy: unknown policy":         {Node: "n", NATS: NATSOptions{URL: "nats://x"}, IOS: agentdriver.Config{Policy: "x"}},
		"--pass-env \"MPIOS_SECRET\"":      {Node: "n", PassEnv: []string{"MPIOS_SECRET"}},
		"--pass-env \"A=B\"":               {Node: "n", PassEnv: []string{"A=B"}},
	}
	for want, cfg := range cases {
		cfg.InsecureOpen = true
		if err := Serve(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Serve error %v, want one containing %q", err, want)
		}
	}
	// A node must say whom it takes spawn requests from.
	if err := Serve(context.Background(), Config{Node: "n", NATS: NATSOptions{URL: "nats://x"}}); !errors.Is(err, spawner.ErrNoLauncherPolicy) {
		t.Errorf("Serve without --authorized-launchers or --insecure-open: %v", err)
	}
}

func TestDiscoverStatus(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Slots: 3})
	n2 := startNode(t, nc, Config{Node: "n2", InsecureOpen: true, NATS: NATSOptions{URL: url}, Slots: 1})
	time.Sleep(150 * time.Millisecond) // a few heartbeats: the nodes know each other
	st, err := nodestatus.DiscoverStatus(nc, 200*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 2 || st.Nodes[0].Name != "n1" || st.Nodes[0].Slots != 3 || st.Nodes[1].State != nodestatus.StateAlive {
		t.Errorf("status %+v", st)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil || !strings.Contains(text.String(), "n2    alive  0/1") {
		t.Errorf("text status:\n%s", text.String())
	}
	if err := n2.stop(t); err != nil {
		t.Fatal(err)
	}
	st, err = nodestatus.DiscoverStatus(nc, 200*time.Millisecond, nil)
	if err != nil || len(st.Nodes) != 1 || st.Nodes[0].Name != "n1" {
		t.Errorf("after n2 deregistered: %+v, %v", st, err)
	}
}

// Through Serve: the agents of two nodes become neighbours through pcmd's heartbeats, a
// rank's profile reaches its node's agent, and pcmd status shows both; a node that stops
// leaves its neighbours' protocol.
func TestServeIOSAgentsAndStatus(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	// A protocol that runs in milliseconds, on the real /proc: the rank is a real process.
	ios := agentdriver.Config{Period: 20 * time.Millisecond, Tick: 10 * time.Millisecond, Seed: 7,
		Protocol: iosbridge.Config{StealTimeout: time.Second, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond, PeerTimeout: 2 * time.Second}}
	n1 := startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, IOS: ios})
	ios.Policy = "flcras"
	n2 := startNode(t, nc, Config{Node: "n2", InsecureOpen: true, NATS: NATSOptions{URL: url}, IOS: ios})
	rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j", Rank: 0, Path: prog, Args: []string{"sleep"}})
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	// The rank's profile, as it would publish it.
	prof, err := json.Marshal(profiler.RankProfile{Job: "j", Rank: 0, Node: "n1", PID: rep.PID, Policy: "sras", At: time.Now(),
		Since: time.Now().Add(-10 * time.Second), ElapsedSeconds: 10, CommSeconds: 1, CompSeconds: 9,
		Iteration: 10, Iterations: 10, MeanIterSeconds: 0.5, PlannedIterations: 1000, StateBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(job.ProfileSubject("j"), prof); err != nil {
		t.Fatal(err)
	}
	var st nodestatus.Status
	testbin.WaitFor(t, 10*time.Second, "both agents in pcmd status, neighbours, with n1's profile", func() bool {
		var err error
		if st, err = nodestatus.DiscoverStatus(nc, 300*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		if len(st.Nodes) != 2 || st.Nodes[0].IOS == nil || st.Nodes[1].IOS == nil {
			return false
		}
		a, b := st.Nodes[0].IOS, st.Nodes[1].IOS
		return len(a.Peers) == 1 && a.Peers[0] == "n2" && len(b.Peers) == 1 && b.Peers[0] == "n1" &&
			len(a.Profiles) == 1 && a.JobPolicies["j"] == "sras"
	})
	a := st.Nodes[0].IOS
	if a.Policy != "mpiios" || st.Nodes[1].IOS.Policy != "flcras" || a.EffectiveCPUs <= 0 || a.SampledAt.IsZero() || a.LoadSource == "" ||
		a.Profiles[0].PID != rep.PID || a.Profiles[0].Iteration != 10 {
		t.Errorf("n1's agent %+v", a)
	}
	var js bytes.Buffer
	if err := st.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ios": {`, `"policy": "mpiios"`, `"decisions": [`, `"profiles": [`, `"planned_iterations": 1000`, `"steal":`, `"load_source": "`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("status JSON lacks %q:\n%s", want, js.String())
		}
	}
	var txt bytes.Buffer
	if err := st.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POLICY", "mpiios (j=sras)", "flcras", "ITERATION", "10/1000", "0.5", "10%", "LOAD FROM", a.LoadSource} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, txt.String())
		}
	}
	if err := n2.stop(t); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 5*time.Second, "n1's agent to drop n2", func() bool {
		s, err := nodestatus.DiscoverStatus(nc, 200*time.Millisecond, nil)
		return err == nil && len(s.Nodes) == 1 && s.Nodes[0].IOS != nil && len(s.Nodes[0].IOS.Peers) == 0
	})
	_ = n1
}
