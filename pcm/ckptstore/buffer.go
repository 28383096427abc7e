package ckptstore

import "unsafe"

// DirectAlign is the alignment of memory, offsets and lengths that direct I/O needs: 4096
// covers the logical block size of every common disk. A PieceBuffer's data starts at such a
// boundary.
const DirectAlign = 4096

// PieceBuffer holds a piece in memory, for PutPieceBytes: the state is copied into it at an
// iteration boundary and written to disk in the background while the application goes on.
// Its memory starts at a DirectAlign boundary, so that the write can bypass the page cache.
// The zero value is an empty buffer ready to use; Reset keeps the memory for the next piece.
type PieceBuffer struct {
	buf []byte // len: the piece so far; aligned start
}

// Bytes returns the piece written so far. It aliases the buffer until the next Write or Reset.
func (b *PieceBuffer) Bytes() []byte { return b.buf }

// Len returns the number of bytes written since the last Reset.
func (b *PieceBuffer) Len() int { return len(b.buf) }

// Reset empties the buffer, keeping its memory.
func (b *PieceBuffer) Reset() { b.buf = b.buf[:0] }

// Grow makes room for n more bytes without another allocation.
func (b *PieceBuffer) Grow(n int) {
	if n <= cap(b.buf)-len(b.buf) {
		return
	}
	// Grow geometrically, like append, but keep the start aligned.
	want := max(len(b.buf)+n, 2*cap(b.buf))
	nb := alignedBytes(want)
	b.buf = append(nb, b.buf...)
}

// Write appends p. It never fails.
func (b *PieceBuffer) Write(p []byte) (int, error) {
	b.Grow(len(p))
	b.buf = append(b.buf, p...)
	return len(p), nil
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
