package ckptstore

import (
	"unsafe"

	"github.com/mpios/mpios/internal/crc32c"
)

// DirectAlign is the alignment of memory, offsets and lengths that direct I/O needs: 4096
// covers the logical block size of every common disk. A PieceBuffer's data starts at such a
// boundary.
const DirectAlign = 4096

// PieceBuffer holds a piece in memory, for PutPieceBuffer: the state is copied into it at an
// iteration boundary and written to disk in the background while the application goes on.
// Its memory starts at a DirectAlign boundary, so that the write can bypass the page cache.
//
// The buffer does at the copy what writing the piece out would otherwise read the memory
// again for: it keeps the piece's CRC-32C, and it notes which DirectAlign blocks are all
// zero, copying nothing into those that already hold zeros (a grid that is mostly zeros
// costs a test for zeros, not a copy). The zero value is an empty buffer ready to use; Reset
// keeps the memory for the next piece.
type PieceBuffer struct {
	buf []byte // len: the piece so far; aligned start
	crc uint32 // CRC-32C of buf

	// Per DirectAlign block of cap(buf):
	data  []bool // the piece has a non-zero byte in the block
	clean []bool // the block's memory is all zeros (kept across Reset)
}

// Bytes returns the piece written so far. It aliases the buffer until the next Write or Reset.
func (b *PieceBuffer) Bytes() []byte { return b.buf }

// Len returns the number of bytes written since the last Reset.
func (b *PieceBuffer) Len() int { return len(b.buf) }

// CRC32C returns the CRC-32C (Castagnoli) of the bytes written since the last Reset.
func (b *PieceBuffer) CRC32C() uint32 { return b.crc }

// zeroBlock reports whether block i (of DirectAlign bytes) of the piece is all zeros.
func (b *PieceBuffer) zeroBlock(i int) bool { return !b.data[i] }

// Reset empties the buffer, keeping its memory.
func (b *PieceBuffer) Reset() {
	clear(b.data[:blocks(len(b.buf))])
	b.buf, b.crc = b.buf[:0], 0
}

// blocks returns the number of DirectAlign blocks that n bytes touch.
func blocks(n int) int { return (n + DirectAlign - 1) / DirectAlign }

// Grow makes room for n more bytes without another allocation.
func (b *PieceBuffer) Grow(n int) {
	if n <= cap(b.buf)-len(b.buf) {
		return
	}
	// Grow geometrically, like append, but keep the start aligned.
	want := max(len(b.buf)+n, 2*cap(b.buf))
	nb := alignedBytes(want)
	nblocks := cap(nb) / DirectAlign
	data, clean := make([]bool, nblocks), make([]bool, nblocks)
	for i := range clean {
		clean[i] = true
	}
	// The old blocks' flags go with their content.
	used := blocks(len(b.buf))
	copy(data, b.data[:used])
	copy(clean, b.clean[:used])
	b.buf, b.data, b.clean = append(nb, b.buf...), data, clean
}

// Write appends p. It never fails.
func (b *PieceBuffer) Write(p []byte) (int, error) {
	b.WriteSummed(p)
	return len(p), nil
}

// WriteSummed appends p and returns its CRC-32C (crc32.Update(0, castagnoli-table, p)),
// reading p once: each part of p that falls in one DirectAlign block of the buffer is tested
// for zeros and then, while it is still in the CPU's first-level cache, checksummed and
// copied, or, if all zeros, checksummed without reading it again and not copied at all.
// state.Registry.WriteTo uses the CRC for its own format. It never fails.
func (b *PieceBuffer) WriteSummed(p []byte) (uint32, error) {
	b.Grow(len(p))
	off := len(b.buf)
	b.buf = b.buf[:off+len(p)]
	var crc uint32
	for n := 0; n < len(p); {
		// seg is the part of p in block i; all but the first and last are whole blocks,
		// whose zeros crc32c.Zeros checksums with a table lookup.
		i := (off + n) / DirectAlign
		end := min((i+1)*DirectAlign-off, len(p))
		seg, dst := p[n:end], b.buf[off+n:off+end]
		switch {
		case !crc32c.IsZero(seg):
			crc = crc32c.Update(crc, seg)
			copy(dst, seg)
			b.data[i], b.clean[i] = true, false
		case b.clean[i]:
			// Already zeros: nothing to copy.
			crc = crc32c.Zeros(crc, int64(len(seg)))
		default:
			crc = crc32c.Zeros(crc, int64(len(seg)))
			clear(dst)
			if len(dst) == DirectAlign {
				b.clean[i] = true
			}
		}
		n = end
	}
	b.crc = crc32c.Combine(b.crc, crc, int64(len(p)))
	return crc, nil
}

// alignedBytes returns a zero-length slice with capacity of at least n bytes rounded up to
// DirectAlign, starting at a DirectAlign boundary, its memory mapped in. Go's heap does not move objects, so the
// alignment holds for the slice's life.
func alignedBytes(n int) []byte {
	n = (n + DirectAlign - 1) &^ (DirectAlign - 1)
	raw := make([]byte, n+DirectAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (DirectAlign - 1)); r != 0 {
		off = DirectAlign - r
	}
	b := raw[off : off+n]
	// Fault the pages in now, where the buffer is made (typically before the application's
	// loop), rather than during the first copy at an iteration boundary.
	for i := 0; i < len(b); i += DirectAlign {
		b[i] = 0
	}
	return b[:0]
}

// isAligned reports whether p starts at a DirectAlign boundary.
func isAligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))&(DirectAlign-1) == 0
}
