package ckptstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// walked is the store's bytes as a walk measures them: what its count must equal.
func walked(t testing.TB, s *Store) int64 {
	t.Helper()
	n, err := bytesUnder(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func usage(t testing.TB, s *Store) int64 {
	t.Helper()
	n, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// behindItsBack adds a file of n bytes to the store without telling it: a walk counts it,
// the kept count does not.
func behindItsBack(t testing.TB, s *Store, n int) {
	t.Helper()
	dir := filepath.Join(s.Dir(), "other-job", seqName(1))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pieceName(0)), make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
}

// churn writes, copies, commits and prunes checkpoints first..last of job on s, with pieces of
// 1 KiB and more, and a stale piece and a temporary file left in one of them.
func churn(t testing.TB, s *Store, job string, first, last uint64) {
	t.Helper()
	for seq := first; seq <= last; seq++ {
		m := Manifest{Job: job, Seq: seq, Size: 3}
		for rank := range 2 {
			// The first attempt is replaced by the second, of another size.
			if _, err := s.PutPiece(job, seq, rank, bytes.NewReader(pieceData(seq+100, rank+3))); err != nil {
				t.Fatal(err)
			}
			info, err := s.PutPiece(job, seq, rank, bytes.NewReader(pieceData(seq, rank)))
			if err != nil {
				t.Fatal(err)
			}
			m.Pieces = append(m.Pieces, info)
		}
		data := pieceData(seq, 2)
		h, _ := newHash(SHA256)
		h.Write(data)
		other := formatChecksum(SHA256, h)
		if err := s.PutCopy(job, seq, PieceInfo{Rank: 2, Node: "n2", Size: int64(len(data)), Checksum: other}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		m.Pieces = append(m.Pieces, PieceInfo{Rank: 2, Node: "n2", Size: int64(len(data)), Checksum: other})
		if seq == 2 {
			// A stale piece of a crashed attempt and a temporary file, which Prune removes.
			dir := s.seqDir(job, seq)
			if err := os.WriteFile(filepath.Join(dir, pieceName(7)), make([]byte, 3000), 0o600); err != nil {
				t.Fatal(err)
			}
			// Counted from now on (a store without a count has none to set: the
			// callers check the count).
			s.Recount()
			if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"x"), make([]byte, 5000), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CommitManifest(m); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(job, 2); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUsageIsCountedNotWalked: the store counts the bytes of the pieces, copies and
// manifests written and removed (replaced attempts, Prune's removals of checkpoints and
// stale pieces) instead of walking its directory at each Reserve: the count equals a walk
// after every step, and a file added behind the store's back is counted by Recount only.
func TestUsageIsCountedNotWalked(t *testing.T) {
	s := newStore(t, "n1")
	if n := usage(t, s); n != 0 {
		t.Fatalf("empty store: usage %d", n)
	}
	for seq := uint64(1); seq <= 4; seq++ {
		churn(t, s, testJob, seq, seq)
		if got, want := usage(t, s), walked(t, s); got != want || want == 0 {
			t.Fatalf("after checkpoint %d: usage %d, a walk finds %d", seq, got, want)
		}
	}
	before := usage(t, s)
	behindItsBack(t, s, 12345)
	if got := usage(t, s); got != before {
		t.Fatalf("usage %d after a file was added behind the store's back, want the count %d (no walk)", got, before)
	}
	if got, err := s.Recount(); err != nil || got != before+12345 {
		t.Fatalf("Recount: %d, %v; want %d", got, err, before+12345)
	}
	if got := usage(t, s); got != before+12345 {
		t.Fatalf("usage %d after Recount, want %d", got, before+12345)
	}
}

// TestUsageSurvivesARestart: the count is kept with the store, so a Store opened later (a
// restarted process) uses it without walking; a missing or damaged count is set by a walk.
func TestUsageSurvivesARestart(t *testing.T) {
	s := newStore(t, "n1")
	churn(t, s, testJob, 1, 3)
	want := usage(t, s)
	behindItsBack(t, s, 999)
	again, err := Open(s.Dir(), &Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := usage(t, again); got != want {
		t.Fatalf("reopened store: usage %d, want the kept count %d", got, want)
	}
	for name, damage := range map[string][]byte{
		"missing":  nil,
		"short":    {1, 2, 3},
		"negative": binary.LittleEndian.AppendUint64(nil, uint64(1<<63)),
	} {
		path := filepath.Join(s.Dir(), usageFile)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if damage != nil {
			if err := os.WriteFile(path, damage, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := usage(t, again); got != want+999 {
			t.Errorf("%s count: usage %d, want a walk's %d", name, got, want+999)
		}
	}
}

// TestReserveRecountsBeforeRefusing: a count left too high (a process killed between a
// removal and its count) never refuses a piece that fits; a store that is full indeed
// refuses with what a walk finds.
func TestReserveRecountsBeforeRefusing(t *testing.T) {
	s := newStore(t, "n1")
	churn(t, s, testJob, 1, 2)
	used := walked(t, s)
	if err := os.WriteFile(filepath.Join(s.Dir(), usageFile), binary.LittleEndian.AppendUint64(nil, 1<<40), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(1000, used+1000); err != nil {
		t.Fatalf("Reserve with a count too high: %v", err)
	}
	if got := usage(t, s); got != used {
		t.Fatalf("usage %d after Reserve recounted, want %d", got, used)
	}
	var full *FullError
	if err := s.Reserve(1001, used+1000); !errors.As(err, &full) || full.Used != used || full.Need != 1001 {
		t.Fatalf("Reserve beyond the cap: %v, want a *FullError with %d used", err, used)
	}
	if err := s.Reserve(1<<50, 0); err != nil {
		t.Fatalf("Reserve without a cap: %v", err)
	}
}

// TestUsageIsExactUnderConcurrentWriters: writers in several processes (the ranks of a node
// and its pcmd share one store), and several Stores in this one, write, copy, commit and
// prune at once; the count ends equal to a walk.
func TestUsageIsExactUnderConcurrentWriters(t *testing.T) {
	s := newStore(t, "n1")
	usage(t, s) // the count exists before the writers start
	var cmds []*exec.Cmd
	for k := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUsageWriterProcess$")
		cmd.Env = append(os.Environ(), "CKPTSTORE_USAGE_WRITER="+s.Dir(), "CKPTSTORE_USAGE_JOB=proc-"+strconv.Itoa(k))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("writer process %d:\n%s", k, out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	var wg sync.WaitGroup
	for k := range 3 {
		wg.Go(func() {
			own, err := Open(s.Dir(), &Options{Node: "n1"})
			if err != nil {
				t.Error(err)
				return
			}
			churn(t, own, fmt.Sprintf("goroutine-%d", k), 1, 8)
		})
	}
	wg.Wait()
	for k, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer process %d: %v", k, err)
		}
	}
	if got, want := usage(t, s), walked(t, s); got != want {
		t.Fatalf("usage %d after concurrent writers, a walk finds %d", got, want)
	}
}

// TestUsageWriterProcess is a writer process of TestUsageIsExactUnderConcurrentWriters.
func TestUsageWriterProcess(t *testing.T) {
	dir := os.Getenv("CKPTSTORE_USAGE_WRITER")
	if dir == "" {
		t.Skip("run by TestUsageIsExactUnderConcurrentWriters")
	}
	s, err := Open(dir, &Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	churn(t, s, os.Getenv("CKPTSTORE_USAGE_JOB"), 1, 8)
}

// TestStoreWithoutACountStillTakesPieces: a store whose count cannot be opened (here a
// directory in its place) still takes, commits and prunes checkpoints, and Reserve then
// measures the store by a walk, as it did before there was a count.
func TestStoreWithoutACountStillTakesPieces(t *testing.T) {
	s := newStore(t, "n1")
	if err := os.Mkdir(filepath.Join(s.Dir(), usageFile), 0o700); err != nil {
		t.Fatal(err)
	}
	churn(t, s, testJob, 1, 3)
	if _, err := s.Usage(); err == nil {
		t.Fatal("Usage without a count: no error")
	}
	used := walked(t, s)
	if err := s.Reserve(100, used+100); err != nil {
		t.Fatalf("Reserve of what fits: %v", err)
	}
	var full *FullError
	if err := s.Reserve(101, used+100); !errors.As(err, &full) || full.Used != used {
		t.Fatalf("Reserve beyond the cap: %v, want a *FullError with %d used", err, used)
	}
}
