package agentdriver

import (
	"encoding/json"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/profiler"
)

// fakeSampler reports a node with 2 CPUs whose availability the test sets.
type fakeSampler struct {
	node  string
	mu    sync.Mutex
	avail float64
	fail  error
}

func (f *fakeSampler) Sample(now time.Time, ranks []iosbridge.RankID) (iosbridge.NodeProfile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return iosbridge.NodeProfile{}, f.fail
	}
	return iosbridge.NodeProfile{Node: f.node, CPUs: 2, EffectiveCPUs: 2, Availability: f.avail,
		MemFreeBytes: 8 << 30, MemTotalBytes: 16 << 30, Ranks: ranks, SampledAt: now}, nil
}

// rankTable is a node's rank table as the test wants it.
type rankTable struct {
	mu    sync.Mutex
	ranks []job.RankInfo
}

func (r *rankTable) get() []job.RankInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]job.RankInfo(nil), r.ranks...)
}

type testAgent struct {
	*Agent
	sampler *fakeSampler
	table   *rankTable
	log     *testbin.Buffer
}

// fastIOS is an Config whose protocol runs in milliseconds.
func fastIOS(policy string) Config {
	return Config{
		Policy: policy, Period: 20 * time.Millisecond, Tick: 10 * time.Millisecond, Procs: NoProcesses, Seed: 7,
		Protocol: iosbridge.Config{StealTimeout: time.Second, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond, PeerTimeout: 2 * time.Second},
	}
}

// startAgentT runs an agent for node with a fake sampler (availability avail), the given
// rank table and peers, until the test ends.
func startAgentT(t *testing.T, url, node string, cfg Config, avail float64, ranks []job.RankInfo, peers ...string) *testAgent {
	t.Helper()
	nc := testbin.Connect(t, url)
	ta := &testAgent{sampler: &fakeSampler{node: node, avail: avail}, table: &rankTable{ranks: ranks}, log: &testbin.Buffer{}}
	cfg.Sampler = ta.sampler
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Key, err = ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, 0); err != nil {
		t.Fatal(err)
	}
	a, err := Start(cfg, node, nc, log.New(ta.log, node+" ", 0), ta.table.get, func() []string { return peers })
	if err != nil {
		t.Fatal(err)
	}
	ta.Agent = a
	var once sync.Once
	t.Cleanup(func() {
		once.Do(a.Stop)
		if t.Failed() {
			t.Logf("log of agent %s:\n%s", node, ta.log)
		}
	})
	return ta
}

// loadedRanks is a table of n ranks of job j, started an hour ago (out of their cooldown).
func loadedRanks(j string, n int) []job.RankInfo {
	var out []job.RankInfo
	for r := range n {
		out = append(out, job.RankInfo{Job: j, Rank: r, PID: 1000 + r, Started: time.Now().Add(-time.Hour)})
	}
	return out
}

// publishProfiles publishes, as the ranks would, a profile of every rank in table: a long
// iterative job (990 iterations of 0.5 s left, 1 MiB of state).
func publishProfiles(t *testing.T, nc *nats.Conn, node, policy string, table []job.RankInfo) {
	t.Helper()
	publishProfilesUnder(t, nc, nil, node, policy, table)
}

