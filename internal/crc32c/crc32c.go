// Package crc32c adds to hash/crc32's CRC-32C (Castagnoli) what checkpoints need and the
// standard library lacks: the checksum of a run of zero bytes without reading them, and the
// checksum of a concatenation from the checksums of its parts. With them a state whose memory
// is mostly zeros is checksummed at the speed of testing for zeros, and data checksummed once
// (by the state format) need not be read again to checksum the file it goes to.
//
// All checksums are in hash/crc32's convention: Update(0, p) is the CRC-32C of p.
package crc32c

import (
	"bytes"
	"hash/crc32"
)

// Table is the Castagnoli table.
var Table = crc32.MakeTable(crc32.Castagnoli)

// Update returns crc extended with p, as crc32.Update with Table.
func Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, Table, p) }

// BlockSize is the unit in which UpdateSparse tests for zeros.
const BlockSize = 4096

var zeroBlock [BlockSize]byte

// UpdateSparse returns Update(crc, p), computing the checksum of each all-zero BlockSize
// block of p without the CRC instructions (testing for zeros is several times faster).
func UpdateSparse(crc uint32, p []byte) uint32 {
	for len(p) >= BlockSize {
		blk := p[:BlockSize]
		if bytes.Equal(blk, zeroBlock[:]) {
			crc = block.zeros(crc)
		} else {
			crc = Update(crc, blk)
		}
		p = p[BlockSize:]
	}
	return Update(crc, p)
}

// IsZero reports whether p holds only zero bytes.
func IsZero(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), BlockSize)
		// bytes.Equal is the runtime's vectorized memequal.
		if !bytes.Equal(p[:n], zeroBlock[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}

// Zeros returns Update(crc, make([]byte, n)) in O(log n) time, without the bytes.
func Zeros(crc uint32, n int64) uint32 {
	if n == BlockSize {
		return block.zeros(crc)
	}
	// The register before conditioning is ^crc; zero bytes only shift it.
	return ^shift(^crc, n)
}

// Combine returns the checksum of a followed by b, given crcA = Update(0, a),
// crcB = Update(0, b) and lenB = len(b).
func Combine(crcA, crcB uint32, lenB int64) uint32 {
	// Update(c, b) is affine in c: shift(c, len(b)) ^ Update(0, b).
	return shift(crcA, lenB) ^ crcB
}

// operator is a linear map of the 32-bit register: column i is the image of bit i.
type operator [32]uint32

func (m *operator) apply(c uint32) uint32 {
	var r uint32
	for i := 0; c != 0; i, c = i+1, c>>1 {
		if c&1 != 0 {
			r ^= m[i]
		}
	}
	return r
}

func (m *operator) square() operator {
	var sq operator
	for i := range sq {
		sq[i] = m.apply(m[i])
	}
	return sq
}

// pow2[k] shifts the register by 2^k zero bytes.
var pow2 = func() (ops [63]operator) {
	// One zero byte: the map register -> register after the byte, read off hash/crc32 itself.
	// Update conditions the register (^ on entry and exit), which cancels in the difference.
	zero := []byte{0}
	base := crc32.Update(0, Table, zero)
	for i := range ops[0] {
		ops[0][i] = crc32.Update(1<<i, Table, zero) ^ base
	}
	for k := 1; k < len(ops); k++ {
		ops[k] = ops[k-1].square()
	}
	return ops
}()

// shift returns the register c after n zero bytes, unconditioned.
func shift(c uint32, n int64) uint32 {
	for k := 0; n > 0 && c != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			c = pow2[k].apply(c)
		}
	}
	return c
}

// fixedShift shifts by one fixed length with four table lookups.
type fixedShift struct {
	t     [4][256]uint32
	zeroC uint32 // Update(0, zeros of the length)
}

func newFixedShift(n int64) *fixedShift {
	f := &fixedShift{zeroC: ^shift(^uint32(0), n)}
	for j := range f.t {
		for b := range 256 {
			f.t[j][b] = shift(uint32(b)<<(8*j), n)
		}
	}
	return f
}

func (f *fixedShift) shift(c uint32) uint32 {
	return f.t[0][c&0xff] ^ f.t[1][c>>8&0xff] ^ f.t[2][c>>16&0xff] ^ f.t[3][c>>24]
}

// zeros is Update(c, BlockSize zero bytes): shift(c) ^ Update(0, zeros).
func (f *fixedShift) zeros(c uint32) uint32 { return f.shift(c) ^ f.zeroC }

var block = newFixedShift(BlockSize)
