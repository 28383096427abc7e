package ckptstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"github.com/mpios/mpios/internal/crc32c"
)

// A sparse stream carries a piece without its all-zero blocks, for buddy copies: a state
// that is mostly zeros (a grid the solution has not reached yet) then costs the network, the
// buddy's checksum and its memory store only its non-zero blocks. The stream is a sequence of
// runs, each a header of two big-endian uint64, offset and length, followed by length bytes
// of the piece from offset on; runs come at increasing offsets and do not overlap, and
// everything between them is zeros. A header with length 0 ends the stream.
const sparseHeaderLen = 16

// WriteSparseTo writes the piece in b to w as a sparse stream, leaving out the blocks that
// b noted all zeros while it was filled (it reads nothing to find them).
func (b *PieceBuffer) WriteSparseTo(w io.Writer) (int64, error) {
	data := b.Bytes()
	var n int64
	var hdr [sparseHeaderLen]byte
	put := func(off, length int) error {
		binary.BigEndian.PutUint64(hdr[:8], uint64(off))
		binary.BigEndian.PutUint64(hdr[8:], uint64(length))
		k, err := w.Write(hdr[:])
		n += int64(k)
		if err != nil || length == 0 {
			return err
		}
		k, err = w.Write(data[off : off+length])
		n += int64(k)
		return err
	}
	for off := 0; off < len(data); {
		if b.zeroBlock(off / DirectAlign) {
			off += DirectAlign
			continue
		}
		end := off + DirectAlign
		for end < len(data) && !b.zeroBlock(end/DirectAlign) {
			end += DirectAlign
		}
		end = min(end, len(data))
		if err := put(off, end-off); err != nil {
			return n, err
		}
		off = end
	}
	return n, put(len(data), 0)
}

// PutSparseCopy is PutCopy for a copy sent as a sparse stream (PieceBuffer.WriteSparseTo):
// r is read up to the stream's end, which must describe exactly want.Size bytes with
// want.Checksum; the zeros between runs are holes in the stored file, never written nor
// read. A malformed stream or a mismatch leaves nothing and gives a *CorruptError.
func (s *Store) PutSparseCopy(job string, seq uint64, want PieceInfo, r io.Reader) error {
	id := PieceID{Job: job, Seq: seq, Rank: want.Rank}
	algo, sum, err := parseChecksum(want.Checksum)
	if err != nil {
		return fmt.Errorf("ckptstore: put copy of %s: %w: %v", id, ErrInvalidManifest, err)
	}
	ss := newSparseSum(algo)
	_, err = s.putPieceWith(id, ss, want.Size, func(f *os.File, old *oldData) (int64, error) {
		if err := readSparse(f, r, id, want.Size, ss, old); err != nil {
			return 0, err
		}
		if !bytes.Equal(ss.Sum(nil), sum) {
			return 0, id.corrupt("checksum mismatch", nil)
		}
		return want.Size, nil
	})
	if err != nil {
		return fmt.Errorf("ckptstore: put copy of %s: %w", id, err)
	}
	return nil
}

// copyChunk is the unit in which copies are received: read from the connection,
// checksummed and written to the file while it is still in the CPU's second-level cache
// (a larger buffer would be read from memory again by each of the three).
const copyChunk = 128 << 10

// chunkPool holds the buffers of copies being received (*[]byte of copyChunk bytes): pcmd
// receives one per rank and checkpoint, and a fresh buffer costs its zeroing and page faults.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, copyChunk); return &b }}

// readSparse writes the sparse stream r of a size-byte piece into the file f, adding its
// bytes to ss. f is empty or a recycled file of size bytes that still holds old (whose data
// between the runs is punched out).
func readSparse(f *os.File, r io.Reader, id PieceID, size int64, ss *sparseSum, old *oldData) error {
	var hdr [sparseHeaderLen]byte
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	var at int64 // end of the previous run
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return id.corrupt(fmt.Sprintf("sparse copy: stream ends before its end mark, at byte %d", at), err)
		}
		off, length := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint64(hdr[8:])
		if off < uint64(at) || off > uint64(size) || length > uint64(size)-off {
			return id.corrupt(fmt.Sprintf("sparse copy: run of %d bytes at %d outside the piece's %d bytes or before byte %d", length, off, size, at), nil)
		}
		ss.zeros(int64(off) - at)
		if err := old.clear(at, int64(off)); err != nil {
			return err
		}
		if length == 0 {
			if off != uint64(size) {
				return id.corrupt(fmt.Sprintf("sparse copy: end mark at %d, want the piece's size %d", off, size), nil)
			}
			return f.Truncate(size)
		}
		for done := uint64(0); done < length; {
			k := min(uint64(len(buf)), length-done)
			if _, err := io.ReadFull(r, buf[:k]); err != nil {
				return id.corrupt(fmt.Sprintf("sparse copy: truncated run at %d", off+done), err)
			}
			ss.Write(buf[:k])
			if _, err := f.WriteAt(buf[:k], int64(off+done)); err != nil {
				return err
			}
			done += k
		}
		at = int64(off + length)
	}
}

// sparseSum is the checksum of a piece that arrives as runs of data and runs of zeros: a
// CRC-32C takes the zeros without bytes, other checksums hash them.
type sparseSum struct {
	hash.Hash        // nil for CRC-32C
	crc       uint32 // CRC-32C so far
}

func newSparseSum(algo string) *sparseSum {
	if algo == CRC32C {
		return &sparseSum{}
	}
	h, _ := newHash(algo)
	return &sparseSum{Hash: h}
}

func (s *sparseSum) Write(p []byte) (int, error) {
	if s.Hash != nil {
		return s.Hash.Write(p)
	}
	s.crc = crc32c.Update(s.crc, p)
	return len(p), nil
}

// zeros adds n zero bytes.
func (s *sparseSum) zeros(n int64) {
	if s.Hash == nil {
		s.crc = crc32c.Zeros(s.crc, n)
		return
	}
	var z [DirectAlign]byte
	for ; n > 0; n -= int64(len(z)) {
		s.Hash.Write(z[:min(n, int64(len(z)))])
	}
}

func (s *sparseSum) Sum(b []byte) []byte {
	if s.Hash != nil {
		return s.Hash.Sum(b)
	}
	return crcSum(s.crc).Sum(b)
}

func (s *sparseSum) Reset() {
	if s.Hash != nil {
		s.Hash.Reset()
	}
	s.crc = 0
}

func (s *sparseSum) Size() int {
	if s.Hash != nil {
		return s.Hash.Size()
	}
	return crcSum(0).Size()
}

func (s *sparseSum) BlockSize() int { return 1 }
