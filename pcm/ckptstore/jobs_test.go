package ckptstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// commitJob writes and commits checkpoint seq of job with one piece of n bytes.
func commitJob(t *testing.T, s *Store, job string, seq uint64, n int) {
	t.Helper()
	info, err := s.PutPiece(job, seq, 0, bytes.NewReader(bytes.Repeat([]byte{byte(seq)}, n)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CommitManifest(Manifest{Job: job, Seq: seq, Size: 1, Pieces: []PieceInfo{info}}); err != nil {
		t.Fatal(err)
	}
}

// Jobs says what each job holds as the usage count counts it; RemoveJob takes all of one
// job away, count included, and leaves the others whole.
func TestRemoveJobTakesAllOfOneJobOffTheStoreAndItsCount(t *testing.T) {
	s := newStore(t, "n1")
	commitJob(t, s, "gone", 1, 5000)
	commitJob(t, s, "gone", 2, 5000)
	commitJob(t, s, "kept", 1, 3000)
	// A spare file and a write in progress of the job go with it.
	if err := os.WriteFile(filepath.Join(s.jobDir("gone"), sparePrefix+pieceName(0)), []byte("spare"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, j := range jobs {
		if j.LastChange.IsZero() {
			t.Errorf("job %s: no time of its last change", j.Job)
		}
		sizes[j.Job] = j.Bytes
	}
	used, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || sizes["gone"] <= 10000 || sizes["kept"] <= 3000 || sizes["gone"]+sizes["kept"] != used {
		t.Fatalf("jobs %v, usage %d: want both jobs, their pieces and manifests, adding up to the usage", sizes, used)
	}

	if err := s.RemoveJob("gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.jobDir("gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job's directory: %v, want it gone", err)
	}
	if after, err := s.Usage(); err != nil || after != sizes["kept"] {
		t.Errorf("usage after the removal: %d, %v; want the other job's %d", after, err, sizes["kept"])
	}
	if n, err := s.Recount(); err != nil || n != sizes["kept"] {
		t.Errorf("recount: %d, %v; want %d", n, err, sizes["kept"])
	}
	if m, err := s.Latest("kept"); err != nil || m.Seq != 1 {
		t.Errorf("the other job's checkpoint: %+v, %v", m, err)
	}
	if ents, _ := os.ReadDir(s.root); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), trashPrefix) }) {
		t.Errorf("a removed job's remains are left in the store")
	}
	// The job may come back (a restart under the same name writes here again), and a job
	// with nothing here is removed without error.
	commitJob(t, s, "gone", 3, 100)
	if m, err := s.Latest("gone"); err != nil || m.Seq != 3 {
		t.Errorf("a job written again after its removal: %+v, %v", m, err)
	}
	if err := s.RemoveJob("never-here"); err != nil {
		t.Errorf("removing a job with nothing here: %v", err)
	}
	if err := s.RemoveJob("../x"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("removing job ../x: %v, want ErrInvalidName", err)
	}
}