// publishProfilesUnder is publishProfiles under the job key of ranks (nil: in clear).
func publishProfilesUnder(t *testing.T, nc *nats.Conn, ranks *ctlauth.JobChannel, node, policy string, table []job.RankInfo) {
	t.Helper()
	for _, r := range table {
		p := profiler.RankProfile{Job: r.Job, Rank: r.Rank, Node: node, PID: r.PID, Policy: policy, At: time.Now(),
			Since: time.Now().Add(-10 * time.Second), ElapsedSeconds: 10, CommSeconds: 1, CompSeconds: 9,
			Iteration: 10, Iterations: 10, MeanIterSeconds: 0.5, PlannedIterations: 1000, StateBytes: 1 << 20,
			Sent: []profiler.PeerTraffic{{Rank: (r.Rank + 1) % len(table), Messages: 20, Bytes: 1 << 16}}}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if ranks != nil {
			if data, err = ranks.Wrap(job.ProfileSubject(r.Job), data, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Publish(job.ProfileSubject(r.Job), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// controller stands in for a job's mpirun: it records the ControlRequests on the job's ctl
// subject and answers each with the next reply (the last one repeats).
type controller struct {
	mu       sync.Mutex
	reqs     []job.ControlRequest
	replies  []job.ControlReply
	got      chan job.ControlRequest
	launcher *ctlauth.JobChannel // answers under the job key, as mpirun; nil: in clear
}

// answerUnder makes c answer under the job key of ch, as mpirun does: nodes that know it
// take no other answer.
func (c *controller) answerUnder(ch *ctlauth.JobChannel) {
	c.mu.Lock()
	c.launcher = ch
	c.mu.Unlock()
}

// awaitRequest returns the next control request the controller gets, and fails the test
// with why() if none comes within 15 s.
func (c *controller) awaitRequest(t *testing.T, why func() string) job.ControlRequest {
	t.Helper()
	select {
	case req := <-c.got:
		return req
	case <-time.After(15 * time.Second):
		t.Fatal(why())
		return job.ControlRequest{}
	}
}

// busyAndIdle starts a NATS server, a controller for job j answering replies, and two
// neighbour agents: B, fully used and running j's four ranks (table) under policy busy, and
// A, idle, under policy idle. It returns a connection to the server and B.
func busyAndIdle(t *testing.T, busy, idle string, replies ...job.ControlReply) (*nats.Conn, *controller, []job.RankInfo, *testAgent) {
	t.Helper()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", replies...)
	table := loadedRanks("j", 4)
	b := startAgentT(t, url, "B", fastIOS(busy), 0, table, "A")
	startAgentT(t, url, "A", fastIOS(idle), 1, nil, "B")
	return nc, ctl, table, b
}

func newController(t *testing.T, nc *nats.Conn, jobID string, replies ...job.ControlReply) *controller {
	t.Helper()
	c := &controller{replies: replies, got: make(chan job.ControlRequest, 100)}
	if _, err := nc.Subscribe(job.ControlSubject(jobID), func(m *nats.Msg) {
		var req job.ControlRequest
		e, err := ctlauth.DecodeEnvelope(m.Data)
		if err != nil || e.Scheme != ctlauth.SchemeNKeySign || e.From.Node == "" {
			t.Errorf("control request not signed by a node: %v %+v", err, e.From)
			return
		}
		if err := job.Decode(e.Body, &req); err != nil || req.Validate() != nil {
			t.Errorf("bad control request: %v %+v", err, req)
			return
		}
		c.mu.Lock()
		rep := c.replies[min(len(c.reqs), len(c.replies)-1)]
		c.reqs = append(c.reqs, req)
		launcher := c.launcher
		c.mu.Unlock()
		data, _ := job.Encode(rep)
		if launcher != nil {
			data, _ = launcher.Encode(m.Reply, rep, time.Now())
		}
		_ = m.Respond(data)
		c.got <- req
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *controller) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

func iosState(t *testing.T, nc *nats.Conn, node string) job.IOSState {
	t.Helper()
	m, err := nc.Request(job.IOSStateSubject(node), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("IOS state of %s: %v", node, err)
	}
	signed, err := ctlauth.VerifyStatement(m.Subject, m.Data, ctlauth.NodeKey{Node: node, AnyKey: true})
	if err != nil {
		t.Fatalf("IOS state of %s not signed by the node: %v", node, err)
	}
	var st job.IOSState
	if err := job.Decode(signed.Body, &st); err != nil {
		t.Fatal(err)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	return st
}

func eventsOf(st job.IOSState, kind string) []job.IOSEvent {
	var out []job.IOSEvent
	for _, e := range st.Events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// MPI/IOS: "new nodes join network existing nodes idle ... contact peers randomly steal";
// "decision component local ios agent predicts gain migrating process remote processor";
// "mpi process gets notified migration event". Node A is idle, node B runs four ranks on two
// busy CPUs: A's steal request reaches B over NATS, B's mpiios policy gives a rank, and B
// asks the rank's job to move it to A on the job's ctl subject.
func TestAgentIdleNodeStealsFromLoadedNode(t *testing.T) {
	t.Parallel()
	nc, ctl, table, b := busyAndIdle(t, "", "", job.ControlReply{OK: true, Message: "moving at iteration 12"})
	publishProfiles(t, nc, "B", "", table)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no migration request; B's state %+v", iosState(t, nc, "B")) })
	if req.Kind != job.ControlMigrate || req.To != "A" || req.Rank < 0 || req.Rank > 3 ||
		!strings.HasPrefix(req.Reason, "ios mpiios: node A steals, gain ") || !strings.Contains(req.Reason, "ln(L=") {
		t.Fatalf("control request %+v", req)
	}
	var st job.IOSState
	testbin.WaitFor(t, 5*time.Second, "B to record the accepted migration", func() bool {
		st = iosState(t, nc, "B")
		return st.Stats.MigrationsOK > 0
	})
	gives := eventsOf(st, job.IOSGive)
	if len(gives) == 0 || gives[0].Peer != "A" || gives[0].Policy != iosbridge.PolicyMPIIOS || gives[0].Gain <= 0 || gives[0].Job != "j" {
		t.Errorf("B's give events %+v", gives)
	}
	if ok := eventsOf(st, job.IOSMigrateOK); len(ok) == 0 || ok[0].Reason != "moving at iteration 12" {
		t.Errorf("B's migrate-ok events %+v", ok)
	}
	if st.Policy != "mpiios" || st.Stats.RanksGiven == 0 || len(st.Profiles) != 4 || st.Availability != 0 ||
		len(st.Peers) != 1 || st.Peers[0] != "A" {
		t.Errorf("B's state %+v", st)
	}
	var p profiler.RankProfile
	if err := json.Unmarshal(st.Profiles[0], &p); err != nil || p.Job != "j" || p.Rank != 0 || p.PID != 1000 {
		t.Errorf("B's first profile %+v %v", p, err)
	}
	sa := iosState(t, nc, "A")
	if stolen := eventsOf(sa, job.IOSStolen); len(stolen) == 0 || stolen[0].Peer != "B" || stolen[0].Job != "j" {
		t.Errorf("A's stolen events %+v", stolen)
	}
	if sa.Stats.StealsSent == 0 || sa.Stats.StealsAccepted == 0 {
		t.Errorf("A's stats %+v", sa.Stats)
	}
	if !strings.Contains(b.log.String(), "asking job j to move rank") {
		t.Errorf("B's log:\n%s", b.log)
	}
}

// A job refuses the first migration: the giver calls MigrationFailed, the rank becomes a
// candidate again and a later steal moves it (or another one). The stealer is told (a
// signed KindMigrationFailed) and records it: it no longer counts the rank as coming.
func TestAgentRefusedMigrationIsRetried(t *testing.T) {
	t.Parallel()
	nc, ctl, table, _ := busyAndIdle(t, "", "", job.ControlReply{Error: "rank 1 is checkpointing"},
		job.ControlReply{OK: true, Message: "moving"})
	publishProfiles(t, nc, "B", "", table)
	testbin.WaitFor(t, 15*time.Second, "two migration requests", func() bool { return ctl.count() >= 2 })
	var st job.IOSState
	testbin.WaitFor(t, 5*time.Second, "B to record both outcomes", func() bool {
		st = iosState(t, nc, "B")
		return st.Stats.MigrationsFailed >= 1 && st.Stats.MigrationsOK >= 1
	})
	if f := eventsOf(st, job.IOSMigrateFailed); len(f) == 0 || f[0].Reason != "refused: rank 1 is checkpointing" {
		t.Errorf("failed migrations %+v", f)
	}
	ctl.mu.Lock()
	refused := ctl.reqs[0].Rank
	ctl.mu.Unlock()
	testbin.WaitFor(t, 5*time.Second, "A to be told that B's first move failed", func() bool {
		f := eventsOf(iosState(t, nc, "A"), job.IOSMigrateFailed)
		return len(f) > 0 && f[0].Peer == "B" && f[0].Job == "j" && f[0].Rank == refused
	})
	// The refused rank is in cooldown: the job is not asked about it again at every steal.
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	for _, r := range ctl.reqs[1:] {
		if r.Rank == ctl.reqs[0].Rank {
			t.Errorf("refused rank %d asked for again: %+v", r.Rank, ctl.reqs)
		}
	}
}

// startLoadedPair starts agents B (four ranks of job j just started on two busy CPUs, as
// successors of migrated ranks or fresh) and A (idle), and a controller for j.
func startLoadedPair(t *testing.T, successor bool) (*nats.Conn, *controller) {
	t.Helper()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", job.ControlReply{OK: true})
	table := loadedRanks("j", 4)
	for i := range table {
		table[i].Started, table[i].Successor = time.Now(), successor
	}
	startAgentT(t, url, "B", fastIOS(""), 0, table, "A")
	startAgentT(t, url, "A", fastIOS(""), 1, nil, "B")
	publishProfiles(t, nc, "B", "", table)
	return nc, ctl
}

// "Stability": a rank that just arrived on a node as the successor of a migrated rank is
// not moved within the cooldown.
func TestAgentMigratedRanksAreInCooldown(t *testing.T) {
	t.Parallel()
	nc, ctl := startLoadedPair(t, true)
	testbin.WaitFor(t, 10*time.Second, "B to decline steal requests", func() bool {
		d := eventsOf(iosState(t, nc, "B"), job.IOSDecline)
		return len(d) >= 2 && strings.Contains(d[len(d)-1].Reason, "4 in cooldown")
	})
	if n := ctl.count(); n != 0 {
		t.Fatalf("%d migration requests for ranks in cooldown", n)
	}
}

// A job adapts from its first iterations: ranks that have just started fresh (not as
// successors of migrated ones) are moved as soon as a node steals, with no cooldown.
func TestAgentFreshRanksMoveAtOnce(t *testing.T) {
	t.Parallel()
	nc, ctl := startLoadedPair(t, false)
	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("fresh ranks not moved; B's state %+v", iosState(t, nc, "B")) })
	if req.Kind != job.ControlMigrate || req.To != "A" {
		t.Fatalf("control request %+v", req)
	}
}

// "none" never moves anything: neither as the job's policy (mpirun --policy none, carried
// by the profiles) on nodes running mpiios, nor as the node's policy for jobs without one.
func TestAgentPolicyNoneNeverMigrates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, node, job string }{
		{"job policy none", "", "none"},
		{"node policy none", "none", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nc, ctl, table, _ := busyAndIdle(t, c.node, "", job.ControlReply{OK: true})
			publishProfiles(t, nc, "B", c.job, table)
			var st job.IOSState
			testbin.WaitFor(t, 10*time.Second, "B to decline several steal requests", func() bool {
				st = iosState(t, nc, "B")
				return len(eventsOf(st, job.IOSDecline)) >= 3
			})
			time.Sleep(200 * time.Millisecond)
			if n := ctl.count(); n != 0 {
				t.Fatalf("%d migration requests under policy none", n)
			}
			st = iosState(t, nc, "B")
			if st.Stats.RanksGiven != 0 || len(eventsOf(st, job.IOSGive)) != 0 {
				t.Fatalf("B gave ranks: %+v", st)
			}
			d := eventsOf(st, job.IOSDecline)
			if !strings.Contains(d[len(d)-1].Reason, "policy none never migrates") && !strings.Contains(d[len(d)-1].Reason, "stability") {
				t.Errorf("decline reason %q", d[len(d)-1].Reason)
			}
			if c.job == "none" && st.JobPolicies["j"] != "none" {
				t.Errorf("job policies %v", st.JobPolicies)
			}
			if sa := iosState(t, nc, "A"); sa.Stats.StealsSent < 3 {
				t.Errorf("A sent only %d steal requests", sa.Stats.StealsSent)
			}
		})
	}
}

// Anybody can publish on mpios.ios.B: malformed, misaddressed and invalid messages are
// counted, logged and dropped, and the agent keeps working.
func TestAgentDropsBadInput(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	table := loadedRanks("j", 1)
	b := startAgentT(t, url, "B", fastIOS(""), 0, table)
	nodeKey := func(node string) *ctlauth.KeyWrapper {
		kp, err := nkeys.CreateServer()
		if err != nil {
			t.Fatal(err)
		}
		w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	keyA, otherA := nodeKey("A"), nodeKey("A")
	signedBy := func(w *ctlauth.KeyWrapper, v any) []byte {
		body, err := job.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		data, err := w.Wrap(job.IOSInboxSubject("B"), body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	send := func(v any) {
		data, ok := v.([]byte)
		if !ok {
			data = signedBy(keyA, v) // node A's, as its agent signs them
		}
		if err := nc.Publish(job.IOSInboxSubject("B"), data); err != nil {
			t.Fatal(err)
		}
	}
	send([]byte("\xc1 not msgpack"))
	// Issue 14: a fake steal request, unsigned or signed by another key than the one node A
	// signed with first, is dropped.
	send(must(job.Encode(iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "A", To: "B"})))
	send(iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "A", To: "C"})                 // misaddressed
	send(iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "x.>", To: "B"})               // not a node name
	send(iosbridge.Message{Kind: iosbridge.KindJoin, From: "A", To: "B", TTL: 1000})           // TTL out of range
	send(iosbridge.Message{Kind: "explode", From: "A", To: "B"})                               // unknown kind
	send(iosbridge.Message{Kind: iosbridge.KindStealRequest, From: "A", To: "B", Origin: "A"}) // no profile
	send(iosbridge.Message{Kind: iosbridge.KindAnnounce, From: "A", To: "B", Peers: []string{"ok", "bad name"}})
	send(signedBy(otherA, iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "A", To: "B"}))
	bad := func(data string) {
		if err := nc.Publish(job.ProfileSubject("j"), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	bad("{not json")
	bad(`{"job":"k","rank":0,"node":"B"}`)                   // on job j's subject
	bad(`{"job":"j","rank":0,"node":"B","policy":"bogus"}`)  // unknown policy
	bad(`{"job":"j","rank":0,"node":"B","iteration":-5}`)    // impossible values
	bad(`{"job":"j","rank":0,"node":"elsewhere","pid":999}`) // another node's rank: ignored, not bad
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var st job.IOSState
	testbin.WaitFor(t, 5*time.Second, "the bad input to be counted", func() bool {
		st = iosState(t, nc, "B")
		return st.Stats.BadMessages == 9 && st.Stats.BadProfiles == 4
	})
	if len(st.Peers) != 0 || len(st.Profiles) != 0 {
		t.Fatalf("bad input changed the state: %+v", st)
	}
	// Still working: a good heartbeat makes A a neighbour.
	send(iosbridge.Message{Kind: iosbridge.KindHeartbeat, From: "A", To: "B"})
	testbin.WaitFor(t, 5*time.Second, "A to become B's neighbour", func() bool {
		st = iosState(t, nc, "B")
		return len(st.Peers) == 1 && st.Peers[0] == "A"
	})
	logText := b.log.String()
	for _, want := range []string{"dropping a protocol message that does not verify", "dropping a malformed profile"} {
		if !strings.Contains(logText, want) {
			t.Errorf("log lacks %q:\n%s", want, logText)
		}
	}
	if st.Stats.BadMessages != 9 {
		t.Errorf("bad messages %d after a good one", st.Stats.BadMessages)
	}
}

// Sampling errors are reported in the state, and the protocol keeps the last good sample.
func TestAgentSampleError(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	b := startAgentT(t, url, "B", fastIOS("sras"), 0.5, nil)
	testbin.WaitFor(t, 5*time.Second, "a sample", func() bool { return !iosState(t, nc, "B").SampledAt.IsZero() })
	b.sampler.mu.Lock()
	b.sampler.fail = fmt.Errorf("iosbridge: sample: /proc/stat: permission denied")
	b.sampler.mu.Unlock()
	testbin.WaitFor(t, 5*time.Second, "the sample error", func() bool {
		st := iosState(t, nc, "B")
		return st.SampleError == "sample: /proc/stat: permission denied" && st.Availability == 0.5 && st.Policy == "sras"
	})
}

func TestConfigErrors(t *testing.T) {
	for want, c := range map[string]Config{
		"unknown policy":         {Policy: "roundrobin"},
		"steal-threshold 2":      {StealThreshold: 2},
		"steal-ttl 100":          {TTL: 100},
		"IOS period 1ns":         {Period: time.Nanosecond},
		"must not be negative":   {Cooldown: -time.Second},
		"IOS period 2s and tick": {Tick: time.Nanosecond},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error with %q", c, err, want)
		}
	}
	if c := (Config{Disabled: true, Policy: "roundrobin"}); c.Validate() != nil {
		t.Error("a disabled agent's config was checked")
	}
	c := Config{Policy: " SRAS "}
	if err := c.Validate(); err != nil || c.Policy != "sras" || c.Period != DefaultPeriod || c.Sampler == nil || c.Procs == nil {
		t.Errorf("defaults %+v %v", c, err)
	}
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}

// chainWindow is what each slice of a chain reports over a profile window of 10 s.
type chainWindow struct {
	commSeconds, compSeconds float64
	iterations, planned      int64
	meanIterSeconds          float64
	received                 int64 // messages received
	sent                     int64 // messages sent to each neighbour
	bytes                    int64 // bytes sent to each neighbour
}

var (
	// busyChain's slices compute 90% of the time.
	busyChain = chainWindow{commSeconds: 1, compSeconds: 9, iterations: 10, planned: 1000, meanIterSeconds: 0.5,
		received: 40, sent: 20, bytes: 20 << 16}
	// waitingChain is bulk-synchronous: its slices spend 2.3 ms computing per message and
	// ~6 ms in mpi calls.
	waitingChain = chainWindow{commSeconds: 7.24, compSeconds: 2.76, iterations: 600, planned: 100000, meanIterSeconds: 0.0167,
		received: 1200, sent: 600, bytes: 600 << 14}
)

// publishChain publishes, as the ranks would, the profiles of the ranks of job j in table,
// running on node under the job's policy: slices of an n-slice chain, each sending a halo to
// its two neighbours, as w says.
func publishChain(t *testing.T, nc *nats.Conn, node, policy string, n int, table []job.RankInfo, w chainWindow) {
	t.Helper()
	for _, r := range table {
		p := profiler.RankProfile{Job: r.Job, Rank: r.Rank, Node: node, PID: r.PID, Policy: policy, At: time.Now(),
			Since: time.Now().Add(-10 * time.Second), ElapsedSeconds: 10, CommSeconds: w.commSeconds, CompSeconds: w.compSeconds,
			Iteration: w.iterations, Iterations: w.iterations, MeanIterSeconds: w.meanIterSeconds, PlannedIterations: w.planned,
			StateBytes: 1 << 20, ReceivedMessages: w.received}
		for _, q := range []int{r.Rank - 1, r.Rank + 1} {
			if q >= 0 && q < n {
				p.Sent = append(p.Sent, profiler.PeerTraffic{Rank: q, Messages: w.sent, Bytes: w.bytes})
			}
		}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(job.ProfileSubject(r.Job), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Thesis §2.2.1.2 through pcmd's agents over NATS: a job that chose ATS-RAS (mpirun --policy
// atsras, carried by its ranks' profiles) on two busy nodes running the default policy
// (mpiios), its 4-slice chain placed round robin (A: 0, 2; B: 1, 3), every halo crossing.
// Nothing is idle, so only an exchange regroups the slices: a busy node offers a slice, the
// other swaps one of its own for it, and each asks the job to move its half of the swap to
// the other node.
func TestAgentJobPolicyExchangesBetweenBusyNodesOfAnotherPolicy(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", job.ControlReply{OK: true})
	all := loadedRanks("j", 4)
	onA, onB := []job.RankInfo{all[0], all[2]}, []job.RankInfo{all[1], all[3]}
	startAgentT(t, url, "A", fastIOS(""), 0, onA, "B")
	startAgentT(t, url, "B", fastIOS(""), 0, onB, "A")
	publishChain(t, nc, "A", iosbridge.PolicyATSRAS, 4, onA, busyChain)
	publishChain(t, nc, "B", iosbridge.PolicyATSRAS, 4, onB, busyChain)

	var reqs []job.ControlRequest
	for len(reqs) < 2 {
		select {
		case req := <-ctl.got:
			reqs = append(reqs, req)
		case <-time.After(15 * time.Second):
			t.Fatalf("migration requests %+v; A's state %+v; B's state %+v", reqs, iosState(t, nc, "A"), iosState(t, nc, "B"))
		}
	}
	to := map[string]int{}
	for _, r := range reqs {
		if r.Kind != job.ControlMigrate || !strings.Contains(r.Reason, "swap") || !strings.HasPrefix(r.Reason, "ios atsras: ") {
			t.Fatalf("control request %+v", r)
		}
		// Each is its node's part of one exchange, which the job moves as one joint move.
		if x := r.Exchange; x == nil || x.Origin == "" || !slices.Equal(x.Parties, []string{"A", "B"}) ||
			x.Origin != reqs[0].Exchange.Origin || x.ID != reqs[0].Exchange.ID {
			t.Fatalf("control request %+v does not name the exchange", r)
		}
		to[r.To]++
	}
	if to["A"] != 1 || to["B"] != 1 {
		t.Fatalf("want one rank moved each way: %+v", reqs)
	}
	sa, sb := iosState(t, nc, "A"), iosState(t, nc, "B")
	if sa.Stats.ExchangesSent+sb.Stats.ExchangesSent == 0 || sa.Stats.RanksSwapped+sb.Stats.RanksSwapped != 1 {
		t.Errorf("exchange stats: A %+v, B %+v", sa.Stats, sb.Stats)
	}
}

// Thesis eq. 2.3 through pcmd's agents over NATS, issue 17's joins experiment: node B runs a
// bulk-synchronous 4-slice chain whose ranks spend 2.3 ms computing per message and ~6 ms in
// mpi calls, waiting for each other (all their halos stay on B). A joins idle. Only what
// crosses the network grows when a rank moves, priced with the round trip B's agent measured
// to A with its heartbeat pings; the wait is carried over, so ATS-RAS gives A a rank. Scaling
// the whole wait, as before, made every rank look slower on A and none moved.
func TestAgentATSRASGivesAWaitingRankToAJoiningNodeWithTheMeasuredRoundTrip(t *testing.T) {
	t.Parallel()
	nc, ctl, table, b := busyAndIdle(t, iosbridge.PolicyATSRAS, iosbridge.PolicyATSRAS, job.ControlReply{OK: true})
	publishChain(t, nc, "B", "", len(table), table, waitingChain)
	req := ctl.awaitRequest(t, func() string {
		return fmt.Sprintf("no migration request; B's state %+v\nB's log:\n%s", iosState(t, nc, "B"), b.log)
	})
	if req.Kind != job.ControlMigrate || req.To != "A" || !strings.HasPrefix(req.Reason, "ios atsras: ") ||
		!strings.Contains(req.Reason, "network ") || strings.Contains(req.Reason, "network 0s/msg") {
		t.Fatalf("control request %+v: want a rank given to A, priced with a measured round trip", req)
	}
}

// Eq. 2.3 through pcmd's agents with the bandwidth measured: B's agent is told of the bulk
// transfers it received from A (pcmd's pieceserver tells it of each buddy copy), shows the
// bandwidth in its status (peer_bandwidth_bps; a transfer too small to measure is left
// out), and its ATS-RAS prices the messages a move makes cross at that bandwidth, which the
// decision's reason names as measured, not MPI-IOS's default.
func TestAgentATSRASPricesALinkWithTheBandwidthOfTheTransfersFromIt(t *testing.T) {
	t.Parallel()
	nc, ctl, table, b := busyAndIdle(t, iosbridge.PolicyATSRAS, iosbridge.PolicyATSRAS, job.ControlReply{OK: true})
	waitState := func(what string, ok func(job.IOSState) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for st := iosState(t, nc, "B"); !ok(st); st = iosState(t, nc, "B") {
			if time.Now().After(deadline) {
				t.Fatalf("B's state never showed %s: %+v\nB's log:\n%s", what, st, b.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitState("A as a peer", func(st job.IOSState) bool { return slices.Contains(st.Peers, "A") })
	b.ObserveTransfer("A", 32<<10, time.Millisecond) // a halo's worth: says nothing of the bandwidth
	b.ObserveTransfer("A", 8<<20, 80*time.Millisecond)
	want := float64(8<<20) / 0.08
	waitState("the bandwidth from A", func(st job.IOSState) bool { return st.PeerBandwidth["A"] != 0 })
	if got := iosState(t, nc, "B").PeerBandwidth; len(got) != 1 || got["A"] != want {
		t.Fatalf("B's bandwidths %v, want %v B/s from A (the 32 KB transfer left out)", got, want)
	}
	publishChain(t, nc, "B", "", len(table), table, waitingChain)
	req := ctl.awaitRequest(t, func() string {
		return fmt.Sprintf("no migration request; B's state %+v\nB's log:\n%s", iosState(t, nc, "B"), b.log)
	})
	if req.Kind != job.ControlMigrate || req.To != "A" || !strings.Contains(req.Reason, " 105 MB/s measured") {
		t.Fatalf("control request %+v: want a rank given to A, priced at the bandwidth measured from it", req)
	}
}
