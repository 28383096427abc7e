package ckptstore

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// TestBuddyCopyServesThePieceWhenItsNodeIsGone: a piece written on node a and copied to node
// b's store is read from b once a is gone, verified against the manifest that lists b as a
// copy; a copy whose bytes do not match what a recorded is refused and leaves nothing.
func TestBuddyCopyServesThePieceWhenItsNodeIsGone(t *testing.T) {
	a, b := newStore(t, "a"), newStore(t, "b")
	data := pieceData(1, 0)
	info, err := a.PutPiece(testJob, 1, 0, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[10] ^= 1
	if err := b.PutCopy(testJob, 1, info, bytes.NewReader(bad)); !errors.As(err, new(*CorruptError)) {
		t.Fatalf("a damaged copy: got %v, want a *CorruptError", err)
	}
	if err := b.PutCopy(testJob, 1, info, bytes.NewReader(data[:len(data)-1])); !errors.As(err, new(*CorruptError)) {
		t.Fatalf("a truncated copy: got %v, want a *CorruptError", err)
	}
	if err := b.PutCopy(testJob, 1, info, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	info.Copies = []string{"b"}
	m := Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{info}}
	if err := b.CommitManifest(m); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(a.Dir()); err != nil {
		t.Fatal(err)
	}
	got, err := readPiece(t, b, 1, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read the copy on b: %v (same bytes: %v)", err, bytes.Equal(got, data))
	}
	back, err := b.Manifest(testJob, 1)
	if err != nil || !back.Pieces[0].Equal(info) {
		t.Fatalf("manifest on b: %+v, %v; want the piece with its copy %+v", back.Pieces, err, info)
	}
}
