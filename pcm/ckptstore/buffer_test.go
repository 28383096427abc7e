package ckptstore

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestPieceBufferAligned(t *testing.T) {
	var b PieceBuffer
	if b.Len() != 0 || len(b.Bytes()) != 0 {
		t.Fatal("zero value not empty")
	}
	want := pieceData(3, 5)
	for len(b.Bytes()) < 3*DirectAlign {
		b.Write(want) // grows several times
		if !isAligned(b.Bytes()) {
			t.Fatalf("after growing to %d bytes the start is not aligned", b.Len())
		}
	}
	if !bytes.Equal(b.Bytes()[:len(want)], want) || !bytes.Equal(b.Bytes()[len(want):2*len(want)], want) {
		t.Fatal("content changed while growing")
	}
	c := cap(b.Bytes())
	b.Reset()
	if b.Len() != 0 || cap(b.Bytes()) != c {
		t.Fatal("Reset must keep the memory")
	}
}

// putBytesDirs are the directories PutPieceBytes is tried in: the test's temporary directory
// and, where present, tmpfs (which refuses direct I/O before Linux 6.6).
func putBytesDirs(t *testing.T) map[string]string {
	dirs := map[string]string{"disk": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "ckptstore-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs["tmpfs"] = d
		}
	}
	return dirs
}

func TestPutPieceBytesRoundTrip(t *testing.T) {
	for where, dir := range putBytesDirs(t) {
		t.Run(where, func(t *testing.T) {
			for _, algo := range []string{SHA256, CRC32C} {
				s, err := Open(filepath.Join(dir, algo), &Options{Node: "n1", Checksum: algo})
				if err != nil {
					t.Fatal(err)
				}
				// Sizes around the alignment: empty, less than a block, exactly blocks,
				// blocks plus a tail; from a PieceBuffer (aligned) and from an unaligned slice.
				before := directWrites.Load()
				sizes := []int{0, 1, DirectAlign - 1, DirectAlign, 3 * DirectAlign, 5*DirectAlign + 17, 1<<20 + 3, maxRun + 3*DirectAlign + 5}
				m := Manifest{Job: testJob, Seq: 1, Size: 2 * len(sizes)}
				var want [][]byte
				for i, n := range sizes {
					data := bytes.Repeat(pieceData(uint64(n), i), n/1000+1)[:n]
					var b PieceBuffer
					b.Write(data)
					unaligned := append(make([]byte, 1, n+1), data...)[1:]
					for j, src := range [][]byte{b.Bytes(), unaligned} {
						rank := 2*i + j
						info, err := s.PutPieceBytes(testJob, 1, rank, src)
						if err != nil {
							t.Fatalf("%d bytes: %v", n, err)
						}
						if info.Size != int64(n) || !strings.HasPrefix(info.Checksum, algo+":") {
							t.Fatalf("%d bytes: %+v", n, info)
						}
						m.Pieces = append(m.Pieces, info)
						want = append(want, data)
					}
				}
				// On Linux, the disk of the test directory takes direct I/O (tmpfs does too
				// since Linux 6.6, older ones take the plain path).
				if runtime.GOOS == "linux" && where == "disk" && directWrites.Load() == before {
					t.Errorf("no piece was written with direct I/O")
				}
				if err := s.CommitManifest(m); err != nil {
					t.Fatal(err)
				}
				for rank, w := range want {
					got, err := readPiece(t, s, 1, rank)
					if err != nil || !bytes.Equal(got, w) {
						t.Fatalf("rank %d (%d bytes): read back %d bytes, %v", rank, len(w), len(got), err)
					}
				}
			}
		})
	}
}

