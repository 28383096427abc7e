package ckptstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// memTestStore opens a store in /dev/shm, a memory store as pcmd serve --ckpt-store mem
// keeps, or skips where there is no tmpfs.
func memTestStore(t *testing.T, node string) *Store {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "ckptstore-spare-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := Open(dir, &Options{Node: node, Checksum: CRC32C, CommitSizeOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !s.mem {
		t.Skip("/dev/shm is not a tmpfs here")
	}
	return s
}

// frontPiece is a piece of blocks DirectAlign blocks (plus tail bytes) whose non-zero blocks
// are those for which data says so, each filled from seq; the tail is non-zero if tail > 0.
func frontPiece(seq uint64, blocks, tail int, data func(block int) bool) []byte {
	p := make([]byte, blocks*DirectAlign+tail)
	for b := range blocks {
		if data(b) {
			for i := range DirectAlign {
				p[b*DirectAlign+i] = byte(seq) + byte(i%251) + 1
			}
		}
	}
	for i := blocks * DirectAlign; i < len(p); i++ {
		p[i] = byte(seq) | 1
	}
	return p
}

// spares lists the spare files of the test job in s.
func spares(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.jobDir(testJob))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestRecycledPieceFilesHoldExactlyTheNewPiece: in a memory store, the pieces of a pruned
// checkpoint are written over by later ones, written by the rank (PutPieceBuffer) and copied
// from a buddy (PutSparseCopy). Where the old piece had data and the new one zeros, the new
// one must read zeros (and hold no memory there), whatever the sizes and patterns; the byte
// count stays that of the kept checkpoints.
func TestRecycledPieceFilesHoldExactlyTheNewPiece(t *testing.T) {
	s := memTestStore(t, "n1")
	buddy := crcStore(t, "n2") // where rank 1 runs
	patterns := []struct {
		blocks, tail int
		data         func(int) bool
	}{
		{64, 100, func(b int) bool { return b < 40 }},
		{64, 0, func(b int) bool { return b%3 == 0 }},
		{64, 100, func(b int) bool { return b >= 10 && b < 20 }},
		{80, 7, func(b int) bool { return b > 50 }},   // grows
		{30, 0, func(b int) bool { return b%2 == 1 }}, // shrinks
		{64, 100, func(int) bool { return false }},    // all zeros but the tail
		{64, 0, func(int) bool { return true }},
		{64, 0, func(b int) bool { return b == 63 }},
	}
	recycled := 0
	for i, pat := range patterns {
		seq := uint64(i + 1)
		if len(spares(t, s)) > 0 {
			recycled++
		}
		m := Manifest{Job: testJob, Seq: seq, Size: 2}
		want := [][]byte{
			frontPiece(seq, pat.blocks, pat.tail, pat.data),
			frontPiece(seq+100, pat.blocks, pat.tail, func(b int) bool { return !pat.data(b) }),
		}
		var own PieceBuffer
		own.Write(want[0])
		info, err := s.PutPieceBuffer(testJob, seq, 0, &own)
		if err != nil {
			t.Fatal(err)
		}
		m.Pieces = append(m.Pieces, info)
		var other PieceBuffer
		other.Write(want[1])
		info, err = buddy.PutPieceBuffer(testJob, seq, 1, &other)
		if err != nil {
			t.Fatal(err)
		}
		var stream bytes.Buffer
		other.WriteSparseTo(&stream)
		if err := s.PutSparseCopy(testJob, seq, info, &stream); err != nil {
			t.Fatal(err)
		}
		info.Copies = []string{"n1"}
		m.Pieces = append(m.Pieces, info)
		if err := s.CommitManifest(m); err != nil {
			t.Fatal(err)
		}
		for rank, w := range want {
			got, err := readPiece(t, s, seq, rank)
			if err != nil || !bytes.Equal(got, w) {
				t.Fatalf("checkpoint %d rank %d: %v (same bytes: %v)", seq, rank, err, bytes.Equal(got, w))
			}
			// The zero blocks hold no memory: at most the data blocks and the tail's page.
			n, _ := diskBytes(t, s.piecePath(PieceID{Job: testJob, Seq: seq, Rank: rank}))
			data := 0
			for b := range pat.blocks {
				if (rank == 0) == pat.data(b) {
					data++
				}
			}
			if limit := int64(data+1) * DirectAlign; n > limit {
				t.Fatalf("checkpoint %d rank %d holds %d bytes of memory, its %d data blocks and tail need %d at most", seq, rank, n, data, limit)
			}
		}
		if err := s.Prune(testJob, 2); err != nil {
			t.Fatal(err)
		}
		if u, w := usage(t, s), walked(t, s); u != w {
			t.Fatalf("after checkpoint %d: usage %d, the kept pieces and manifests hold %d", seq, u, w)
		}
	}
	if recycled < len(patterns)-3 {
		t.Fatalf("only %d of %d checkpoints found spare files", recycled, len(patterns))
	}
	if got := spares(t, s); len(got) != 2 {
		t.Fatalf("spare files %v, want one per rank", got)
	}
}

