package state

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"unsafe"

	"github.com/mpios/mpios/internal/crc32c"
	"github.com/vmihailenco/msgpack/v5"
)

// Format constants.
const (
	magic = "MPIOSTAT"
	// Version is the stream format version written by WriteTo.
	Version = 1

	headerLen      = len(magic) + 2 + 2
	trailerLen     = 1 + 4 + 4
	entryHeaderMax = 1 + 1 + MaxNameLen + 4 + 8

	tagEntry   = 'E'
	tagTrailer = 'T'

	// MaxRawEntryBytes caps the data of one raw entry (1 TiB).
	MaxRawEntryBytes = 1 << 40
	// MaxMsgpackEntryBytes caps the data of one msgpack entry (1 GiB): msgpack entries are
	// held in memory while being read, so keep big arrays in raw-eligible types.
	MaxMsgpackEntryBytes = 1 << 30

	// chunkSize is the unit in which raw data is checksummed and copied: small enough to
	// stay in the CPU's cache (L2) between the CRC pass and the write, large enough to
	// amortize calls.
	chunkSize = 256 << 10
	// msgpackBufferMax: msgpack values up to this size are encoded once into memory; larger
	// ones are encoded twice (once to learn the length, once to stream) to bound memory.
	msgpackBufferMax = 4 << 20
)

var castagnoli = crc32c.Table

// hostLittleEndian reports whether the host stores numbers little-endian, i.e. whether raw
// memory can be written as is.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// swapBytes reverses the byte order of every unit-sized group in b.
func swapBytes(b []byte, unit int) {
	if unit <= 1 {
		return
	}
	for i := 0; i+unit <= len(b); i += unit {
		u := b[i : i+unit]
		for j, k := 0, unit-1; j < k; j, k = j+1, k-1 {
			u[j], u[k] = u[k], u[j]
		}
	}
}

// SummingWriter is an io.Writer that computes the CRC-32C of what it is given while it takes
// it, such as a checkpoint piece buffer. WriteTo needs the CRC-32C of every raw chunk for its
// own format and takes it from the writer, so that the data is read once, not twice.
type SummingWriter interface {
	io.Writer
	// WriteSummed writes p and returns its CRC-32C (crc32.Update(0, castagnoli, p)).
	WriteSummed(p []byte) (crc uint32, err error)
}

// streamWriter frames entries and tracks the running stream CRC and byte count.
type streamWriter struct {
	w       io.Writer     // buffered, or the SummingWriter itself
	flush   func() error  // nil when w is not buffered
	sink    SummingWriter // non-nil: raw chunks go to it, which checksums them
	n       int64
	sum     uint32 // stream CRC so far
	scratch []byte // for byte swapping on big-endian hosts
}

func newStreamWriter(w io.Writer) *streamWriter {
	if cw, ok := w.(SummingWriter); ok {
		// A summing writer is a memory buffer: small writes cost it nothing.
		return &streamWriter{w: cw, sink: cw}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	return &streamWriter{w: bw, flush: bw.Flush}
}

func (sw *streamWriter) write(p []byte) error {
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	return err
}

// writeSummed writes p and returns its CRC-32C.
func (sw *streamWriter) writeSummed(p []byte) (uint32, error) {
	if sw.sink == nil {
		// Zero blocks (common: grids start at zero) cost a test for zeros, not a CRC.
		return crc32c.UpdateSparse(0, p), sw.write(p)
	}
	crc, err := sw.sink.WriteSummed(p)
	if err == nil {
		sw.n += int64(len(p))
	}
	return crc, err
}

// writeFramed writes p and adds it to the stream CRC.
func (sw *streamWriter) writeFramed(p []byte) error {
	sw.sum = crc32.Update(sw.sum, castagnoli, p)
	return sw.write(p)
}

// WriteTo writes the current values of all registered entries to w, in registration order. It
// implements io.WriterTo. Raw entries are streamed from memory in chunks; memory use is
// bounded independently of the state size (msgpack values larger than a few MiB are encoded
// twice rather than buffered). The values must not change while WriteTo runs.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	return writeStream(w, len(r.entries), func(sw *streamWriter, i int) error {
		e := r.entries[i]
		if e.enc == encMsgpack {
			return sw.writeMsgpack(e)
		}
		return sw.writeRaw(e, e.rawBytes(), e.isNil())
	}, func(i int) string { return r.entries[i].name })
}

// writeStream writes a stream of n entries, the i-th written by entry, named by name.
func writeStream(w io.Writer, n int, entry func(sw *streamWriter, i int) error, name func(i int) string) (int64, error) {
	sw := newStreamWriter(w)
	var hdr [headerLen]byte
	copy(hdr[:], magic)
	binary.LittleEndian.PutUint16(hdr[len(magic):], Version)
	if err := sw.writeFramed(hdr[:]); err != nil {
		return sw.n, fmt.Errorf("state: write header: %w", err)
	}
	for i := range n {
		if err := entry(sw, i); err != nil {
			return sw.n, fmt.Errorf("state: write %q: %w", name(i), err)
		}
	}
	var tr [trailerLen]byte
	tr[0] = tagTrailer
	binary.LittleEndian.PutUint32(tr[1:], uint32(n))
	sw.sum = crc32.Update(sw.sum, castagnoli, tr[:5])
	binary.LittleEndian.PutUint32(tr[5:], sw.sum)
	if err := sw.write(tr[:]); err != nil {
		return sw.n, fmt.Errorf("state: write trailer: %w", err)
	}
	if sw.flush != nil {
		if err := sw.flush(); err != nil {
			return sw.n, fmt.Errorf("state: write: %w", err)
		}
	}
	return sw.n, nil
}

