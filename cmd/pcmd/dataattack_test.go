package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
)

// TestJobDataAttacks is issue 14's attacker on a shared NATS server, for the job's data
// (items 2, 5, 6, 7 and 8): a checkpointing job runs on two nodes with stores while another
// user of the cluster — a launcher the nodes authorize too, and a client of the same server
// — reads the spawn requests for credentials, asks the nodes for the job's pieces and
// manifests, offers them bogus copies of its pieces, snatches the one-time offers the job's
// own buddy copies get, spawns under the job's id with the job's checkpoint variables and
// restarts from the job's checkpoints, and keeps its own rank alive with forged keepalives.
// Each attempt is refused or ignored, the job ends with the undisturbed result, its
// genuine keepalives hold its short leases, and the nodes serve the next job.
func TestJobDataAttacks(t *testing.T) {
	// Debian's nats-server when installed (CI installs it), else the same server in process.
	url := ""
	if _, err := os.Stat(debianNATS); err == nil {
		url = binaryServer(t)
	} else {
		url = testbin.NATSServer(t, "", "")
	}
	dir := t.TempDir()
	heat2d := filepath.Join(bin, "heat2d")

	alice, _ := nkeys.CreateUser()
	mallory, _ := nkeys.CreateUser()
	n1Key, _ := nkeys.CreateServer()
	n2Key, _ := nkeys.CreateServer()
	authorized := filepath.Join(dir, "authorized_launchers")
	if err := os.WriteFile(authorized, []byte(publicKey(t, alice)+" alice\n"+publicKey(t, mallory)+" mallory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(dir, "known_nodes")
	if err := os.WriteFile(known, []byte(`node="n1" `+publicKey(t, n1Key)+"\n"+`node="n2" `+publicKey(t, n2Key)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stores := map[string]string{"n1": filepath.Join(dir, "store-n1"), "n2": filepath.Join(dir, "store-n2")}
	// Short leases: the job's ranks live only as long as its genuine keepalives arrive.
	n1 := authNode(t, url, "n1", authorized, seedFile(t, dir, "n1.nk", n1Key), "--slots", "3", "--allow", heat2d, "--store", stores["n1"], "--lease", "3s")
	authNode(t, url, "n2", authorized, seedFile(t, dir, "n2.nk", n2Key), "--slots", "3", "--allow", heat2d, "--store", stores["n2"], "--lease", "3s")
	waitStatus(t, url, 10*time.Second, "n1 and n2", func(st nodestatus.Status) bool { return len(st.Nodes) == 2 })

	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	// The attacker reads every spawn request, and every reply to anyone (the offers of
	// the job's buddy copies among them).
	spawns := record(t, spy, "mpios.node.*.spawn")
	var snatched, stolenBytes atomic.Int64
	if _, err := spy.Subscribe("_INBOX.>", func(m *nats.Msg) {
		e, err := ctlauth.DecodeEnvelope(m.Data)
		var rep job.PieceReply
		if err != nil || job.Decode(e.Body, &rep) != nil || rep.Addr == "" || len(rep.Token) == 0 {
			return
		}
		go func() { // connect with the token first, as the offer's thief
			c, err := net.DialTimeout("tcp", rep.Addr, 2*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			snatched.Add(1)
			c.SetDeadline(time.Now().Add(2 * time.Second))
			c.Write(append(bytes.Clone(rep.Token), make([]byte, ctlauth.OfferProofSize)...)[:ctlauth.OfferProofSize])
			c.Write([]byte("bogus piece bytes"))
			n, _ := io.Copy(io.Discard, c)
			stolenBytes.Add(n)
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	// The job: heat2d on n1 and n2, checkpointing; its NATS token (which this server does
	// not check) must reach the ranks sealed.
	const token = "s3cret-nats-token-of-alice"
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir(), "MPIOS_NATS_TOKEN=" + token}
	args := []string{heat2d, "-n", "96", "-iters", "1500"}
	ref := filepath.Join(dir, "ref.bin")
	if p := run(t, 120*time.Second, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "mpirun", append(append([]string{"-np", "4"}, args...), "-dump", ref)...); p.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", p.code, p.stderr.String())
	}
	out := filepath.Join(dir, "out.bin")
	j := startProc(t, env, "mpirun", append(append([]string{"--nats", url, "--hosts", "n1:2,n2:2", "--job-id", "victim",
		"--launcher-key", seedFile(t, dir, "alice.nk", alice), "--known-nodes", known, "--ckpt-every", "100"}, args...),
		"-dump", out, "-pace", "3ms")...)
	waitStatus(t, url, 30*time.Second, "4 ranks of the job", func(st nodestatus.Status) bool { return len(st.Ranks) == 4 })
	// Wait for a committed checkpoint with its buddy copies: the pieces to attack.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms, _ := filepath.Glob(filepath.Join(stores["n2"], "victim", "*", "rank-0.piece"))
		if len(ms) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no buddy copy of the job's rank 0 on n2 within 60s\nmpirun:\n%s", j.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Item 2: the spawn requests carry neither the job's secret nor its NATS token in clear.
	captured := spawns.take()
	if len(captured) != 4 {
		t.Fatalf("the spy saw %d spawn requests, want 4", len(captured))
	}
	for _, m := range captured {
		if bytes.Contains(m.Data, []byte(job.EnvSecret)) || bytes.Contains(m.Data, []byte(token)) {
			t.Errorf("a spawn request on %s carries the job's secret or NATS token in clear", m.Subject)
		}
	}

	spawn := func(req job.SpawnRequest) job.SpawnReply {
		t.Helper()
		w, err := ctlauth.NewKeyWrapper(mallory, ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: req.Job}, uint64(time.Now().UnixNano()))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := job.Encode(req)
		data, err := w.Wrap(job.NodeSpawnSubject("n1"), body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return spawnReply(t, spy, data)
	}
	secretOf := func(b byte) string { return job.EnvSecret + "=" + hex.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	base := job.SpawnRequest{Rank: 0, Path: heat2d, Args: []string{"-n", "16", "-iters", "1"}, KeepAlive: 3 * time.Second}
	with := func(id string, f func(*job.SpawnRequest)) job.SpawnRequest {
		r := base
		r.Job = id
		f(&r)
		return r
	}
	// Items 3 and 5, by a launcher the node authorizes: the job's id with another secret;
	// the job's checkpoint variables; a restart from the job's checkpoints; a NATS
	// credential in clear.
	for name, c := range map[string]struct {
		req  job.SpawnRequest
		want string
	}{
		"the job's id": {with("victim", func(r *job.SpawnRequest) { r.Rank = 7; r.Env = []string{secretOf(0xbb)} }),
			"knows job victim under another secret"},
		"checkpoint variables": {with("mjob1", func(r *job.SpawnRequest) {
			r.Env = []string{secretOf(0xb1), job.EnvCkptDir + "=" + stores["n1"], job.EnvRestart + "=victim", job.EnvCkptKeep + "=1"}
		}), "set by the node from the request's typed fields"},
		"a restart from the job": {with("mjob2", func(r *job.SpawnRequest) { r.Env = []string{secretOf(0xb2)}; r.Restart = "victim" }),
			"it restarts from job victim, which another launcher started"},
		"a NATS token in clear": {with("mjob3", func(r *job.SpawnRequest) { r.Env = []string{secretOf(0xb3), "MPIOS_NATS_TOKEN=t"} }),
			"carries a NATS credential in clear"},
	} {
		if rep := spawn(c.req); rep.PID != 0 || !strings.Contains(rep.Error, c.want) {
			t.Errorf("spawn with %s: %+v, want a refusal saying %q", name, rep, c.want)
		}
	}
	// The attacker's own job on n1: its rank waits for a launcher that listens but never
	// answers; the node learns its key.
	if _, err := spy.Subscribe(job.HelloSubject("mjob"), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	mine := with("mjob", func(r *job.SpawnRequest) {
		r.Env = []string{secretOf(0xaa), job.EnvNATS + "=" + url, job.EnvSize + "=2", job.EnvTimeout + "=120s"}
	})
	var mineOut testbin.Buffer
	spy.Subscribe(job.RankSubjects("mjob", 0), func(m *nats.Msg) {
		if e, err := ctlauth.DecodeEnvelope(m.Data); err == nil {
			var o job.RankOutput
			if job.Decode(e.Body, &o) == nil {
				mineOut.Write(append(o.Line, '\n'))
			}
		}
	})
	spy.Flush()
	if rep := spawn(mine); rep.PID == 0 {
		t.Fatalf("the attacker's own job was refused: %+v", rep)
	}
	mjob, err := ctlauth.NewJobChannel("mjob", bytes.Repeat([]byte{0xaa}, 32), ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := ctlauth.NewJobChannel("stranger", bytes.Repeat([]byte{0xcc}, 32), ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	forger, _ := ctlauth.NewJobChannel("victim", bytes.Repeat([]byte{0xdd}, 32), ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())

	// Item 6: the job's pieces, asked for in clear, under the attacker's job key, under a
	// key the node never saw, and under a forged key in the job's name.
	victimPiece := job.PieceRequest{Job: "victim", Seq: 1, Rank: 0}
	pieceAsks := map[string]struct {
		subject string
		data    []byte
	}{
		"in clear":              {job.PieceSubject("n1", "victim"), must(job.Encode(victimPiece))},
		"as the attacker's job": {job.PieceSubject("n1", "mjob"), must(mjob.Encode(job.PieceSubject("n1", "mjob"), victimPiece, time.Now()))},
		"as an unknown job":     {job.PieceSubject("n1", "stranger"), must(stranger.Encode(job.PieceSubject("n1", "stranger"), victimPiece, time.Now()))},
		"under a forged key":    {job.PieceSubject("n1", "victim"), must(forger.Encode(job.PieceSubject("n1", "victim"), victimPiece, time.Now()))},
		// Item 6's buddy copies: a bogus copy of the job's piece, and one of its own that
		// claims the job's piece.
		"a bogus copy in clear": {job.PieceCopySubject("n1", "victim"), must(job.Encode(job.PieceCopyRequest{PieceRequest: victimPiece, Size: 5, Checksum: "x"}))},
		"a bogus copy as the attacker's job": {job.PieceCopySubject("n1", "mjob"),
			must(mjob.Encode(job.PieceCopySubject("n1", "mjob"), job.PieceCopyRequest{PieceRequest: victimPiece, Size: 5, Checksum: "x"}, time.Now()))},
	}
	for name, a := range pieceAsks {
		m, err := spy.Request(a.subject, a.data, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var rep job.PieceReply
		if e, err := ctlauth.DecodeEnvelope(m.Data); err == nil {
			_ = job.Decode(e.Body, &rep)
		} else {
			_ = job.Decode(m.Data, &rep)
		}
		if rep.Addr != "" || rep.Error == "" {
			t.Errorf("%s: %+v, want a refusal", name, rep)
		}
	}
	// Manifests: no node answers anyone but the job.
	for name, a := range map[string]struct {
		subject string
		data    []byte
	}{
		"in clear":              {job.ManifestsSubject("victim"), must(job.Encode(job.ManifestsRequest{Job: "victim"}))},
		"as the attacker's job": {job.ManifestsSubject("mjob"), must(mjob.Encode(job.ManifestsSubject("mjob"), job.ManifestsRequest{Job: "victim"}, time.Now()))},
	} {
		if m, err := spy.Request(a.subject, a.data, time.Second); !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("manifests asked %s: answered %v %v", name, m, err)
		}
	}
	// Item 8: forged keepalives do not keep the attacker's unlaunched rank holding a slot.
	stopKeepalives := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopKeepalives:
				return
			case <-time.After(300 * time.Millisecond):
				spy.Publish(job.KeepAliveSubject("mjob"), nil)
				spy.Publish(job.KeepAliveSubject("mjob"), must(forger.Encode(job.KeepAliveSubject("mjob"), job.KeepAlive{}, time.Now())))
			}
		}
	}()
	defer close(stopKeepalives)

	if code := j.wait(t, 180*time.Second); code != 0 {
		t.Fatalf("mpirun: exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	want, _ := os.ReadFile(ref)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) || len(want) == 0 {
		t.Errorf("the attacked job's result (%d bytes, %v) differs from an undisturbed run's (%d bytes)\nmpirun:\n%s",
			len(got), err, len(want), j.stderr.String())
	}
	if strings.Contains(j.stderr.String(), "has no buddy copy") {
		t.Errorf("a buddy copy failed under the attack:\n%s", j.stderr.String())
	}
	if snatched.Load() == 0 {
		t.Error("the attacker saw no offer to snatch: the test tested nothing")
	}
	if n := stolenBytes.Load(); n != 0 {
		t.Errorf("the attacker read %d bytes from the job's offers", n)
	}
	// The attacker's rank was reaped when its lease ran out, forged keepalives or not, and
	// n1 serves the next job.
	waitStatus(t, url, 20*time.Second, "n1 alive with no ranks", func(st nodestatus.Status) bool {
		n, ok := nodeOf(st, "n1")
		return ok && n.State == nodestatus.StateAlive && n.Used == 0
	})
	if !strings.Contains(n1.stderr.String(), "job mjob rank 0: started") || !strings.Contains(n1.stderr.String(), "stopping its ranks") {
		t.Errorf("n1 did not reap the attacker's rank when its lease ran out:\n%s\nthe rank's output:\n%s", n1.stderr.String(), mineOut.String())
	}
	next := filepath.Join(dir, "next.bin")
	if p := run(t, 120*time.Second, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "mpirun", "--nats", url, "--hosts", "n1:2,n2:2", "--job-id", "next",
		"--launcher-key", seedFile(t, dir, "alice2.nk", alice), "--known-nodes", known, heat2d, "-n", "32", "-iters", "20", "-dump", next); p.code != 0 {
		t.Fatalf("the next job: exit %d\n%s", p.code, p.stderr.String())
	}
}
