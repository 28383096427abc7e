package pcmd

import (
	"bytes"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// A pcmd restarted on its store keeps the keys of the jobs it learned: it still answers the
// manifest requests of a job it ran before the restart (whose checkpoints it holds), under
// that job's key, and nobody else's.
func TestARestartedNodeStillServesTheJobsItLearned(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir, prog := rankScript(t)
	store := filepath.Join(t.TempDir(), "store")
	cfg := Config{Node: "n1", InsecureOpen: true, NATS: NATSOptions{URL: url}, Allow: []string{dir + "/*"}, Slots: 2, Store: store}
	secret := bytes.Repeat([]byte{5}, 32)
	first := startNode(t, nc, cfg)
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "kept", Rank: 0, Path: prog, Args: []string{"out"},
		Env: []string{job.EnvSecret + "=" + hex.EncodeToString(secret)}}); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	// A committed checkpoint of the job in the node's store, as its ranks would leave it.
	st, err := ckptstore.Open(store, &ckptstore.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.PutPiece("kept", 1, 0, bytes.NewReader([]byte("piece")))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CommitManifest(ckptstore.Manifest{Job: "kept", Seq: 1, Size: 1, Pieces: []ckptstore.PieceInfo{info}}); err != nil {
		t.Fatal(err)
	}

	startNode(t, nc, cfg)
	rank, _ := ctlauth.NewJobChannel("kept", secret, ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	subject := job.ManifestsSubject("kept")
	data, _ := rank.Encode(subject, job.ManifestsRequest{Job: "kept"}, time.Now())
	m, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatalf("the restarted node does not answer the job it learned before: %v", err)
	}
	var rep job.ManifestsReply
	if _, err := rank.Decode(m.Subject, m.Data, &rep, time.Now()); err != nil || rep.Node != "n1" || len(rep.Manifests) != 1 {
		t.Errorf("reply %+v, %v", rep, err)
	}
	// The job's id stays with its secret across the restart.
	if rep := spawn(t, nc, "n1", job.SpawnRequest{Job: "kept", Rank: 1, Path: prog, Args: []string{"out"},
		Env: []string{job.EnvSecret + "=" + hex.EncodeToString(bytes.Repeat([]byte{6}, 32))}}); rep.PID != 0 || rep.Error == "" {
		t.Errorf("a spawn of the job's id under another secret after the restart: %+v", rep)
	}
}
