package ckptstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const testJob = "heat-2d_1"

func newStore(t testing.TB, node string) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "ckpt"), &Options{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pieceData(seq uint64, rank int) []byte {
	r := rand.New(rand.NewPCG(seq, uint64(rank)))
	b := make([]byte, 1000+rank*37)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkpoint writes and commits checkpoint seq with size ranks, all on s.
func checkpoint(t testing.TB, s *Store, seq uint64, size int) Manifest {
	t.Helper()
	m := Manifest{Job: testJob, Seq: seq, Iteration: int64(seq) * 100, Size: size}
	for rank := range size {
		info, err := s.PutPiece(testJob, seq, rank, bytes.NewReader(pieceData(seq, rank)))
		if err != nil {
			t.Fatal(err)
		}
		m.Pieces = append(m.Pieces, info)
	}
	if err := s.CommitManifest(m); err != nil {
		t.Fatal(err)
	}
	return m
}

func readPiece(t testing.TB, s *Store, seq uint64, rank int) ([]byte, error) {
	t.Helper()
	rc, _, err := s.OpenPiece(testJob, seq, rank)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func seqsOf(ms []Manifest) []uint64 {
	var seqs []uint64
	for _, m := range ms {
		seqs = append(seqs, m.Seq)
	}
	return seqs
}

func TestCommitLatestCheckpoints(t *testing.T) {
	s := newStore(t, "n1")
	if _, err := s.Latest(testJob); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty store: %v", err)
	}
	if ms, err := s.Checkpoints(testJob); err != nil || len(ms) != 0 {
		t.Fatalf("empty store: %v %v", ms, err)
	}
	checkpoint(t, s, 1, 3)
	checkpoint(t, s, 2, 3)
	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 2 || m.Iteration != 200 || len(skipped) != 0 {
		t.Fatalf("LatestValid = %d %v %v", m.Seq, skipped, err)
	}
	if m.Version != ManifestVersion || m.Time.IsZero() || m.Pieces[1].Node != "n1" || !strings.HasPrefix(m.Pieces[1].Checksum, "sha256:") {
		t.Fatalf("manifest fields: %+v", m)
	}
	ms, err := s.Checkpoints(testJob)
	if err != nil || !slices.Equal(seqsOf(ms), []uint64{2, 1}) {
		t.Fatalf("Checkpoints = %v %v", seqsOf(ms), err)
	}
	for rank := range 3 {
		got, err := readPiece(t, s, 1, rank)
		if err != nil || !bytes.Equal(got, pieceData(1, rank)) {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if _, err := s.VerifyPiece(testJob, 2, rank); err != nil {
			t.Fatal(err)
		}
	}
	// Human-inspectable JSON with a version.
	raw, err := os.ReadFile(filepath.Join(s.Dir(), testJob, seqName(2), manifestFile))
	if err != nil || !bytes.Contains(raw, []byte(`"version": 1`)) || !bytes.Contains(raw, []byte(`"iteration": 200`)) {
		t.Fatalf("manifest file: %s %v", raw, err)
	}
	if _, err := s.Manifest(testJob, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Manifest(testJob, 9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Manifest of missing checkpoint: %v", err)
	}
}

func TestPermissions(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 1)
	for path, want := range map[string]fs.FileMode{
		s.Dir(): 0o700 | fs.ModeDir,
		filepath.Join(s.Dir(), testJob, seqName(1)):               0o700 | fs.ModeDir,
		filepath.Join(s.Dir(), testJob, seqName(1), pieceName(0)): 0o600,
		filepath.Join(s.Dir(), testJob, seqName(1), manifestFile): 0o600,
	} {
		st, err := os.Stat(path)
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", path, st.Mode(), want, err)
		}
	}
}

func TestCrashLeavesNothingVisible(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 2)
	// Crash during checkpoint 2: both pieces written, a temp file of a third write and a
	// temporary manifest, but no manifest rename.
	for rank := range 2 {
		if _, err := s.PutPiece(testJob, 2, rank, bytes.NewReader(pieceData(2, rank))); err != nil {
			t.Fatal(err)
		}
	}
	dir2 := filepath.Join(s.Dir(), testJob, seqName(2))
	for _, name := range []string{".tmp-rank-1.piece-123", ".tmp-manifest.json-456"} {
		if err := os.WriteFile(filepath.Join(dir2, name), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	leftover := filepath.Join(s.Dir(), testJob, seqName(1), ".tmp-rank-0.piece-789")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A restarted daemon sees only checkpoint 1.
	s2, err := Open(s.Dir(), &Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s2.Latest(testJob); err != nil || m.Seq != 1 {
		t.Fatalf("Latest = %d, %v", m.Seq, err)
	}
	if ms, _ := s2.Checkpoints(testJob); !slices.Equal(seqsOf(ms), []uint64{1}) {
		t.Fatalf("Checkpoints = %v", seqsOf(ms))
	}
	if _, _, err := s2.OpenPiece(testJob, 2, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenPiece of uncommitted piece: %v", err)
	}

	// The job goes on: checkpoint 2 is redone (a rank rewrites its piece) and 3 committed;
	// pruning then removes the leftovers.
	checkpoint(t, s2, 2, 2)
	checkpoint(t, s2, 3, 2)
	if err := s2.Prune(testJob, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover in pruned checkpoint 1 still there: %v", err)
	}
	ents, _ := os.ReadDir(dir2)
	for _, e := range ents {
		if isTemp(e.Name()) {
			t.Errorf("temp file %s survived Prune", e.Name())
		}
	}
}

func TestFlippedByteFallsBack(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 6, 4)
	checkpoint(t, s, 7, 4)
	path := filepath.Join(s.Dir(), testJob, seqName(7), pieceName(2))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 6 {
		t.Fatalf("LatestValid = %d, %v", m.Seq, err)
	}
	if len(skipped) != 1 || skipped[0].String() != "checkpoint 7 rank 2: checksum mismatch" {
		t.Fatalf("skipped = %v", skipped)
	}
	msg := fmt.Sprintf("%v, falling back to checkpoint %d", skipped[0], m.Seq)
	if msg != "checkpoint 7 rank 2: checksum mismatch, falling back to checkpoint 6" {
		t.Fatal(msg)
	}

	// Reading the piece delivers the data but ends in a *CorruptError instead of io.EOF.
	_, err = readPiece(t, s, 7, 2)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seq != 7 || ce.Rank != 2 || ce.Reason != "checksum mismatch" {
		t.Fatalf("OpenPiece read: %v", err)
	}
	if _, err := s.VerifyPiece(testJob, 7, 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyPiece: %v", err)
	}
	if _, err := s.VerifyPiece(testJob, 7, 1); err != nil {
		t.Fatalf("VerifyPiece of intact rank: %v", err)
	}
}

func TestTruncatedPiece(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 2)
	checkpoint(t, s, 2, 2)
	path := filepath.Join(s.Dir(), testJob, seqName(2), pieceName(0))
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 1 || len(skipped) != 1 || skipped[0].String() != "checkpoint 2 rank 0: truncated: 10 of 1000 bytes" {
		t.Fatalf("LatestValid = %d %v %v", m.Seq, skipped, err)
	}
	if _, _, err := s.OpenPiece(testJob, 2, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OpenPiece: %v", err)
	}
}

func TestMissingPiece(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 2)
	checkpoint(t, s, 2, 2)
	if err := os.Remove(filepath.Join(s.Dir(), testJob, seqName(2), pieceName(1))); err != nil {
		t.Fatal(err)
	}
	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 1 || len(skipped) != 1 || skipped[0].String() != "checkpoint 2 rank 1: piece missing" {
		t.Fatalf("LatestValid = %d %v %v", m.Seq, skipped, err)
	}
	if _, _, err := s.OpenPiece(testJob, 2, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenPiece: %v", err)
	}
}

func TestCorruptManifest(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 1)
	checkpoint(t, s, 2, 1)
	checkpoint(t, s, 3, 1)
	if err := os.WriteFile(filepath.Join(s.Dir(), testJob, seqName(3), manifestFile), []byte(`{"version":1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A manifest copied from another checkpoint is caught by its job/seq fields.
	m1, _ := os.ReadFile(filepath.Join(s.Dir(), testJob, seqName(1), manifestFile))
	if err := os.WriteFile(filepath.Join(s.Dir(), testJob, seqName(2), manifestFile), m1, 0o600); err != nil {
		t.Fatal(err)
	}
	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 1 || len(skipped) != 2 {
		t.Fatalf("LatestValid = %d %v %v", m.Seq, skipped, err)
	}
	if skipped[0].String() != "checkpoint 3: manifest unreadable" || !strings.HasPrefix(skipped[1].String(), "checkpoint 2: manifest is for") {
		t.Fatalf("skipped = %v", skipped)
	}
	if ms, _ := s.Checkpoints(testJob); !slices.Equal(seqsOf(ms), []uint64{1}) {
		t.Fatalf("Checkpoints = %v", seqsOf(ms))
	}
}

func TestNoValidCheckpoint(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 1)
	os.Remove(filepath.Join(s.Dir(), testJob, seqName(1), pieceName(0)))
	_, skipped, err := s.LatestValid(testJob)
	if !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 1 {
		t.Fatalf("got %v %v", skipped, err)
	}
}

func TestCommitRefuses(t *testing.T) {
	s := newStore(t, "n1")
	put := func(seq uint64, rank int, data string) PieceInfo {
		info, err := s.PutPiece(testJob, seq, rank, strings.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	p0, p1 := put(1, 0, "zero"), put(1, 1, "one")

	cases := []struct {
		name string
		m    Manifest
		want error
	}{
		{"missingLocal", Manifest{Job: testJob, Seq: 1, Size: 3, Pieces: []PieceInfo{p0, p1, {Rank: 2, Node: "n1", Checksum: p0.Checksum}}}, ErrNotFound},
		{"wrongChecksum", Manifest{Job: testJob, Seq: 1, Size: 2, Pieces: []PieceInfo{p0, {Rank: 1, Node: "n1", Size: p1.Size, Checksum: p0.Checksum}}}, ErrCorrupt},
		{"wrongSize", Manifest{Job: testJob, Seq: 1, Size: 2, Pieces: []PieceInfo{p0, {Rank: 1, Node: "n1", Size: 99, Checksum: p1.Checksum}}}, ErrCorrupt},
		{"rankOrder", Manifest{Job: testJob, Seq: 1, Size: 2, Pieces: []PieceInfo{p1, p0}}, ErrInvalidManifest},
		{"sizeMismatch", Manifest{Job: testJob, Seq: 1, Size: 3, Pieces: []PieceInfo{p0, p1}}, ErrInvalidManifest},
		{"badChecksum", Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{{Rank: 0, Node: "n1", Checksum: "md5:00"}}}, ErrInvalidManifest},
		{"noNode", Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{{Rank: 0, Checksum: p0.Checksum}}}, ErrInvalidManifest},
		{"futureVersion", Manifest{Version: 9, Job: testJob, Seq: 1, Size: 2, Pieces: []PieceInfo{p0, p1}}, ErrInvalidManifest},
		{"badJob", Manifest{Job: "../etc", Seq: 1, Size: 2, Pieces: []PieceInfo{p0, p1}}, ErrInvalidName},
	}
	for _, c := range cases {
		if err := s.CommitManifest(c.m); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if ms, _ := s.Checkpoints(testJob); len(ms) != 0 {
		t.Fatal("a refused manifest became visible")
	}

	// A piece changed behind the store's back after PutPiece is re-read and caught.
	path := filepath.Join(s.Dir(), testJob, seqName(1), pieceName(1))
	if err := os.WriteFile(path, []byte("ONE"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, time.Now(), time.Now().Add(time.Hour))
	if err := s.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 2, Pieces: []PieceInfo{p0, p1}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("modified piece: %v", err)
	}
	p1 = put(1, 1, "one")

	// Pieces on other nodes are not this store's business.
	remote := PieceInfo{Rank: 2, Node: "n2", Size: 5, Checksum: p0.Checksum}
	good := Manifest{Job: testJob, Seq: 1, Size: 3, Pieces: []PieceInfo{p0, p1, remote}}
	if err := s.CommitManifest(good); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitManifest(good); !errors.Is(err, ErrCommitted) {
		t.Fatalf("second commit: %v", err)
	}
	if _, err := s.PutPiece(testJob, 1, 0, strings.NewReader("overwrite")); !errors.Is(err, ErrCommitted) {
		t.Fatalf("put into committed checkpoint: %v", err)
	}
	if got, err := readPiece(t, s, 1, 0); err != nil || string(got) != "zero" {
		t.Fatalf("piece 0 = %q %v", got, err)
	}
}

func TestCommitWithoutCache(t *testing.T) {
	// Pieces written by another process (another Store) are verified by reading them.
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, _ := Open(dir, &Options{Node: "n1"})
	c, _ := Open(dir, &Options{Node: "n1"})
	info, err := w.PutPiece(testJob, 1, 0, strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	bad := info
	bad.Checksum = "sha256:" + strings.Repeat("00", 32)
	if err := c.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{bad}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad checksum: %v", err)
	}
	if err := c.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{info}}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentPut(t *testing.T) {
	s := newStore(t, "n1")
	const ranks = 8
	infos := make([]PieceInfo, ranks)
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for rank := range ranks {
		wg.Go(func() {
			data := bytes.Repeat(pieceData(5, rank), 64) // a few tens of KiB each
			info, err := s.PutPiece(testJob, 5, rank, bytes.NewReader(data))
			infos[rank] = info
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CommitManifest(Manifest{Job: testJob, Seq: 5, Size: ranks, Pieces: infos}); err != nil {
		t.Fatal(err)
	}
	m, skipped, err := s.LatestValid(testJob)
	if err != nil || m.Seq != 5 || len(skipped) != 0 {
		t.Fatalf("LatestValid = %d %v %v", m.Seq, skipped, err)
	}
	for rank := range ranks {
		got, err := readPiece(t, s, 5, rank)
		if err != nil || !bytes.Equal(got, bytes.Repeat(pieceData(5, rank), 64)) {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
}

func TestNamesValidated(t *testing.T) {
	s := newStore(t, "n1")
	for _, job := range []string{"", ".", "..", "../x", "a/b", `a\b`, "x\x00", "/abs", "job id", strings.Repeat("j", 65)} {
		if _, err := s.PutPiece(job, 1, 0, strings.NewReader("x")); !errors.Is(err, ErrInvalidName) {
			t.Errorf("PutPiece(%q): %v", job, err)
		}
		if _, _, err := s.OpenPiece(job, 1, 0); !errors.Is(err, ErrInvalidName) {
			t.Errorf("OpenPiece(%q): %v", job, err)
		}
		if _, err := s.Checkpoints(job); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Checkpoints(%q): %v", job, err)
		}
		if _, _, err := s.LatestValid(job); !errors.Is(err, ErrInvalidName) {
			t.Errorf("LatestValid(%q): %v", job, err)
		}
		if err := s.Prune(job, 1); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Prune(%q): %v", job, err)
		}
	}
	for _, rank := range []int{-1, MaxRanks} {
		if _, err := s.PutPiece(testJob, 1, rank, strings.NewReader("x")); !errors.Is(err, ErrInvalidName) {
			t.Errorf("PutPiece rank %d: %v", rank, err)
		}
	}
	if _, err := Open(t.TempDir(), &Options{Node: "bad\nnode"}); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad node name: %v", err)
	}
	// Nothing escaped the root.
	ents, _ := os.ReadDir(filepath.Dir(s.Dir()))
	if len(ents) != 1 {
		t.Fatalf("files outside the root: %v", ents)
	}
}

func TestPrune(t *testing.T) {
	s := newStore(t, "n1")
	for seq := uint64(1); seq <= 5; seq++ {
		checkpoint(t, s, seq, 2)
	}
	if err := s.Prune(testJob, 3); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Checkpoints(testJob); !slices.Equal(seqsOf(ms), []uint64{5, 4, 3}) {
		t.Fatalf("after Prune(3): %v", seqsOf(ms))
	}
	if err := s.Prune(testJob, 0); err != nil { // default keep
		t.Fatal(err)
	}
	if ms, _ := s.Checkpoints(testJob); !slices.Equal(seqsOf(ms), []uint64{5, 4}) {
		t.Fatalf("after Prune(0): %v", seqsOf(ms))
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), testJob))
	if len(ents) != 2 {
		t.Fatalf("job directory holds %v", ents)
	}

	// keep=1 with a truncated newest: the newest stays (never removed) and so does the
	// newest intact one, so there is still something to fall back to.
	if err := os.Truncate(filepath.Join(s.Dir(), testJob, seqName(5), pieceName(1)), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(testJob, 1); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Checkpoints(testJob); !slices.Equal(seqsOf(ms), []uint64{5, 4}) {
		t.Fatalf("after Prune(1) with damaged newest: %v", seqsOf(ms))
	}
	if m, err := s.Latest(testJob); err != nil || m.Seq != 4 {
		t.Fatalf("Latest = %d %v", m.Seq, err)
	}
	if err := s.Prune("other-job", 2); err != nil {
		t.Fatalf("Prune of unknown job: %v", err)
	}
}

func TestPruneLeavesInProgress(t *testing.T) {
	s := newStore(t, "n1")
	checkpoint(t, s, 1, 1)
	// Checkpoint 2 is being written: a piece and a fresh temp file. An abandoned temp file
	// from before the last commit is garbage.
	if _, err := s.PutPiece(testJob, 2, 0, strings.NewReader("in progress")); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(s.Dir(), testJob, seqName(2))
	fresh, stale := filepath.Join(dir2, ".tmp-rank-1.piece-1"), filepath.Join(dir2, ".tmp-rank-1.piece-2")
	os.WriteFile(fresh, nil, 0o600)
	os.WriteFile(stale, nil, 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	// An interrupted earlier Prune left a trash directory.
	trash := filepath.Join(s.Dir(), testJob, trashPrefix+"x")
	os.MkdirAll(filepath.Join(trash, "sub"), 0o700)

	if err := s.Prune(testJob, 1); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{fresh: true, stale: false, trash: false,
		filepath.Join(dir2, pieceName(0)): true} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(path), err == nil, want)
		}
	}
}

func TestMultiNode(t *testing.T) {
	a, b := newStore(t, "nodeA"), newStore(t, "nodeB")
	m := Manifest{Job: testJob, Seq: 3, Iteration: 30, Size: 4}
	for rank := range 4 {
		st := a
		if rank >= 2 {
			st = b
		}
		info, err := st.PutPiece(testJob, 3, rank, bytes.NewReader(pieceData(3, rank)))
		if err != nil {
			t.Fatal(err)
		}
		m.Pieces = append(m.Pieces, info)
	}
	// The coordinator commits the same manifest on every node holding pieces.
	for _, st := range []*Store{a, b} {
		if err := st.CommitManifest(m); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Latest(testJob); err != nil || got.Seq != 3 {
			t.Fatalf("%s: Latest = %d %v", st.Node(), got.Seq, err)
		}
	}
	if _, _, err := a.OpenPiece(testJob, 3, 2); !errors.Is(err, ErrNotLocal) || !strings.Contains(err.Error(), "nodeB") {
		t.Fatalf("remote piece: %v", err)
	}

	// Restart on node A: rank 2's piece is fetched from B (here directly; in mpios through
	// B's pcmd) and verified on arrival.
	var src PieceSource = b
	rc, info, err := src.OpenPiece(testJob, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	id := PieceID{Job: testJob, Seq: 3, Rank: 2}
	vr, err := NewVerifyingReader(bytes.NewReader(data), id, info)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(vr); err != nil || !bytes.Equal(got, pieceData(3, 2)) {
		t.Fatalf("verified transfer: %v", err)
	}
	data[0] ^= 1
	vr, _ = NewVerifyingReader(bytes.NewReader(data), id, info)
	if _, err := io.ReadAll(vr); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged transfer: %v", err)
	}
	vr, _ = NewVerifyingReader(io.MultiReader(bytes.NewReader(data), strings.NewReader("x")), id, info)
	if _, err := io.ReadAll(vr); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("over-long transfer: %v", err)
	}
}

func TestCRC32COption(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Node: "n1", Checksum: CRC32C})
	if err != nil {
		t.Fatal(err)
	}
	m := checkpoint(t, s, 1, 2)
	if !strings.HasPrefix(m.Pieces[0].Checksum, "crc32c:") {
		t.Fatal(m.Pieces[0].Checksum)
	}
	if _, err := s.Latest(testJob); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.TempDir(), &Options{Checksum: "md5"}); err == nil {
		t.Fatal("unknown checksum algorithm accepted")
	}
}

type failReader struct{ n int }

func (f *failReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("rank died")
	}
	f.n--
	return copy(p, "abc"), nil
}

func TestPutFailureLeavesNothing(t *testing.T) {
	s := newStore(t, "n1")
	if _, err := s.PutPiece(testJob, 1, 0, &failReader{n: 3}); err == nil || !strings.Contains(err.Error(), "rank died") {
		t.Fatalf("got %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), testJob, seqName(1)))
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}