// entryHeader encodes the header of an entry (without its CRC).
func entryHeader(buf []byte, name string, enc encoding, elem, flags, elemSize uint8, length uint64) []byte {
	buf = append(buf[:0], tagEntry, uint8(len(name)))
	buf = append(buf, name...)
	buf = append(buf, uint8(enc), elem, flags, elemSize)
	return binary.LittleEndian.AppendUint64(buf, length)
}

// beginEntry writes the entry header and its CRC, returning the running entry CRC.
func (sw *streamWriter) beginEntry(hdr []byte) (uint32, error) {
	crc := crc32.Update(0, castagnoli, hdr)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc)
	return crc, sw.writeFramed(hdr)
}

func (sw *streamWriter) endEntry(crc uint32) error {
	return sw.writeFramed(binary.LittleEndian.AppendUint32(nil, crc))
}

// writeRaw writes raw entry e whose value's bytes are data (a nil slice if isNil).
func (sw *streamWriter) writeRaw(e *entry, data []byte, isNil bool) error {
	if uint64(len(data)) > MaxRawEntryBytes {
		return fmt.Errorf("%d bytes: %w", len(data), ErrTooLarge)
	}
	var flags uint8
	if e.slice {
		flags |= flagSlice
		if isNil {
			flags |= flagNil
		}
	}
	var hb [entryHeaderMax + 4]byte
	crc, err := sw.beginEntry(entryHeader(hb[:0], e.name, encRaw, uint8(e.kind), flags, uint8(e.elemSize), uint64(len(data))))
	if err != nil {
		return err
	}
	for len(data) > 0 {
		c := data[:min(len(data), chunkSize)]
		data = data[len(c):]
		if !hostLittleEndian {
			sw.scratch = append(sw.scratch[:0], c...)
			c = sw.scratch
			swapBytes(c, e.kind.swapUnit(e.elemSize))
		}
		chunkCRC, err := sw.writeSummed(c)
		if err != nil {
			return err
		}
		crc = crc32c.Combine(crc, chunkCRC, int64(len(c)))
	}
	return sw.endEntry(crc)
}

// countingWriter counts bytes and keeps the first max of them; it satisfies the msgpack
// encoder's writer interface so the encoder does not allocate a wrapper per byte.
type countingWriter struct {
	n        int64
	buf      []byte
	max      int
	overflow bool
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if !c.overflow {
		if len(c.buf)+len(p) > c.max {
			c.overflow, c.buf = true, nil
		} else {
			c.buf = append(c.buf, p...)
		}
	}
	return len(p), nil
}

func (c *countingWriter) WriteByte(b byte) error {
	_, err := c.Write([]byte{b})
	return err
}

// crcWriter forwards to the stream, updating an entry CRC and counting bytes.
type crcWriter struct {
	sw  *streamWriter
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc32.Update(c.crc, castagnoli, p)
	c.n += int64(len(p))
	if err := c.sw.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *crcWriter) WriteByte(b byte) error {
	_, err := c.Write([]byte{b})
	return err
}

func newEncoder(w io.Writer) *msgpack.Encoder {
	enc := msgpack.NewEncoder(w)
	// Deterministic output for the common map types, so equal states give equal streams.
	enc.SetSortMapKeys(true)
	return enc
}

func (sw *streamWriter) writeMsgpack(e *entry) error {
	// The length precedes the data, so it must be known first: encode into a bounded buffer,
	// and if the value is too big for it, only count the bytes and encode again while
	// streaming.
	cw := &countingWriter{max: msgpackBufferMax}
	if err := newEncoder(cw).EncodeValue(e.ptr.Elem()); err != nil {
		return fmt.Errorf("msgpack: %w", err)
	}
	if cw.n > MaxMsgpackEntryBytes {
		return fmt.Errorf("%d bytes encoded: %w", cw.n, ErrTooLarge)
	}
	if !cw.overflow {
		return sw.writeEncoded(e, cw.buf)
	}
	var hb [entryHeaderMax + 4]byte
	crc, err := sw.beginEntry(entryHeader(hb[:0], e.name, encMsgpack, uint8(e.typ.Kind()), 0, 0, uint64(cw.n)))
	if err != nil {
		return err
	}
	out := &crcWriter{sw: sw, crc: crc}
	if err := newEncoder(out).EncodeValue(e.ptr.Elem()); err != nil {
		return fmt.Errorf("msgpack: %w", err)
	}
	if out.n != cw.n {
		return fmt.Errorf("value changed while being written (%d bytes, then %d)", cw.n, out.n)
	}
	return sw.endEntry(out.crc)
}

// writeEncoded writes msgpack entry e whose encoded value is enc.
func (sw *streamWriter) writeEncoded(e *entry, enc []byte) error {
	var hb [entryHeaderMax + 4]byte
	crc, err := sw.beginEntry(entryHeader(hb[:0], e.name, encMsgpack, uint8(e.typ.Kind()), 0, 0, uint64(len(enc))))
	if err != nil {
		return err
	}
	crc = crc32.Update(crc, castagnoli, enc)
	if err := sw.write(enc); err != nil {
		return err
	}
	return sw.endEntry(crc)
}
