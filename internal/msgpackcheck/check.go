// Package msgpackcheck checks the shape of msgpack input before it is decoded. The msgpack
// decoder (vmihailenco/msgpack v5.4.1) preallocates slices from declared lengths without
// limit and recurses once per nesting level, so a few hostile bytes could otherwise make it
// allocate gigabytes or exhaust the goroutine stack, both fatal errors that no recover
// catches. After Check, every allocation of the decoder is proportional to the input's size.
package msgpackcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxDepth bounds the nesting of msgpack arrays and maps: the decoder recurses per
// level, and a deep enough input would exhaust the goroutine stack (a fatal error, not a panic).
const MaxDepth = 256

// ErrTruncated reports input that ends inside an object or a declared length.
var ErrTruncated = errors.New("msgpack: truncated")

// Check verifies that b holds exactly one well-formed msgpack object whose declared
// lengths all fit in b and whose nesting is at most MaxDepth. The msgpack decoder
// preallocates slices from declared lengths without limit, so this is what keeps a short
// hostile input from allocating gigabytes: after it, every allocation is proportional to
// len(b).
func Check(b []byte) error {
	// pending[d] is the number of objects still expected at nesting depth d.
	pending := make([]uint64, 1, 16)
	pending[0] = 1
	p := 0
	for len(pending) > 0 {
		if pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
			continue
		}
		pending[len(pending)-1]--
		if p >= len(b) {
			return ErrTruncated
		}
		c := b[p]
		p++
		var skip, children uint64 // payload bytes to skip; child objects to expect
		var lenBytes int          // size of a big-endian length field following c
		var extra uint64          // bytes after the length field beyond the payload (ext type)
		var perLen uint64         // children per unit of length (1 array, 2 map) or 0: bytes
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool
		case c >= 0x80 && c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			switch c {
			case 0xc4, 0xd9: // bin8, str8
				lenBytes = 1
			case 0xc5, 0xda: // bin16, str16
				lenBytes = 2
			case 0xc6, 0xdb: // bin32, str32
				lenBytes = 4
			case 0xc7: // ext8
				lenBytes, extra = 1, 1
			case 0xc8: // ext16
				lenBytes, extra = 2, 1
			case 0xc9: // ext32
				lenBytes, extra = 4, 1
			case 0xca:
				skip = 4
			case 0xcb:
				skip = 8
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xce, 0xd2:
				skip = 4
			case 0xcf, 0xd3:
				skip = 8
			case 0xd4:
				skip = 1 + 1
			case 0xd5:
				skip = 1 + 2
			case 0xd6:
				skip = 1 + 4
			case 0xd7:
				skip = 1 + 8
			case 0xd8:
				skip = 1 + 16
			case 0xdc:
				lenBytes, perLen = 2, 1
			case 0xdd:
				lenBytes, perLen = 4, 1
			case 0xde:
				lenBytes, perLen = 2, 2
			case 0xdf:
				lenBytes, perLen = 4, 2
			default: // 0xc1 is never used
				return fmt.Errorf("msgpack: invalid code 0x%02x at %d", c, p-1)
			}
		}
		if lenBytes > 0 {
			if len(b)-p < lenBytes {
				return ErrTruncated
			}
			var n uint64
			switch lenBytes {
			case 1:
				n = uint64(b[p])
			case 2:
				n = uint64(binary.BigEndian.Uint16(b[p:]))
			case 4:
				n = uint64(binary.BigEndian.Uint32(b[p:]))
			}
			p += lenBytes
			if perLen > 0 {
				children = n * perLen
			} else {
				skip = n + extra
			}
		}
		if skip > uint64(len(b)-p) {
			return ErrTruncated
		}
		p += int(skip)
		if children > 0 {
			// Every object takes at least one byte.
			if children > uint64(len(b)-p) {
				return fmt.Errorf("msgpack: container at %d declares %d objects in %d bytes", p, children, len(b)-p)
			}
			if len(pending) >= MaxDepth {
				return fmt.Errorf("msgpack: nesting deeper than %d", MaxDepth)
			}
			pending = append(pending, children)
		}
	}
	if p != len(b) {
		return fmt.Errorf("msgpack: %d trailing bytes", len(b)-p)
	}
	return nil
}