func TestCommitSizeOnly(t *testing.T) {
	// With CommitSizeOnly a piece another Store wrote is checked by size at commit; a changed
	// checksum is caught when the piece is read.
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, _ := Open(dir, &Options{Node: "n1"})
	c, _ := Open(dir, &Options{Node: "n1", CommitSizeOnly: true})
	info, err := w.PutPiece(testJob, 1, 0, strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	short := info
	short.Size++
	if err := c.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{short}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong size: %v", err)
	}
	if err := c.CommitManifest(Manifest{Job: testJob, Seq: 2, Size: 1, Pieces: []PieceInfo{info}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing piece: %v", err)
	}
	bad := info
	bad.Checksum = "sha256:" + strings.Repeat("00", 32)
	if err := c.CommitManifest(Manifest{Job: testJob, Seq: 1, Size: 1, Pieces: []PieceInfo{bad}}); err != nil {
		t.Fatalf("size-only commit: %v", err)
	}
	if _, err := readPiece(t, c, 1, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a piece whose checksum differs: %v, want ErrCorrupt", err)
	}
}

// Whole zero blocks become holes: the piece reads back byte for byte, its checksum covers the
// zeros, and the disk holds only the non-zero blocks.
func TestPutPieceBytesHoles(t *testing.T) {
	const blocks = 64
	mixed := make([]byte, blocks*DirectAlign+100)
	for i := range mixed {
		if b := i / DirectAlign; b == 3 || b == 10 || b == 11 || b == blocks-1 {
			mixed[i] = byte(i*7 + 1)
		}
	}
	mixed[20*DirectAlign+5] = 1 // a single non-zero byte keeps its block
	tail := make([]byte, 5*DirectAlign+17)
	tail[len(tail)-1] = 9 // only the partial last block is non-zero
	cases := map[string][]byte{"mixed": mixed, "zeros": make([]byte, blocks*DirectAlign), "tail": tail}
	for where, dir := range putBytesDirs(t) {
		// PutPieceBuffer takes the buffer's own CRC-32C, and falls back to reading the
		// buffer for any other checksum.
		for _, algo := range []string{CRC32C, SHA256} {
			s, err := Open(filepath.Join(dir, algo), &Options{Node: "n1", Checksum: algo})
			if err != nil {
				t.Fatal(err)
			}
			seq := uint64(1)
			var reused PieceBuffer // holds the previous case's data: stale blocks must not leak
			for name, data := range cases {
				for _, put := range []string{"PutPieceBytes", "PutPieceBuffer"} {
					var b PieceBuffer
					b.Write(data)
					var info PieceInfo
					var err error
					if put == "PutPieceBytes" {
						info, err = s.PutPieceBytes(testJob, seq, 0, b.Bytes())
					} else {
						reused.Reset()
						reused.Write(data)
						info, err = s.PutPieceBuffer(testJob, seq, 0, &reused)
					}
					name := name + " " + put + " " + algo
					if err != nil {
						t.Fatalf("%s %s: %v", where, name, err)
					}
					ref, _ := Open(t.TempDir(), &Options{Node: "n1", Checksum: algo})
					plain, _ := ref.PutPiece(testJob, 1, 0, bytes.NewReader(data))
					if info.Checksum != plain.Checksum || info.Size != int64(len(data)) {
						t.Fatalf("%s %s: %+v, a plain write gives %+v", where, name, info, plain)
					}
					if err := s.CommitManifest(Manifest{Job: testJob, Seq: seq, Size: 1, Pieces: []PieceInfo{info}}); err != nil {
						t.Fatal(err)
					}
					got, err := readPiece(t, s, seq, 0)
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("%s %s: read back %d bytes (%v), not what was written", where, name, len(got), err)
					}
					if where == "disk" && strings.HasPrefix(name, "mixed") {
						if used, ok := diskBytes(t, s.piecePath(PieceID{Job: testJob, Seq: seq, Rank: 0})); ok && used > 16*DirectAlign {
							t.Errorf("%s: piece of %d bytes with 6 non-zero blocks takes %d bytes on disk", name, len(data), used)
						}
					}
					seq++
				}
			}
		}
	}
}

// A PieceBuffer reused for pieces of changing content, written in pieces that do not line up
// with its blocks, holds each piece exactly, knows its CRC-32C, and marks a block zero
// exactly when it is.
func TestPieceBufferReuseChecksumAndZeroBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var b PieceBuffer
	for round := range 40 {
		n := r.IntN(20 * DirectAlign)
		want := make([]byte, n)
		for blk := 0; blk*DirectAlign < n; blk++ {
			switch r.IntN(4) {
			case 0: // dense
				for i := blk * DirectAlign; i < min(n, (blk+1)*DirectAlign); i++ {
					want[i] = byte(r.Uint32())
				}
			case 1: // one byte somewhere
				want[min(n-1, blk*DirectAlign+r.IntN(DirectAlign))] = 1
			} // else zeros
		}
		b.Reset()
		for rest := want; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(3*DirectAlign))
			if r.IntN(2) == 0 {
				b.Write(rest[:k])
			} else {
				if crc, _ := b.WriteSummed(rest[:k]); crc != crc32.Checksum(rest[:k], castagnoli) {
					t.Fatalf("round %d: WriteSummed of %d bytes returned CRC %#x, want %#x", round, k, crc, crc32.Checksum(rest[:k], castagnoli))
				}
			}
			rest = rest[k:]
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("round %d: buffer differs from what was written (%d bytes)", round, n)
		}
		if got, w := b.CRC32C(), crc32.Checksum(want, castagnoli); got != w {
			t.Fatalf("round %d: CRC32C %#x, want %#x", round, got, w)
		}
		for blk := 0; (blk+1)*DirectAlign <= n; blk++ {
			zero := !bytes.ContainsFunc(want[blk*DirectAlign:(blk+1)*DirectAlign], func(r rune) bool { return r != 0 })
			if b.zeroBlock(blk) != zero {
				t.Fatalf("round %d: block %d marked zero=%v, is %v", round, blk, b.zeroBlock(blk), zero)
			}
		}
	}
}

func BenchmarkPieceBufferWrite(b *testing.B) {
	const size, chunk = 16 << 20, 256 << 10
	dense := make([]byte, size)
	for i := range dense {
		dense[i] = byte(i*7 + 1)
	}
	// "summed" is how state.Registry.WriteTo fills the buffer: the CRC comes back from the buffer.
	for _, c := range []struct {
		name        string
		data        []byte
		checksummed bool
	}{{"zeros", make([]byte, size), false}, {"dense", dense, false}, {"dense-summed", dense, true}, {"zeros-summed", make([]byte, size), true}} {
		b.Run(c.name, func(b *testing.B) {
			var buf PieceBuffer
			buf.Grow(size)
			b.SetBytes(size)
			for b.Loop() {
				buf.Reset()
				for off := 0; off < size; off += chunk {
					if c.checksummed {
						buf.WriteSummed(c.data[off : off+chunk])
					} else {
						buf.Write(c.data[off : off+chunk])
					}
				}
			}
		})
	}
}
