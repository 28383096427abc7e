package state

import (
	"fmt"
	"io"
)

// A Capture holds the values of a registry as they were when it was taken, to be written
// later (WriteTo) while the application goes on changing them: it copies every entry but
// those the taker says stay unchanged until the write is over, whose memory it references.
// A background checkpoint thus costs its iteration boundary the copy of the small values
// only, not of the large arrays that the application leaves alone until the next one.
type Capture struct {
	entries []capturedEntry
	owned   []byte // the copies, reused by the next Capture into the same value
}

type capturedEntry struct {
	e     *entry
	data  []byte // raw: the value's bytes (a copy, or the live memory); msgpack: its encoding
	isNil bool   // raw slice: the value was a nil slice
}

// Capture takes the values of r into c, which it reuses (nil: a new one). Raw entries whose
// names byReference accepts are referenced: their memory (the slice's backing array as it is
// now) must not change until c has been written. Every other entry is copied, msgpack ones
// encoded.
func (r *Registry) Capture(c *Capture, byReference func(name string) bool) (*Capture, error) {
	if c == nil {
		c = new(Capture)
	}
	c.entries, c.owned = c.entries[:0], c.owned[:0]
	// The copies go into one buffer, sliced once it is complete (appends may move it).
	type span struct{ from, to int }
	spans := make([]span, len(r.entries))
	for i, e := range r.entries {
		ce := capturedEntry{e: e}
		switch {
		case e.enc == encMsgpack:
			cw := &countingWriter{max: MaxMsgpackEntryBytes}
			if err := newEncoder(cw).EncodeValue(e.ptr.Elem()); err != nil {
				return nil, fmt.Errorf("state: capture %q: msgpack: %w", e.name, err)
			}
			if cw.overflow {
				return nil, fmt.Errorf("state: capture %q: %d bytes encoded: %w", e.name, cw.n, ErrTooLarge)
			}
			spans[i] = span{len(c.owned), len(c.owned) + len(cw.buf)}
			c.owned = append(c.owned, cw.buf...)
		case byReference != nil && byReference(e.name):
			ce.data, ce.isNil = e.rawBytes(), e.isNil()
			spans[i] = span{-1, -1}
		default:
			data := e.rawBytes()
			ce.isNil = e.isNil()
			spans[i] = span{len(c.owned), len(c.owned) + len(data)}
			c.owned = append(c.owned, data...)
		}
		c.entries = append(c.entries, ce)
	}
	for i := range c.entries {
		if s := spans[i]; s.from >= 0 {
			c.entries[i].data = c.owned[s.from:s.to:s.to]
		}
	}
	return c, nil
}

// WriteTo writes the captured values to w, as Registry.WriteTo would have written them when
// they were captured. It implements io.WriterTo.
func (c *Capture) WriteTo(w io.Writer) (int64, error) {
	return writeStream(w, len(c.entries), func(sw *streamWriter, i int) error {
		ce := c.entries[i]
		if ce.e.enc == encMsgpack {
			return sw.writeEncoded(ce.e, ce.data)
		}
		return sw.writeRaw(ce.e, ce.data, ce.isNil)
	}, func(i int) string { return c.entries[i].e.name })
}