// TestDamagedCopyIntoASpareFileIsRefused: a buddy copy written over a spare file that does not
// match its checksum is refused like any other, leaving nothing in the checkpoint.
func TestDamagedCopyIntoASpareFileIsRefused(t *testing.T) {
	s, a := memTestStore(t, "n1"), crcStore(t, "n2")
	var infos []PieceInfo
	var streams [][]byte
	for seq := uint64(1); seq <= 4; seq++ {
		var pb PieceBuffer
		pb.Write(frontPiece(seq, 32, 0, func(b int) bool { return b < 20 }))
		info, err := a.PutPieceBuffer(testJob, seq, 0, &pb)
		if err != nil {
			t.Fatal(err)
		}
		var stream bytes.Buffer
		pb.WriteSparseTo(&stream)
		infos, streams = append(infos, info), append(streams, stream.Bytes())
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := s.PutSparseCopy(testJob, seq, infos[seq-1], bytes.NewReader(streams[seq-1])); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitManifest(Manifest{Job: testJob, Seq: seq, Size: 1, Pieces: []PieceInfo{infos[seq-1]}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(testJob, 2); err != nil {
			t.Fatal(err)
		}
	}
	if len(spares(t, s)) != 1 {
		t.Fatalf("spare files %v after three checkpoints, want one", spares(t, s))
	}
	bad := bytes.Clone(streams[3])
	bad[sparseHeaderLen+5] ^= 0x10
	err := s.PutSparseCopy(testJob, 4, infos[3], bytes.NewReader(bad))
	if !errors.As(err, new(*CorruptError)) {
		t.Fatalf("damaged copy: got %v, want a *CorruptError", err)
	}
	if ents, _ := os.ReadDir(s.seqDir(testJob, 4)); len(ents) != 0 {
		t.Fatalf("the refused copy left %d files behind", len(ents))
	}
	// The kept checkpoints are untouched, and a good copy still goes in.
	for seq := uint64(2); seq <= 3; seq++ {
		if _, err := s.VerifyPiece(testJob, seq, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSparseCopy(testJob, 4, infos[3], bytes.NewReader(streams[3])); err != nil {
		t.Fatal(err)
	}
}

// TestSparesAreBoundedToOneCheckpoint: a rank no longer written to a store (it moved) leaves
// no spare file beyond the next prune, and a disk store keeps none.
func TestSparesAreBoundedToOneCheckpoint(t *testing.T) {
	s := memTestStore(t, "n1")
	for seq := uint64(1); seq <= 6; seq++ {
		ranks := 3
		if seq > 2 {
			ranks = 2 // rank 2 moved to another node
		}
		m := Manifest{Job: testJob, Seq: seq, Size: ranks}
		for rank := range ranks {
			var pb PieceBuffer
			pb.Write(frontPiece(seq, 8, 10, func(b int) bool { return b != rank }))
			info, err := s.PutPieceBuffer(testJob, seq, rank, &pb)
			if err != nil {
				t.Fatal(err)
			}
			m.Pieces = append(m.Pieces, info)
		}
		if err := s.CommitManifest(m); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(testJob, 2); err != nil {
			t.Fatal(err)
		}
		// At most the pieces of the one checkpoint the prune removed.
		if len(spares(t, s)) > 3 {
			t.Fatalf("after checkpoint %d: spare files %v", seq, spares(t, s))
		}
	}
	if _, err := os.Stat(s.sparePath(testJob, 2)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rank 2's spare file outlived its moving away: %v", err)
	}
	// At the job's end the spare files go, its checkpoints stay.
	if len(spares(t, s)) == 0 {
		t.Fatal("no spare files before DropSpares")
	}
	if err := s.DropSpares(testJob); err != nil {
		t.Fatal(err)
	}
	if got := spares(t, s); len(got) != 0 {
		t.Fatalf("spare files %v after DropSpares", got)
	}
	for seq := uint64(5); seq <= 6; seq++ {
		for rank := range 2 {
			if _, err := s.VerifyPiece(testJob, seq, rank); err != nil {
				t.Fatal(err)
			}
		}
	}
	if u, w := usage(t, s), walked(t, s); u != w {
		t.Fatalf("usage %d, the kept pieces and manifests hold %d", u, w)
	}

	d := crcStore(t, "n1")
	for seq := uint64(1); seq <= 4; seq++ {
		checkpoint(t, d, seq, 2)
		if err := d.Prune(testJob, 2); err != nil {
			t.Fatal(err)
		}
	}
	if d.mem {
		t.Skip("the test's temporary directory is a tmpfs")
	}
	if got, _ := filepath.Glob(filepath.Join(d.jobDir(testJob), sparePrefix+"*")); len(got) != 0 {
		t.Fatalf("a disk store kept spare files %v", got)
	}
}
