package pcm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// natsConns starts an in-process NATS server and returns n clients of it.
func natsConns(t *testing.T, n int) []*nats.Conn {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(srv.Shutdown)
	var out []*nats.Conn
	for range n {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		out = append(out, nc)
	}
	return out
}

func manifestOf(id string, seq uint64) []byte {
	m := ckptstore.Manifest{Job: id, Seq: seq, Iteration: int64(seq) * 10, Size: 1,
		Pieces: []ckptstore.PieceInfo{{Rank: 0, Node: "n1", Size: 8, Checksum: "x"}}}
	b, _ := json.Marshal(m)
	return b
}

// "A forged manifest reply broke a restart" (issue 14, item 7): a restarting rank asks the
// nodes for its job's manifests and believes only lists under the job key from the node
// they name. The attacker answers first, in clear, under a key of its own, and under the
// job key's name with another node's name; the genuine node's list is all that counts.
func TestForgedManifestListsAreIgnored(t *testing.T) {
	conns := natsConns(t, 3)
	rankNC, nodeNC, evilNC := conns[0], conns[1], conns[2]
	secret := bytes.Repeat([]byte{7}, 32)
	ring, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Learn("job1", secret, ""); err != nil {
		t.Fatal(err)
	}
	evilKey, _ := ctlauth.NewJobChannel("job1", bytes.Repeat([]byte{8}, 32), ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, time.Now())
	// Another process of the job would hold the key, but it does not speak for a node it
	// names: a list sent as a rank claiming node n1 is refused too.
	rankKey, _ := ctlauth.NewJobChannel("job1", secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: 3}, time.Now())

	forgedList := job.ManifestsReply{Node: "n1", Manifests: [][]byte{manifestOf("job1", 9)}}
	forged := make(chan struct{})
	evilSub, err := evilNC.Subscribe(job.ManifestsSubjects, func(m *nats.Msg) {
		defer close(forged)
		plain, _ := job.Encode(forgedList)
		m.Respond(plain)
		other, _ := evilKey.Encode(m.Reply, forgedList, time.Now())
		m.Respond(other)
		asRank, _ := rankKey.Encode(m.Reply, forgedList, time.Now())
		m.Respond(asRank)
		evilNC.Flush()
	})
	if err != nil {
		t.Fatal(err)
	}
	evilNC.Flush()
	nodeSub, err := nodeNC.Subscribe(job.ManifestsSubjects, func(m *nats.Msg) {
		var req job.ManifestsRequest
		if _, err := ring.Decode(job.RequesterOf(m.Subject), m.Subject, m.Data, &req, time.Now()); err != nil {
			t.Errorf("the node: %v", err)
			return
		}
		<-forged // the forgeries go first
		data, _ := ring.Encode("job1", m.Reply, job.ManifestsReply{Node: "n1", Manifests: [][]byte{manifestOf("job1", 2), manifestOf("job1", 1)}}, time.Now())
		m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	nodeNC.Flush()
	defer evilSub.Unsubscribe()
	defer nodeSub.Unsubscribe()

	auth, _ := ctlauth.NewJobChannel("job1", secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: 0}, time.Now())
	var log bytes.Buffer
	cands := collectManifests(rankNC, auth, "job1", time.Second, &log)
	if len(cands) != 2 || !cands[1].ok || !cands[2].ok || cands[2].m.Iteration != 20 {
		t.Errorf("candidates %+v, want the genuine checkpoints 1 and 2 only", cands)
	}
	if _, forged := cands[9]; forged {
		t.Error("the forged checkpoint 9 is a candidate")
	}
	if n := strings.Count(log.String(), "ignoring a manifest list that is not authenticated"); n != 3 {
		t.Errorf("%d forged lists logged, want 3:\n%s", n, log.String())
	}
}

