package ckptstore

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// sparsePiece is the fuzz tests' piece: data with zero blocks, its sparse stream as a correct
// sender sends it, and its record in the sender's store.
func sparsePiece(f *testing.F) (data, good []byte, want PieceInfo) {
	data = make([]byte, 6*DirectAlign+10)
	copy(data[2*DirectAlign:], pieceData(1, 0))
	data[len(data)-1] = 1
	var pb PieceBuffer
	pb.Write(data)
	var stream bytes.Buffer
	pb.WriteSparseTo(&stream)
	src, err := Open(f.TempDir(), &Options{Node: "a", Checksum: CRC32C})
	if err != nil {
		f.Fatal(err)
	}
	want, err = src.PutPieceBuffer(testJob, 1, 0, &pb)
	if err != nil {
		f.Fatal(err)
	}
	return data, stream.Bytes(), want
}

// FuzzSparseCopy feeds a buddy's store arbitrary sparse streams (what a hostile or broken
// sender may send) for a piece whose size and checksum are known: each is either refused
// with a *CorruptError, leaving nothing behind, or stored as exactly the recorded piece.
func FuzzSparseCopy(f *testing.F) {
	data, good, want := sparsePiece(f)
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stream []byte) {
		s, err := Open(t.TempDir(), &Options{Node: "b", Checksum: CRC32C})
		if err != nil {
			t.Fatal(err)
		}
		copied(t, s, s.PutSparseCopy(testJob, 1, want, bytes.NewReader(stream)), data)
	})
}

// copied checks the outcome err of a sparse copy of data into s as checkpoint 1 of rank 0:
// refused with a *CorruptError that left no file, or accepted as exactly data. It reports
// whether the copy was accepted.
func copied(t *testing.T, s *Store, err error, data []byte) bool {
	t.Helper()
	if err != nil {
		if !errors.As(err, new(*CorruptError)) {
			t.Fatalf("refused with %v, want a *CorruptError", err)
		}
		if ents, _ := os.ReadDir(s.seqDir(testJob, 1)); len(ents) != 0 {
			t.Fatalf("a refused copy left %d files", len(ents))
		}
		return false
	}
	got, err := os.ReadFile(s.piecePath(PieceID{Job: testJob, Seq: 1, Rank: 0}))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("accepted a copy that is not the piece (%v)", err)
	}
	return true
}

// FuzzSparseCopyOverASpareFile is FuzzSparseCopy into a memory store whose spare file for the
// piece's rank holds arbitrary old bytes (old, repeated to the given length): whatever the
// old file held, a copy is refused leaving nothing behind, or stored as exactly the piece,
// and the good stream is always stored as exactly the piece.
func FuzzSparseCopyOverASpareFile(f *testing.F) {
	data, good, want := sparsePiece(f)
	f.Add([]byte{7}, uint16(8*DirectAlign), good[:40])
	f.Add([]byte{0, 0, 3}, uint16(3*DirectAlign+5), []byte{})
	f.Add([]byte{1}, uint16(0), good)
	f.Fuzz(func(t *testing.T, old []byte, oldLen uint16, stream []byte) {
		dir, err := os.MkdirTemp("/dev/shm", "ckptstore-fuzz-")
		if err != nil {
			t.Skipf("no /dev/shm: %v", err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(dir, &Options{Node: "b", Checksum: CRC32C})
		if err != nil {
			t.Fatal(err)
		}
		if !s.mem {
			t.Skip("/dev/shm is not a tmpfs here")
		}
		spare := make([]byte, oldLen)
		for i := range spare {
			if len(old) > 0 {
				spare[i] = old[i%len(old)]
			}
		}
		if err := os.MkdirAll(s.jobDir(testJob), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, st := range [][]byte{stream, good} {
			if err := os.WriteFile(s.sparePath(testJob, 0), spare, 0o600); err != nil {
				t.Fatal(err)
			}
			err = s.PutSparseCopy(testJob, 1, want, bytes.NewReader(st))
			if !copied(t, s, err, data) {
				if bytes.Equal(st, good) {
					t.Fatalf("the well-formed stream was refused: %v", err)
				}
				continue
			}
			if err := os.Remove(s.piecePath(PieceID{Job: testJob, Seq: 1, Rank: 0})); err != nil {
				t.Fatal(err)
			}
		}
	})
}
