package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/testbin"
)

// seedFile writes kp's seed to a 0600 file in dir and returns its path.
func seedFile(t *testing.T, dir, name string, kp nkeys.KeyPair) string {
	t.Helper()
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// authNode starts a pcmd that takes spawn requests only from the launchers in authorized.
func authNode(t *testing.T, url, name, authorized, nodeKey string, args ...string) *proc {
	t.Helper()
	args = append([]string{"serve", "--node", name, "--nats", url, "--heartbeat", "250ms", "--kill-grace", "1s",
		"--advertise", "127.0.0.1", "--no-ios", "--authorized-launchers", authorized, "--node-key", nodeKey}, args...)
	p := startProc(t, nil, "pcmd", args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pcmd %s log:\n%s", name, p.stderr.String())
		}
	})
	return p
}

// TestSpawnAuthorization is issue 14's attacker on a shared NATS server, for the spawn path:
// a job whose nodes list its launcher's key runs to the right result while another client
// of the same server tries to start, signal and move its ranks and to read its secret.
func TestSpawnAuthorization(t *testing.T) {
	url := attackServer(t)
	dir := t.TempDir()
	heat2d := filepath.Join(bin, "heat2d")

	launcher, _ := nkeys.CreateUser()
	attacker, _ := nkeys.CreateUser()
	n1Key, _ := nkeys.CreateServer()
	n2Key, _ := nkeys.CreateServer()
	authorized := filepath.Join(dir, "authorized_launchers")
	if err := os.WriteFile(authorized, []byte("# test\n"+publicKey(t, launcher)+" alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(dir, "known_nodes")
	if err := os.WriteFile(known, []byte(`node="n1" `+publicKey(t, n1Key)+"\n"+`node="n2" `+publicKey(t, n2Key)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	authNode(t, url, "n1", authorized, seedFile(t, dir, "n1.nk", n1Key), "--slots", "2", "--allow", heat2d)
	authNode(t, url, "n2", authorized, seedFile(t, dir, "n2.nk", n2Key), "--slots", "2", "--allow", heat2d)
	// The attacker's own node: open, and not in the job owner's known nodes.
	startNode(t, url, "evil", "--slots", "4", "--allow", heat2d, "--no-ios")
	waitStatus(t, url, 10*time.Second, "n1, n2 and evil", func(st nodestatus.Status) bool { return len(st.Nodes) == 3 })

	// The attacker reads every spawn request.
	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	seen := record(t, spy, "mpios.node.*.spawn")

	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
	args := []string{heat2d, "-n", "96", "-iters", "1500"}
	ref := filepath.Join(dir, "ref.bin")
	if p := run(t, 120*time.Second, env, "mpirun", append(append([]string{"-np", "4"}, args...), "-dump", ref)...); p.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", p.code, p.stderr.String())
	}
	out := filepath.Join(dir, "out.bin")
	j := startProc(t, env, "mpirun", append(append([]string{"--nats", url, "--hosts", "n1:2,n2:2", "--job-id", "victim",
		"--launcher-key", seedFile(t, dir, "alice.nk", launcher), "--known-nodes", known}, args...), "-dump", out, "-pace", "2ms")...)
	waitStatus(t, url, 30*time.Second, "4 ranks of the job", func(st nodestatus.Status) bool { return len(st.Ranks) == 4 })

	captured := seen.take()
	if len(captured) != 4 {
		t.Fatalf("the spy saw %d spawn requests, want 4", len(captured))
	}
	for _, m := range captured {
		if bytes.Contains(m.Data, []byte(job.EnvSecret)) {
			t.Errorf("a spawn request on %s carries %s in clear", m.Subject, job.EnvSecret)
		}
	}

	ask := func(subject string, data []byte) (job.SpawnReply, string) {
		t.Helper()
		m, err := spy.Request(subject, data, 5*time.Second)
		if err != nil {
			t.Fatalf("request on %s: %v", subject, err)
		}
		var rep job.SpawnReply
		testbin.NodeAnswer(t, m, &rep)
		return rep, rep.Error
	}
	sign := func(kp nkeys.KeyPair, jobID, subject string, v any) []byte {
		w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleLauncher, Job: jobID}, uint64(time.Now().UnixNano()))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := job.Encode(v)
		data, err := w.Wrap(subject, body, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// Issue 14 items 3 and 5: a spawn of the job's id with the attacker's arguments and
	// checkpoint variables, unsigned or signed by a key the node does not list.
	evil := job.SpawnRequest{Job: "victim", Rank: 5, Path: heat2d, Args: []string{"-dump", filepath.Join(dir, "pwned")},
		Env: []string{job.EnvJobID + "=victim", job.EnvCkptDir + "=" + dir}}
	unsigned, _ := job.Encode(evil)
	for name, c := range map[string]struct {
		subject string
		data    []byte
		want    string
	}{
		"unsigned":               {job.NodeSpawnSubject("n1"), unsigned, "not signed"},
		"signed by the attacker": {job.NodeSpawnSubject("n1"), sign(attacker, "victim", job.NodeSpawnSubject("n1"), evil), "not trusted"},
		"replayed":               {captured[0].Subject, captured[0].Data, "replayed"},
		"moved to another node":  {job.NodeSpawnSubject(map[bool]string{true: "n2", false: "n1"}[strings.Contains(captured[0].Subject, ".n1.")]), captured[0].Data, "authentication failed"},
	} {
		if rep, msg := ask(c.subject, c.data); rep.PID != 0 || rep.Refusal != job.RefuseNotAllowed || !strings.Contains(msg, c.want) {
			t.Errorf("%s spawn: %+v, want a refusal saying %q", name, rep, c.want)
		}
	}
	// Item 7: a forged signal for the job's rank 0.
	for name, data := range map[string][]byte{
		"unsigned": func() []byte {
			d, _ := job.Encode(job.SignalRequest{Job: "victim", Rank: 0, Signal: 9})
			return d
		}(),
		"signed by the attacker": sign(attacker, "victim", job.NodeSignalSubject("n1"), job.SignalRequest{Job: "victim", Rank: 0, Signal: 9}),
	} {
		m, err := spy.Request(job.NodeSignalSubject("n1"), data, 5*time.Second)
		var rep job.SignalReply
		if err == nil {
			testbin.NodeAnswer(t, m, &rep)
		}
		if err != nil || rep.Error == "" {
			t.Errorf("%s signal: %+v %v, want a refusal", name, rep, err)
		}
	}
	// Item 1: a migrate request to the attacker's node; mpirun refuses it, as it is not
	// under the job's key (TestControlPlaneAuthorization tries the other ways).
	ctl, _ := job.Encode(job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: "evil", Reason: "attack"})
	m, err := spy.Request(job.ControlSubject("victim"), ctl, 10*time.Second)
	var rep job.ControlReply
	if err != nil || ctlauth.DecodeUnverified(m.Data, &rep) != nil {
		t.Fatalf("migrate request: %v", err)
	}
	if rep.OK || !strings.Contains(rep.Error, "control requests must be signed") {
		t.Errorf("migrate to the attacker's node: %+v, want a refusal of an unsigned request", rep)
	}

	// Item 7: forged events to the ranks (abort, a rank's failure) and forged aborts and
	// lost-peer reports to mpirun; none holds the job key.
	for subj, v := range map[string]any{
		job.EventSubject("victim"): job.Event{Kind: job.EventAbort, Reason: "forged"},
		job.AbortSubject("victim"): job.Abort{Rank: 0, Code: 9, Message: "forged"},
		job.LostSubject("victim"):  job.Lost{Observer: 0, Rank: 1, Reason: "forged"},
	} {
		data, _ := job.Encode(v)
		if err := spy.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Publish(job.EventSubject("victim"), must(job.Encode(job.Event{Kind: job.EventRankFailed, Rank: 1, Reason: "forged"}))); err != nil {
		t.Fatal(err)
	}
	// ... a forged reconfiguration log moving rank 1 to the attacker's node, and a forged
	// successor request and migration report ...
	forgedLog := reconf.Log{Entries: []reconf.Reconfiguration{{Seq: 1, Kind: reconf.Migrate, Ranks: []int{1}, To: "evil", State: reconf.Proposed, At: time.Now()}}}
	for subj, v := range map[string]any{
		job.ReconfSubject("victim"):   forgedLog,
		job.MigrateSubject("victim"):  job.MigrateRequest{Seq: 1, Rank: 1, Handover: "127.0.0.1:1", Iteration: 10},
		job.MigratedSubject("victim"): job.MigrateReport{Seq: 1, Rank: 1, To: "evil", OK: true},
	} {
		if err := spy.Publish(subj, must(job.Encode(v))); err != nil {
			t.Fatal(err)
		}
	}
	// ... and a forged exit status and output line of rank 1, as its node would relay them.
	if err := spy.Publish(job.RankOutSubject("victim", 1), must(job.Encode(job.RankOutput{Stream: job.StreamStdout, Seq: 1, Line: []byte("checksum forged")}))); err != nil {
		t.Fatal(err)
	}
	if err := spy.Publish(job.RankExitSubject("victim", 1), must(job.Encode(job.RankExit{Code: 1, Reason: "forged"}))); err != nil {
		t.Fatal(err)
	}

	if code := j.wait(t, 180*time.Second); code != 0 {
		t.Fatalf("mpirun: exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	want, _ := os.ReadFile(ref)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) || len(want) == 0 {
		t.Errorf("the attacked job's result (%d bytes, %v) differs from an undisturbed run's (%d bytes)\nmpirun:\n%s",
			len(got), err, len(want), j.stderr.String())
	}
	if strings.Contains(j.stdout.String(), "forged") || !strings.Contains(j.stderr.String(), "ignoring a message on mpios.job.victim.rank.1.exit") {
		t.Errorf("mpirun did not ignore the forged output and exit:\nstdout:\n%s\nstderr:\n%s", j.stdout.String(), j.stderr.String())
	}
	if strings.Contains(j.stderr.String(), "migrated rank 1") {
		t.Errorf("rank 1 was moved to the attacker's node:\n%s", j.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Errorf("the attacker's spawn ran")
	}
	// The nodes still serve: n1 is alive and free again.
	waitStatus(t, url, 10*time.Second, "n1 alive with no ranks", func(st nodestatus.Status) bool {
		n, ok := nodeOf(st, "n1")
		return ok && n.State == nodestatus.StateAlive && n.Used == 0
	})
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}
