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

// TestSparseBuddyCopySendsOnlyTheNonZeroBlocks: a piece that is mostly zero blocks goes to
// the buddy as a sparse stream of its non-zero blocks only, and the buddy's copy reads back
// as the very piece; a stream whose data, runs or end mark do not match what the owner
// recorded is refused as corrupt and leaves nothing.
func TestSparseBuddyCopySendsOnlyTheNonZeroBlocks(t *testing.T) {
	a, b := crcStore(t, "a"), crcStore(t, "b")
	data := make([]byte, 64*DirectAlign+100) // a partial last block
	copy(data[3*DirectAlign:], pieceData(1, 0))
	copy(data[40*DirectAlign+17:], pieceData(2, 0))
	data[len(data)-1] = 7
	var pb PieceBuffer
	pb.Write(data[:5000])
	pb.Write(data[5000:])
	info, err := a.PutPieceBuffer(testJob, 1, 0, &pb)
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	n, err := pb.WriteSparseTo(&stream)
	if err != nil || n != int64(stream.Len()) {
		t.Fatalf("WriteSparseTo: %d bytes, %v; buffer holds %d", n, err, stream.Len())
	}
	// Blocks 3 and 40 and the partial last one, and their headers plus the end mark.
	if want := 2*DirectAlign + 100 + 4*sparseHeaderLen; stream.Len() != want {
		t.Fatalf("sparse stream of %d bytes, want %d (the non-zero blocks only)", stream.Len(), want)
	}
	damaged := func(f func(s []byte)) []byte {
		s := bytes.Clone(stream.Bytes())
		f(s)
		return s
	}
	bad := map[string][]byte{
		"a flipped data bit":   damaged(func(s []byte) { s[sparseHeaderLen+10] ^= 1 }),
		"truncated":            stream.Bytes()[:stream.Len()-1],
		"run beyond the piece": damaged(func(s []byte) { s[8] = 0xff }),
		"end mark elsewhere":   damaged(func(s []byte) { s[len(s)-9] ^= 1 }),
		"no run of data":       damaged(func(s []byte) { s[sparseHeaderLen+10] ^= 1 })[stream.Len()-sparseHeaderLen:],
	}
	for what, s := range bad {
		if err := b.PutSparseCopy(testJob, 1, info, bytes.NewReader(s)); !errors.As(err, new(*CorruptError)) {
			t.Fatalf("%s: got %v, want a *CorruptError", what, err)
		}
	}
	if ents, _ := os.ReadDir(b.seqDir(testJob, 1)); len(ents) != 0 {
		t.Fatalf("refused copies left %d files behind", len(ents))
	}
	if err := b.PutSparseCopy(testJob, 1, info, bytes.NewReader(stream.Bytes())); err != nil {
		t.Fatal(err)
	}
	info.Copies = []string{"b"}
	if err := b.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{info}}); err != nil {
		t.Fatal(err)
	}
	got, err := readPiece(t, b, 1, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read the sparse copy on b: %v (same bytes: %v)", err, bytes.Equal(got, data))
	}
}

// TestSparseCopyVerifiesSHA256: a piece checksummed with SHA-256 is copied sparse too, the
// buddy hashing the zeros it does not receive.
func TestSparseCopyVerifiesSHA256(t *testing.T) {
	a, b := newStore(t, "a"), newStore(t, "b")
	data := make([]byte, 10*DirectAlign)
	copy(data[5*DirectAlign:], pieceData(3, 0))
	var pb PieceBuffer
	pb.Write(data)
	info, err := a.PutPieceBuffer(testJob, 1, 0, &pb)
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	pb.WriteSparseTo(&stream)
	if err := b.PutSparseCopy(testJob, 1, info, &stream); err != nil {
		t.Fatal(err)
	}
}

// crcStore is a store checksumming with CRC-32C, as pcm's.
func crcStore(t *testing.T, node string) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), &Options{Node: node, Checksum: CRC32C})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
