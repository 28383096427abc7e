package pcmd

import (
	"log"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
)

func ranksOf(jobID string, ranks ...int) []job.RankInfo {
	var out []job.RankInfo
	for _, r := range ranks {
		out = append(out, job.RankInfo{Job: jobID, Rank: r, PID: 1000 + r})
	}
	return out
}

// Graceful leave (issue 16): a draining node's ranks go to its peers' free slots, each job
// to as few nodes as possible, the roomiest peer first.
func TestADrainingNodesRanksGoToItsPeersFreeSlots(t *testing.T) {
	peers := []job.NodeInfo{
		{Name: "n2", Slots: 4, Used: 3},
		{Name: "n3", Slots: 4, Used: 1},
		{Name: "n4", Slots: 2, Used: 2},
		{Name: "n5", Slots: 8, Draining: true}, // leaving too: takes no ranks
	}
	ranks := append(ranksOf("b", 0), ranksOf("a", 2, 0, 1)...)
	moves, stuck := planDrain(ranks, peers)
	want := []job.DrainMove{
		{Job: "a", Ranks: []int{0, 1, 2}, To: "n3"},
		{Job: "b", Ranks: []int{0}, To: "n2"},
	}
	if !reflect.DeepEqual(moves, want) || len(stuck) != 0 {
		t.Errorf("planDrain = %+v, stuck %+v; want %+v", moves, stuck, want)
	}
}

// A job that fits on no single peer is split over as few as the free slots allow.
func TestAJobIsSplitOnlyWhenNoPeerHoldsIt(t *testing.T) {
	peers := []job.NodeInfo{{Name: "n3", Slots: 2}, {Name: "n2", Slots: 2}}
	moves, stuck := planDrain(ranksOf("a", 0, 1, 2), peers)
	want := []job.DrainMove{{Job: "a", Ranks: []int{0, 1}, To: "n2"}, {Job: "a", Ranks: []int{2}, To: "n3"}}
	if !reflect.DeepEqual(moves, want) || len(stuck) != 0 {
		t.Errorf("planDrain = %+v, stuck %+v; want %+v", moves, stuck, want)
	}
}

// Ranks that find no free slot are named; the node then refuses to drain.
func TestRanksWithoutRoomAreStuck(t *testing.T) {
	moves, stuck := planDrain(ranksOf("a", 0, 1), []job.NodeInfo{{Name: "n2", Slots: 2, Used: 1}})
	if len(moves) != 1 || !reflect.DeepEqual(moves[0].Ranks, []int{0}) || len(stuck) != 1 || stuck[0].Rank != 1 {
		t.Errorf("planDrain = %+v, stuck %+v", moves, stuck)
	}
	if moves, stuck := planDrain(nil, nil); moves != nil || stuck != nil {
		t.Errorf("an empty node: %+v %+v", moves, stuck)
	}
}

// "The job shrinks, when it is malleable and no slot is free" (issue 16): the jobs of the
// ranks that found no room leave this node altogether when they are malleable and keep a
// rank elsewhere; their ranks free no peer slot, so the other jobs are placed again.
func TestADrainShrinksAMalleableJobWhenNoPeerHasRoom(t *testing.T) {
	ranks := append(append(ranksOf("a", 0, 1), ranksOf("b", 2, 3)...), ranksOf("c", 0)...)
	peers := []job.NodeInfo{{Name: "n2", Slots: 4, Used: 3}} // one free slot
	moves, stuck := planDrain(ranks, peers)
	if len(moves) != 1 || len(stuck) != 4 {
		t.Fatalf("planDrain = %+v, stuck %+v", moves, stuck)
	}
	infos := map[string]job.JobInfo{
		"a": {Job: "a", Size: 4, Malleable: true}, // ranks 2, 3 elsewhere: shrinks to 2
		"b": {Job: "b", Size: 4},                  // rigid
		"c": {Job: "c", Size: 1, Malleable: true}, // nothing elsewhere
	}
	shrinks, rest, notes := planShrinks(ranks, stuck, infos, "n1")
	if want := []job.DrainMove{{Job: "a", Ranks: []int{0, 1}, ShrinkTo: 2}}; !reflect.DeepEqual(shrinks, want) {
		t.Errorf("shrinks %+v, want %+v", shrinks, want)
	}
	if want := append(ranksOf("b", 2, 3), ranksOf("c", 0)...); !reflect.DeepEqual(rest, want) {
		t.Errorf("left to place %+v, want %+v", rest, want)
	}
	wantNotes := []string{"job b cannot shrink: its ranks keep no distributed data", "job c cannot shrink: all its 1 ranks run on n1"}
	if !reflect.DeepEqual(notes, wantNotes) {
		t.Errorf("notes %q, want %q", notes, wantNotes)
	}
	if _, _, notes := planShrinks(ranks, stuck, nil, "n1"); len(notes) != 3 || notes[0] != "job a did not say whether it can shrink" {
		t.Errorf("jobs that did not answer: %q", notes)
	}
	// A shrink is a valid drain reply entry without a target.
	if err := (job.DrainReply{Node: "n1", Moves: shrinks}).Validate(); err != nil {
		t.Errorf("a reply with a shrink: %v", err)
	}
}