// FuzzManifestsIn: the manifest lists nodes send (each manifest JSON inside a msgpack
// reply) are parsed without panicking, and only well-formed manifests of the job asked
// for come out.
func FuzzManifestsIn(f *testing.F) {
	good, _ := job.Encode(job.ManifestsReply{Node: "n1", Manifests: [][]byte{manifestOf("job1", 2), []byte(`{"job":"job1","seq":0}`)}})
	f.Add(good)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep job.ManifestsReply
		if job.Decode(data, &rep) != nil {
			return
		}
		for _, m := range manifestsIn(rep, "job1") {
			if m.Job != "job1" || m.Seq == 0 || m.Size != len(m.Pieces) {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}

// A rank asking a node for a piece takes only an offer under its job key: forged offers
// that arrive first (in clear, under another key) are skipped, and the node's own offer is
// taken. A refusal in clear is the answer only when nothing authenticated follows.
func TestForgedPieceOffersAreSkipped(t *testing.T) {
	conns := natsConns(t, 3)
	rankNC, nodeNC, evilNC := conns[0], conns[1], conns[2]
	secret := bytes.Repeat([]byte{7}, 32)
	ring, _ := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	ring.Learn("job1", secret, "")
	evilKey, _ := ctlauth.NewJobChannel("job1", bytes.Repeat([]byte{8}, 32), ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, time.Now())
	subject := job.PieceSubject("n1", "job1")
	bogus := job.PieceReply{Addr: "10.6.6.6:666", Token: []byte("0123456789abcdef"), Size: 8}
	forged := make(chan struct{})
	if _, err := evilNC.Subscribe(subject, func(m *nats.Msg) {
		defer close(forged)
		plain, _ := job.Encode(bogus)
		m.Respond(plain)
		other, _ := evilKey.Encode(m.Reply, bogus, time.Now())
		m.Respond(other)
		evilNC.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	evilNC.Flush()
	if _, err := nodeNC.Subscribe(subject, func(m *nats.Msg) {
		var req job.PieceRequest
		if _, err := ring.Decode("job1", m.Subject, m.Data, &req, time.Now()); err != nil {
			t.Errorf("the node: %v", err)
			return
		}
		<-forged
		data, _ := ring.Encode("job1", m.Reply, job.PieceReply{Addr: "127.0.0.1:7000", Token: []byte("fedcba9876543210"), Size: 8}, time.Now())
		m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	nodeNC.Flush()
	auth, _ := ctlauth.NewJobChannel("job1", secret, ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	p := &Process{launched: &rewire.Launched{Conn: rankNC, Auth: auth}}
	rep, err := p.askNode(subject, job.PieceRequest{Job: "job1", Seq: 1, Rank: 0}, 5*time.Second)
	if err != nil || rep.Addr != "127.0.0.1:7000" {
		t.Fatalf("took %+v, %v; want the node's own offer", rep, err)
	}

	// A node that does not know the job refuses in clear: that is the answer.
	other := job.PieceSubject("n2", "job1")
	if _, err := nodeNC.Subscribe(other, func(m *nats.Msg) {
		plain, _ := job.Encode(job.PieceReply{Error: "pcmd: node n2: has not learned its key"})
		m.Respond(plain)
	}); err != nil {
		t.Fatal(err)
	}
	nodeNC.Flush()
	if _, err := p.askNode(other, job.PieceRequest{Job: "job1", Seq: 1, Rank: 0}, 30*time.Second); err == nil || !strings.Contains(err.Error(), "has not learned its key") {
		t.Errorf("a refusal in clear: %v", err)
	}
}

// A job restarted on other nodes (mpirun --restart rs1 as job rs2) reads rs1's checkpoints
// from nodes that know only rs1: with rs1's secret (MPIOS_RESTART_SECRET) its rank asks for
// rs1's manifests and pieces as a process of rs1, under rs1's key and on subjects naming
// rs1, and the node's replies verify. Without the secret it asks under rs2's key, which such
// a node does not know, and gets nothing.
func TestRestartReadsTheOriginalJobsCheckpointsUnderItsKey(t *testing.T) {
	conns := natsConns(t, 2)
	rankNC, nodeNC := conns[0], conns[1]
	rs1Secret, rs2Secret := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	ring, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Learn("rs1", rs1Secret, "launcher"); err != nil {
		t.Fatal(err)
	}
	// The node's policy, as internal/pieceserver applies it: the request verifies under
	// the key of the job its subject names, which may read the job it asks about.
	serve := func(m *nats.Msg, req any, jobOf func() string, rep any) {
		requester := job.RequesterOf(m.Subject)
		if _, err := ring.Decode(requester, m.Subject, m.Data, req, time.Now()); err != nil {
			plain, _ := job.Encode(job.PieceReply{Error: "pcmd: node n1: " + err.Error()})
			m.Respond(plain)
			return
		}
		if !ring.MayRead(requester, jobOf()) {
			t.Errorf("the node: job %s may not read job %s", requester, jobOf())
			return
		}
		data, err := ring.Encode(requester, m.Reply, rep, time.Now())
		if err != nil {
			t.Errorf("the node: %v", err)
			return
		}
		m.Respond(data)
	}
	if _, err := nodeNC.Subscribe(job.ManifestsSubjects, func(m *nats.Msg) {
		var req job.ManifestsRequest
		serve(m, &req, func() string { return req.Job }, job.ManifestsReply{Node: "n1", Manifests: [][]byte{manifestOf("rs1", 2)}})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodeNC.Subscribe(job.PieceSubjects("n1"), func(m *nats.Msg) {
		var req job.PieceRequest
		serve(m, &req, func() string { return req.Job }, job.PieceReply{Addr: "127.0.0.1:7000", Token: []byte("fedcba9876543210"), Size: 8})
	}); err != nil {
		t.Fatal(err)
	}
	nodeNC.Flush()

	own, err := ctlauth.NewJobChannel("rs2", rs2Secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: 0}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{JobID: "rs2", Restart: "rs1", RestartSecret: rs1Secret, Log: io.Discard}
	restart, err := restartChannel(opts, 0, time.Now())
	if err != nil || restart == nil || restart.Job() != "rs1" {
		t.Fatalf("restart channel %v, %v; want one of job rs1", restart, err)
	}
	p := &Process{opts: opts, launched: &rewire.Launched{Conn: rankNC, Auth: own}, restartAuth: restart}
	if cands := p.remoteCandidates("rs1"); len(cands) != 1 || !cands[2].ok {
		t.Errorf("candidates %+v, want rs1's checkpoint 2", cands)
	}
	auth := p.readAuth("rs1")
	rep, err := p.askNodeAs(auth, job.PieceSubject("n1", auth.Job()), job.PieceRequest{Job: "rs1", Seq: 2, Rank: 0}, 5*time.Second)
	if err != nil || rep.Addr != "127.0.0.1:7000" {
		t.Errorf("piece offer %+v, %v; want the node's", rep, err)
	}

	// Without rs1's secret the rank speaks as rs2, which this node never learned.
	opts.RestartSecret = nil
	if ch, err := restartChannel(opts, 0, time.Now()); ch != nil || err != nil {
		t.Fatalf("restart channel without a secret: %v, %v", ch, err)
	}
	p = &Process{opts: opts, launched: &rewire.Launched{Conn: rankNC, Auth: own}}
	if cands := p.remoteCandidates("rs1"); len(cands) != 0 {
		t.Errorf("candidates %+v under rs2's key, which the node does not know; want none", cands)
	}
	auth = p.readAuth("rs1")
	if _, err := p.askNodeAs(auth, job.PieceSubject("n1", auth.Job()), job.PieceRequest{Job: "rs1", Seq: 2, Rank: 0}, 5*time.Second); err == nil || !strings.Contains(err.Error(), "rs2") {
		t.Errorf("a piece request under rs2's key: %v; want the node's refusal", err)
	}
}
