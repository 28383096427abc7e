package job

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Limits checkShape puts on a control message before msgpack decodes it. msgpack v5.4.1
// allocates a slice of the length an array header announces before reading any element (its
// allocation limit is never applied to slices), so a 9-byte message announcing 3e9 elements
// killed the receiver out of memory. Found by FuzzDecodeReconfLog.
const (
	maxDecodeElements = 1 << 20 // array and map elements of one message, all levels together
	maxDecodeDepth    = 64      // nesting of arrays and maps
)

var errShape = errors.New("malformed msgpack")

// checkShape walks the msgpack encoding in data without decoding it and refuses arrays and
// maps that announce more elements than the bytes left could hold, more than
// maxDecodeElements in all, or nesting deeper than maxDecodeDepth.
func checkShape(data []byte) error {
	p := 0
	need := func(n uint64) error {
		if n > uint64(len(data)-p) {
			return fmt.Errorf("%w: %d bytes announced at offset %d, %d left", errShape, n, p, len(data)-p)
		}
		return nil
	}
	// size reads a big-endian length of w bytes.
	size := func(w int) (uint64, error) {
		if err := need(uint64(w)); err != nil {
			return 0, err
		}
		var n uint64
		switch w {
		case 1:
			n = uint64(data[p])
		case 2:
			n = uint64(binary.BigEndian.Uint16(data[p:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(data[p:]))
		}
		p += w
		return n, nil
	}
	pending := []uint64{1} // values still to read at each open level
	total := uint64(0)
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if err := need(1); err != nil {
			return err
		}
		c := data[p]
		p++
		var skip uint64    // bytes of payload that follow
		var items uint64   // values of a container that follow
		container := false // c opens an array or a map
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		case c >= 0x80 && c <= 0x8f: // fixmap
			items, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f: // fixarray
			items, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, err = size(1)
		case c == 0xc5 || c == 0xda: // bin16, str16
			skip, err = size(2)
		case c == 0xc6 || c == 0xdb: // bin32, str32
			skip, err = size(4)
		case c == 0xc7: // ext8: length, type, data
			skip, err = size(1)
			skip++
		case c == 0xc8: // ext16
			skip, err = size(2)
			skip++
		case c == 0xc9: // ext32
			skip, err = size(4)
			skip++
		case c == 0xca: // float32
			skip = 4
		case c == 0xcb: // float64
			skip = 8
		case c >= 0xcc && c <= 0xcf: // uint8 to uint64
			skip = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3: // int8 to int64
			skip = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8: // fixext1 to fixext16: type, data
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc: // array16
			items, err = size(2)
			container = true
		case c == 0xdd: // array32
			items, err = size(4)
			container = true
		case c == 0xde: // map16
			items, err = size(2)
			items, container = 2*items, true
		case c == 0xdf: // map32
			items, err = size(4)
			items, container = 2*items, true
		default:
			return fmt.Errorf("%w: code %#x at offset %d", errShape, c, p-1)
		}
		if err != nil {
			return err
		}
		if !container {
			if err := need(skip); err != nil {
				return err
			}
			p += int(skip)
			continue
		}
		// Every value takes at least one byte.
		if err := need(items); err != nil {
			return err
		}
		if total += items; total > maxDecodeElements {
			return fmt.Errorf("%w: more than %d array and map elements", errShape, maxDecodeElements)
		}
		if len(pending) >= maxDecodeDepth {
			return fmt.Errorf("%w: nested deeper than %d", errShape, maxDecodeDepth)
		}
		pending = append(pending, items)
	}
	return nil
}