// A forged JobInfo (issue 14, item 7): another NATS client answers a drain's info requests
// first, calling the jobs malleable, in clear or under a key that is not the job's. The node
// verifies each answer with the key it learnt from the job's spawns: only mpirun's genuine
// answer counts, the others are logged and their jobs not shrunk (they did not answer).
func TestADrainShrinksOnlyOnAJobInfoUnderTheJobsKey(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	secret := func(j string) []byte { return []byte("the secret of job " + j + ", 32 bytes...") }
	keys, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"a", "b", "c"} {
		if err := keys.Learn(j, secret(j), ""); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(j string, under []byte) {
		var ch *ctlauth.JobChannel
		if under != nil {
			var err error
			if ch, err = ctlauth.NewJobChannel(j, under, ctlauth.Sender{Role: ctlauth.RoleLauncher}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nc.Subscribe(job.JobInfoSubject(j), func(m *nats.Msg) {
			info := job.JobInfo{Job: j, Size: 4, Malleable: true}
			data, _ := job.Encode(info)
			if ch != nil {
				data, _ = ch.Encode(m.Reply, info, time.Now())
			}
			_ = m.Respond(data)
		}); err != nil {
			t.Fatal(err)
		}
	}
	answer("a", secret("a"))                           // mpirun
	answer("b", nil)                                   // in clear
	answer("c", []byte("not the secret of c, at all")) // under another key
	answer("d", secret("d"))                           // a job this node never ran ranks of
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	logs := &testbin.Buffer{}
	s := &server{nc: nc, jobKeys: keys, log: log.New(logs, "", 0)}
	var ranks []job.RankInfo
	for _, j := range []string{"a", "b", "c", "d"} {
		ranks = append(ranks, ranksOf(j, 0, 1)...)
	}
	infos := s.jobInfos(ranks)
	if len(infos) != 1 || !infos["a"].Malleable {
		t.Fatalf("infos %+v; log:\n%s", infos, logs)
	}
	shrinks, rest, _ := planShrinks(ranks, ranks, infos, "n1")
	if want := []job.DrainMove{{Job: "a", Ranks: []int{0, 1}, ShrinkTo: 2}}; !reflect.DeepEqual(shrinks, want) || len(rest) != 6 {
		t.Errorf("shrinks %+v (want %+v), %d ranks left", shrinks, want, len(rest))
	}
	for _, j := range []string{"b", "c", "d"} {
		if !strings.Contains(logs.String(), "ignoring job "+j+"'s info (taken as not malleable)") {
			t.Errorf("no note of job %s's unverified info; log:\n%s", j, logs)
		}
	}
}

func drain(t *testing.T, nc *nats.Conn, node string) job.DrainReply {
	t.Helper()
	rep, err := nodestatus.Drain(nc, node, job.DrainRequest{Reason: "maintenance"}, nil, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Through Serve: a drain without room is refused and changes nothing; with room, the node
// takes no new ranks, asks the job to move its rank to the peer, and exits once the rank
// left.
func TestDrainMovesRanksAwayThenTheNodeExits(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	n1 := startNode(t, nc, Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 2})
	sub := watchRank(t, nc, "j", 0)
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j", Rank: 0, Path: prog, Args: []string{"sleep"}}); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if rep := drain(t, nc, "n1"); !strings.Contains(rep.Error, "cannot drain: no alive peer has a free slot for j/0; it goes on taking ranks") {
		t.Errorf("drain without a peer: %+v", rep)
	}
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j", Rank: 1, Path: prog, Args: []string{"sleep"}}); rep.Error != "" {
		t.Errorf("after a refused drain: %v", rep.Error)
	}
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "j", Rank: 1, Path: prog, Args: []string{"sleep"}}); rep.Refusal != job.RefuseDuplicate {
		t.Fatalf("rank 1 not running: %+v", rep)
	}

	startNode(t, nc, Config{Node: "n2", InsecureOpen: true, NATS: NATSOptions{URL: url}, Slots: 2})
	testbin.WaitFor(t, 5*time.Second, "n1 to hear n2", func() bool {
		m, err := nc.Request(job.NodesDiscoverSubject, nil, time.Second)
		if err != nil {
			return false
		}
		v, err := ctlauth.VerifyNodeView(m.Subject, m.Data, ctlauth.AnyKey{})
		return err == nil && v.Self.Name == "n1" && len(v.Peers) == 1
	})
	// The job's mpirun, played by the test: it accepts, and its ranks leave n1.
	asked := make(chan job.ControlRequest, 1)
	if _, err := nc.Subscribe(job.ControlSubject("j"), func(m *nats.Msg) {
		var req job.ControlRequest
		if e, err := ctlauth.DecodeEnvelope(m.Data); err == nil && e.Scheme == ctlauth.SchemeNKeySign && e.From.Node == "n1" {
			_ = job.Decode(e.Body, &req)
		}
		asked <- req
		b, _ := job.Encode(job.ControlReply{OK: true, Message: "moving at iteration 7"})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	rep := drain(t, nc, "n1")
	want := []job.DrainMove{{Job: "j", Ranks: []int{0, 1}, To: "n2", Accepted: true, Answer: "moving at iteration 7"}}
	if rep.Error != "" || !reflect.DeepEqual(rep.Moves, want) {
		t.Fatalf("drain = %+v, want moves %+v", rep, want)
	}
	if req := <-asked; req.Kind != job.ControlMigrate || req.To != "n2" || !reflect.DeepEqual(req.Ranks, []int{0, 1}) || !req.Drain ||
		req.Reason != "pcmd drain of node n1: maintenance" {
		t.Errorf("control request %+v", req)
	}
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "k", Rank: 0, Path: prog}); rep.Refusal != job.RefuseStopping || !strings.Contains(rep.Error, "draining") {
		t.Errorf("a draining node admitted a rank: %+v", rep)
	}
	st, err := nodestatus.DiscoverStatus(nc, 200*time.Millisecond, nil)
	var text strings.Builder
	if err != nil || len(st.Nodes) != 2 || !st.Nodes[0].Draining || st.Nodes[1].Draining || st.Nodes[0].Used != 2 ||
		st.WriteText(&text) != nil || !strings.Contains(text.String(), "n1    draining  2/2") {
		t.Errorf("status of a draining node: %+v %v\n%s", st.Nodes, err, text.String())
	}
	select {
	case err := <-n1.done:
		t.Fatalf("n1 exited with ranks left: %v", err)
	case <-time.After(300 * time.Millisecond): // several heartbeats
	}
	for r := range 2 {
		b, _ := job.Encode(job.SignalRequest{Job: "j", Rank: r, Signal: int(syscall.SIGTERM)})
		if _, err := nc.Request(job.NodeSignalSubject("n1"), b, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, e := waitExit(t, sub, 5*time.Second); e.Signal != int(syscall.SIGTERM) {
		t.Errorf("rank 0: %+v", e)
	}
	select {
	case err := <-n1.done:
		n1.done <- err // for the cleanup's stop
		if err != nil {
			t.Errorf("drained n1: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("n1 did not exit once drained")
	}
	if !strings.Contains(n1.log.String(), "drained: no rank left, shutting down") {
		t.Errorf("n1's log:\n%s", n1.log)
	}
}

// A node that is not --insecure-open takes a drain only signed by its own key (its
// operator's, pcmd drain --node-key): unsigned ones and ones signed by another key claiming
// the node are refused and leave it open; its own key drains it, and its answer, signed by
// that key, is the one the operator reads, whoever answers first.
func TestADrainMustBeSignedByTheNodesOwnKey(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir := t.TempDir()
	launcher, _ := nkeys.CreateUser()
	pub, _ := launcher.PublicKey()
	authorized := filepath.Join(dir, "authorized")
	if err := os.WriteFile(authorized, []byte(pub+" alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	own, _ := nkeys.CreateServer()
	seed, _ := own.Seed()
	seedFile := filepath.Join(dir, "n1.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	startNode(t, nc, Config{Node: "n1", AuthorizedLaunchers: authorized, NodeKey: seedFile, NATS: NATSOptions{URL: url}, Slots: 2})
	other, _ := nkeys.CreateServer()
	signer := func(kp nkeys.KeyPair) *ctlauth.KeyWrapper {
		w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, uint64(time.Now().UnixNano()))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for name, sign := range map[string]*ctlauth.KeyWrapper{"unsigned": nil, "another key": signer(other)} {
		rep, err := nodestatus.Drain(nc, "n1", job.DrainRequest{Reason: "x"}, sign, 5*time.Second)
		if err != nil || rep.Error == "" {
			t.Errorf("%s drain: %+v, %v; want a refusal", name, rep, err)
		}
		if info(t, nc, "n1").Draining {
			t.Fatalf("%s drain closed the node", name)
		}
	}
	// Anyone can answer a drain first: an outsider says every rank moved, in clear and
	// signed as n1 by its own key. The operator hears the node alone.
	forged := job.DrainReply{Node: "n1", Moves: []job.DrainMove{{Job: "x", Ranks: []int{0}, To: "n2", Accepted: true, Answer: "forged"}}}
	body, _ := job.Encode(forged)
	sub, err := nc.Subscribe(job.NodeDrainSubject("n1"), func(m *nats.Msg) {
		_ = m.Respond(body)
		if signed, err := signer(other).Wrap(m.Reply, body, time.Now()); err == nil {
			_ = m.Respond(signed)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	rep, err := nodestatus.Drain(nc, "n1", job.DrainRequest{Reason: "maintenance"}, signer(own), 5*time.Second)
	if err != nil || rep.Error != "" || len(rep.Moves) != 0 {
		t.Fatalf("drain signed by the node's own key: %+v, %v; want the node's answer (nothing to move)", rep, err)
	}
}

// "A drain that cannot place the ranks says why": a move a job accepted may be aborted later
// (its target filled up, or drains too), and the ranks stay. The node plans again while it
// runs ranks, drainRetryFirst after a plan, then at twice the interval, at most
// drainRetryMost; a node without ranks, or without a plan, plans nothing.
func TestADrainIsPlannedAgainWhileItsRanksStay(t *testing.T) {
	var r drainRetry
	t0 := time.Unix(1000, 0)
	if r.due(t0.Add(time.Hour), 2) {
		t.Fatal("a retry before any plan")
	}
	r.planned(t0)
	if r.due(t0.Add(drainRetryFirst-time.Millisecond), 2) || !r.due(t0.Add(drainRetryFirst), 2) {
		t.Errorf("first retry not at %v after the plan", drainRetryFirst)
	}
	if r.due(t0.Add(time.Hour), 0) {
		t.Error("a retry on a node without ranks")
	}
	// Each retry is itself a plan: the next one comes twice as late, at most drainRetryMost.
	at := t0
	var waits []time.Duration
	for range 6 {
		next := at.Add(max(r.wait, drainRetryFirst))
		if r.due(next.Add(-time.Millisecond), 1) || !r.due(next, 1) {
			t.Fatalf("retry %d not due exactly %v after the last plan", len(waits)+1, next.Sub(at))
		}
		at = next
		r.planned(at)
		waits = append(waits, r.wait)
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute, time.Minute}; !slices.Equal(waits, want) {
		t.Errorf("intervals %v, want %v", waits, want)
	}
}
