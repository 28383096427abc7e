package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/iosbridge"
)

// attackServer is the NATS server of the attacker tests: Debian's nats-server when installed
// (as in CI), else the same server in-process.
func attackServer(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(debianNATS); err == nil {
		return binaryServer(t)
	}
	t.Logf("%s not installed: using an in-process nats-server", debianNATS)
	return testbin.NATSServer(t, "", "")
}

// TestControlPlaneAuthorization is issue 14's attacker on a shared NATS server, for the
// control plane (items 1 and 7): while a checkpointing job started with --policy none runs
// on two pcmd nodes with their IOS agents on, another client of the server forges control
// requests (migrate, checkpoint, resize: unsigned, under a guessed job key, signed by its own
// key as one of the job's nodes, and replayed from the owner's), a node's "leaving"
// heartbeat, signals, a rank's exit status and an abort, profiles that would put the job
// under a stealing policy, and steal requests. Each is refused or ignored: the job ends with
// an undisturbed run's result, and the nodes then run the next job.
func TestControlPlaneAuthorization(t *testing.T) {
	url := attackServer(t)
	dir := t.TempDir()
	heat2d := filepath.Join(bin, "heat2d")

	launcher, _ := nkeys.CreateUser()
	n1Key, _ := nkeys.CreateServer()
	n2Key, _ := nkeys.CreateServer()
	authorized := filepath.Join(dir, "authorized_launchers")
	if err := os.WriteFile(authorized, []byte(publicKey(t, launcher)+" alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(dir, "known_nodes")
	if err := os.WriteFile(known, []byte(`node="n1" `+publicKey(t, n1Key)+"\n"+`node="n2" `+publicKey(t, n2Key)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*proc{}
	for name, key := range map[string]nkeys.KeyPair{"n1": n1Key, "n2": n2Key} {
		// IOS agents on, stealing eagerly: only authentication keeps them from moving ranks.
		nodes[name] = startProc(t, nil, "pcmd", "serve", "--node", name, "--nats", url, "--heartbeat", "250ms",
			"--kill-grace", "1s", "--advertise", "127.0.0.1", "--authorized-launchers", authorized,
			"--node-key", seedFile(t, dir, name+".nk", key), "--slots", "3", "--allow", heat2d,
			"--ckpt-store", "mem", "--ios-period", "250ms", "--steal-threshold", "0.01", "--ios-cooldown", "1ms")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for name, p := range nodes {
				t.Logf("pcmd %s log:\n%s", name, p.stderr.String())
			}
		}
	})
	waitStatus(t, url, 15*time.Second, "n1 and n2", func(st nodestatus.Status) bool { return len(st.Nodes) == 2 })

	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	ctls := record(t, spy, job.ControlSubject("victim"))

	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
	args := []string{heat2d, "-n", "96", "-iters", "4000"}
	ref := filepath.Join(dir, "ref.bin")
	if p := run(t, 120*time.Second, env, "mpirun", append(append([]string{"-np", "4"}, args...), "-dump", ref)...); p.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", p.code, p.stderr.String())
	}
	out := filepath.Join(dir, "out.bin")
	launcherSeed := seedFile(t, dir, "alice.nk", launcher)
	j := startProc(t, env, "mpirun", append(append([]string{"--nats", url, "--hosts", "n1:2,n2:2", "--job-id", "victim",
		"--launcher-key", launcherSeed, "--known-nodes", known, "--ckpt-every", "100", "--policy", "none"}, args...),
		"-dump", out, "-pace", "3ms")...)
	waitStatus(t, url, 30*time.Second, "4 ranks of the job", func(st nodestatus.Status) bool { return len(st.Ranks) == 4 })

	ask := func(name string, data []byte, want string) {
		t.Helper()
		m, err := spy.Request(job.ControlSubject("victim"), data, 10*time.Second)
		var rep job.ControlReply
		if err != nil || ctlauth.DecodeUnverified(m.Data, &rep) != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.OK || !strings.Contains(rep.Error, want) {
			t.Errorf("%s: %+v, want a refusal saying %q", name, rep, want)
		}
	}
	nodeSigned := func(kp nkeys.KeyPair, node string, v any) []byte {
		w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, uint64(time.Now().UnixNano()))
		if err != nil {
			t.Fatal(err)
		}
		data, err := w.Wrap(job.ControlSubject("victim"), must(job.Encode(v)), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	guessed := make([]byte, 32)
	_, _ = rand.Read(guessed)
	wrongKey, err := ctlauth.NewJobChannel("victim", guessed, ctlauth.Sender{Role: ctlauth.RoleTool}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	attackerKey, _ := nkeys.CreateServer()
	moveRank0 := job.ControlRequest{Kind: job.ControlMigrate, Rank: 0, To: "n2", Reason: "attack"}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"unsigned migrate", must(job.Encode(moveRank0)), "control requests must be signed"},
		{"unsigned checkpoint", must(job.Encode(job.ControlRequest{Kind: job.ControlCheckpoint})), "control requests must be signed"},
		{"unsigned resize", must(job.Encode(job.ControlRequest{Kind: job.ControlResize, NP: 2})), "control requests must be signed"},
		{"migrate under a guessed job key", must(wrongKey.Encode(job.ControlSubject("victim"), moveRank0, time.Now())), "authentication failed"},
		{"migrate signed by the attacker as node n1", nodeSigned(attackerKey, "n1", moveRank0), "signs with"},
		{"resize signed by the attacker as its own node", nodeSigned(attackerKey, "evil", job.ControlRequest{Kind: job.ControlResize, NP: 6, On: []job.NodeSlots{{Node: "evil"}}}), "signer not trusted"},
		// Issue 14 item 1 with a real node's key (a node's operator is not the job's owner):
		// n2 may not move n1's rank, nor checkpoint, nor, under --policy none, move its own
		// ranks unless it drains.
		{"n2 moves n1's rank", nodeSigned(n2Key, "n2", job.ControlRequest{Kind: job.ControlMigrate, Rank: 0, To: "n2"}), "node n2 may not move"},
		{"n2 checkpoints", nodeSigned(n2Key, "n2", job.ControlRequest{Kind: job.ControlCheckpoint}), "only the job's owner"},
		{"n2 moves its own rank under --policy none", nodeSigned(n2Key, "n2", job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: "n1"}), "--policy none"},
		{"n1, the manager, resizes under --policy none", nodeSigned(n1Key, "n1", job.ControlRequest{Kind: job.ControlResize, NP: 6}), "--policy none"},
	} {
		ask(c.name, c.data, c.want)
	}

	// The owner's own requests: pcmd reads the job key from mpirun's job record. Checkpoints
	// are taken, also several asked at once (each pcmd is a sender of its own, not a replay
	// of another); a migration to a node outside the known nodes is refused.
	ctls.take() // the attacker's own requests so far
	var checkpoints []*proc
	for range 8 {
		checkpoints = append(checkpoints, startProc(t, env, "pcmd", "checkpoint", "--job", "victim", "--nats", url))
	}
	for _, p := range checkpoints {
		if p.wait(t, 30*time.Second); p.code != 0 {
			t.Fatalf("the owner's checkpoint: exit %d\n%s%s", p.code, p.stdout.String(), p.stderr.String())
		}
	}
	if p := run(t, 30*time.Second, env, "pcmd", "migrate", "--job", "victim", "--rank", "1", "--to", "evil", "--nats", url); p.code != 1 ||
		!strings.Contains(p.stderr.String(), "refused the migrate request") {
		t.Errorf("the owner's migration to an unknown node: exit %d\n%s", p.code, p.stderr.String())
	}
	// Without the job record (another user), pcmd has no key to sign with.
	if p := run(t, 30*time.Second, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "pcmd", "checkpoint", "--job", "victim", "--nats", url); p.code == 0 ||
		!strings.Contains(p.stderr.String(), "signed with the job's key") {
		t.Errorf("a checkpoint request without the job record: exit %d\n%s", p.code, p.stderr.String())
	}
	// The attacker replays the owner's checkpoint request.
	var owners [][]byte
	for _, m := range ctls.take() {
		if e, err := ctlauth.DecodeEnvelope(m.Data); err == nil && e.Scheme == ctlauth.SchemeJobMAC && e.From.Role == ctlauth.RoleTool {
			owners = append(owners, m.Data)
		}
	}
	if len(owners) < 1 {
		t.Fatalf("the spy saw %d of the owner's control requests", len(owners))
	}
	ask("replayed owner's checkpoint", owners[0], "replayed")

	publish := func(subject string, data []byte) {
		t.Helper()
		if err := spy.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	// Item 7: n1 "leaves" (unsigned, and signed by the attacker's key with its own card).
	leaving := job.NodeInfo{Name: "n1", Slots: 3, PID: 1, Interval: 250 * time.Millisecond, Leaving: true}
	publish(job.NodesHeartbeatSubject, must(job.Encode(leaving)))
	evilKeys, err := ctlauth.NewNodeKeys("n1", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	evilKeys.Signing = attackerKey
	if leaving.Card, err = evilKeys.SignedCard(time.Now()); err != nil {
		t.Fatal(err)
	}
	w, err := ctlauth.NewKeyWrapper(attackerKey, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n1"}, uint64(time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	publish(job.NodesHeartbeatSubject, must(w.Wrap(job.NodesHeartbeatSubject, must(job.Encode(leaving)), time.Now())))
	// ... drains of n1, unsigned and signed by the attacker's key as n1 (only n1's own key,
	// its operator's, may drain it) ...
	for name, sign := range map[string]*ctlauth.KeyWrapper{"unsigned": nil, "signed by the attacker as n1": w} {
		rep, err := nodestatus.Drain(spy, "n1", job.DrainRequest{Reason: "attack"}, sign, 10*time.Second)
		if err != nil || rep.Error == "" || len(rep.Moves) > 0 {
			t.Errorf("%s drain of n1: %+v, %v; want a refusal", name, rep, err)
		}
	}
	// ... a signal to rank 0, rank 1's exit status, an abort and an event ending the job ...
	publish(job.NodeSignalSubject("n1"), must(job.Encode(job.SignalRequest{Job: "victim", Rank: 0, Signal: 9})))
	publish(job.RankExitSubject("victim", 1), must(job.Encode(job.RankExit{Code: 3, Reason: "forged"})))
	publish(job.AbortSubject("victim"), must(job.Encode(job.Abort{Rank: 0, Code: 9, Message: "forged"})))
	publish(job.EventSubject("victim"), must(job.Encode(job.Event{Kind: job.EventAbort, Reason: "forged"})))
	// ... profiles putting the job's ranks under a stealing policy and making n1 look slow,
	// and steal requests to n1's agent from an idle "node", unsigned and signed by the
	// attacker as n2.
	// The attacker keeps at it for a few of the agents' periods, so that they would act.
	steal := iosbridge.Message{Kind: iosbridge.KindStealRequest, From: "n2", To: "n1", Origin: "n2", ID: 1, TTL: 1,
		Profile: &iosbridge.NodeProfile{Node: "n2", CPUs: 64, Availability: 1}}
	sw, err := ctlauth.NewKeyWrapper(attackerKey, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n2"}, uint64(time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 12 {
		for r, node := range []string{"n1", "n2", "n1", "n2"} {
			prof := `{"job":"victim","rank":` + string(rune('0'+r)) + `,"node":"` + node + `","policy":"sras","iteration":10,` +
				`"iterations":10,"last_iter_seconds":5,"mean_iter_seconds":5,"window_iterations":10,"window_seconds":50,` +
				`"window_comp_seconds":50,"elapsed_seconds":50,"comp_seconds":50}`
			publish(job.ProfileSubject("victim"), []byte(prof))
		}
		steal.ID = uint64(2 * round)
		publish(job.IOSInboxSubject("n1"), must(job.Encode(steal)))
		steal.ID++
		publish(job.IOSInboxSubject("n1"), must(sw.Wrap(job.IOSInboxSubject("n1"), must(job.Encode(steal)), time.Now())))
		time.Sleep(250 * time.Millisecond) // the agents' period: the attacker keeps at it
	}
	// A forged job info (the launcher's answer on job.JobInfoSubject, which a drain and the
	// IOS manager act on): the attacker answers every info request at once, calling the job
	// malleable under a policy of its own. The owner's pcmd status verifies the answer with
	// the job record and never shows the forgery; another user's, without a record, shows
	// what it got labeled unauthenticated.
	forgedInfo := must(job.Encode(job.JobInfo{Job: "victim", Size: 4, Malleable: true, Policy: "forged"}))
	infoSub, err := spy.Subscribe(job.JobInfoSubject("victim"), func(m *nats.Msg) { _ = m.Respond(forgedInfo) })
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		name  string
		env   []string
		owner bool
	}{{"the owner", env, true}, {"another user", []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, false}} {
		p := run(t, 20*time.Second, who.env, "pcmd", "status", "--json", "--nats", url, "--wait", "300ms")
		var st nodestatus.Status
		if p.code != 0 || json.Unmarshal([]byte(p.stdout.String()), &st) != nil {
			t.Fatalf("%s's pcmd status: exit %d\n%s%s", who.name, p.code, p.stdout.String(), p.stderr.String())
		}
		labeled := slices.Contains(st.Unauthenticated, "victim")
		for _, ji := range st.Jobs {
			if ji.Job == "victim" && (who.owner && (ji.Policy == "forged" || labeled) || !who.owner && !labeled) {
				t.Errorf("%s's pcmd status shows job info %+v (unauthenticated: %q)", who.name, ji, st.Unauthenticated)
			}
		}
	}
	if err := infoSub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.done:
		t.Fatalf("the job ended before the attack did (make it longer):\n%s", j.stderr.String())
	default:
	}

	if code := j.wait(t, 180*time.Second); code != 0 {
		t.Fatalf("mpirun: exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	want, _ := os.ReadFile(ref)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) || len(want) == 0 {
		t.Errorf("the attacked job's result (%d bytes, %v) differs from an undisturbed run's (%d bytes)\nmpirun:\n%s",
			len(got), err, len(want), j.stderr.String())
	}
	mpirunLog := j.stderr.String()
	for _, bad := range []string{"migrated rank", "resized", "shut down", "forged"} {
		if strings.Contains(mpirunLog, bad) {
			t.Errorf("mpirun's log says %q: the attack disturbed the job\n%s", bad, mpirunLog)
		}
	}
	if !strings.Contains(mpirunLog, "checkpoint requested") {
		t.Errorf("the owner's checkpoint request was not taken:\n%s", mpirunLog)
	}
	for name, p := range nodes {
		if strings.Contains(p.stderr.String(), "asking job victim to move") {
			t.Errorf("the IOS agent of %s tried to move a rank of a --policy none job:\n%s", name, p.stderr.String())
		}
	}
	if !strings.Contains(nodes["n1"].stderr.String(), "dropping a protocol message that does not verify") {
		t.Errorf("n1's agent did not report the forged steal requests:\n%s", nodes["n1"].stderr.String())
	}

	// The nodes still serve: the next job runs on both.
	next := filepath.Join(dir, "next.bin")
	if p := run(t, 120*time.Second, env, "mpirun", append(append([]string{"--nats", url, "--hosts", "n1:2,n2:2", "--launcher-key", launcherSeed,
		"--known-nodes", known}, args...), "-dump", next)...); p.code != 0 {
		t.Fatalf("the next job: exit %d\n%s", p.code, p.stderr.String())
	}
	if got, _ := os.ReadFile(next); !bytes.Equal(got, want) {
		t.Errorf("the next job's result differs from the reference")
	}
}
