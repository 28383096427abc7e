package ckptstore

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzSparseCopy feeds a buddy's store arbitrary sparse streams (what a hostile or broken
// sender may send) for a piece whose size and checksum are known: each is either refused
// with a *CorruptError, leaving nothing behind, or stored as exactly the recorded piece.
func FuzzSparseCopy(f *testing.F) {
	data := make([]byte, 6*DirectAlign+10)
	copy(data[2*DirectAlign:], pieceData(1, 0))
	data[len(data)-1] = 1
	var pb PieceBuffer
	pb.Write(data)
	var good bytes.Buffer
	pb.WriteSparseTo(&good)
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:40])
	f.Add([]byte{})
	src, err := Open(f.TempDir(), &Options{Node: "a", Checksum: CRC32C})
	if err != nil {
		f.Fatal(err)
	}
	want, err := src.PutPieceBuffer(testJob, 1, 0, &pb)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		s, err := Open(t.TempDir(), &Options{Node: "b", Checksum: CRC32C})
		if err != nil {
			t.Fatal(err)
		}
		err = s.PutSparseCopy(testJob, 1, want, bytes.NewReader(stream))
		if err != nil {
			if !errors.As(err, new(*CorruptError)) {
				t.Fatalf("refused with %v, want a *CorruptError", err)
			}
			if ents, _ := os.ReadDir(s.seqDir(testJob, 1)); len(ents) != 0 {
				t.Fatalf("a refused copy left %d files", len(ents))
			}
			return
		}
		got, err := os.ReadFile(s.piecePath(PieceID{Job: testJob, Seq: 1, Rank: 0}))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("accepted a copy that is not the piece (%v)", err)
		}
	})
}
