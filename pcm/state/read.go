package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// streamReader reads exactly what it is asked for (no read-ahead), tracking the offset, the
// input remaining when known and the running stream CRC.
type streamReader struct {
	r         io.Reader
	off       int64
	remaining int64 // -1: unknown
	sum       uint32
	entry     string // entry being read, for error messages
	sinks     map[string]SliceSink
}

// inputRemaining returns how many bytes r still holds, or -1 if r does not tell.
func inputRemaining(r io.Reader) int64 {
	if l, ok := r.(interface{ Len() int }); ok {
		return int64(l.Len())
	}
	if s, ok := r.(io.Seeker); ok {
		cur, err := s.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		end, err := s.Seek(0, io.SeekEnd)
		if _, err2 := s.Seek(cur, io.SeekStart); err != nil || err2 != nil || end < cur {
			return -1
		}
		return end - cur
	}
	return -1
}

func (sr *streamReader) corrupt(reason string, err error) error {
	return &CorruptError{Entry: sr.entry, Offset: sr.off, Reason: reason, Err: err}
}

func (sr *streamReader) mismatch(reason string, err error) error {
	return &MismatchError{Entry: sr.entry, Reason: reason, Err: err}
}

// readFull fills p. Running out of input is corruption (truncation); other read errors are
// I/O failures and are returned wrapped, not as corruption.
func (sr *streamReader) readFull(p []byte, what string) error {
	n, err := io.ReadFull(sr.r, p)
	sr.off += int64(n)
	if sr.remaining >= 0 {
		sr.remaining -= int64(n)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return sr.corrupt("truncated "+what, io.ErrUnexpectedEOF)
	}
	if sr.entry != "" {
		return fmt.Errorf("state: read entry %q: %w", sr.entry, err)
	}
	return fmt.Errorf("state: read %s: %w", what, err)
}

// readFramed reads p and adds it to the stream CRC.
func (sr *streamReader) readFramed(p []byte, what string) error {
	if err := sr.readFull(p, what); err != nil {
		return err
	}
	sr.sum = crc32.Update(sr.sum, castagnoli, p)
	return nil
}

// checkLength rejects a declared data length that exceeds max or the remaining input (plus
// the entry CRC that must follow it).
func (sr *streamReader) checkLength(length, max uint64) error {
	if length > max {
		return sr.corrupt(fmt.Sprintf("length %d exceeds the maximum %d", length, max), nil)
	}
	if sr.remaining >= 0 && length+4 > uint64(sr.remaining) {
		return sr.corrupt(fmt.Sprintf("length %d exceeds the %d bytes remaining", length, sr.remaining), nil)
	}
	return nil
}

// ReadFrom reads a stream written by WriteTo and restores every registered value from it. It
// implements io.ReaderFrom; it stops right after the trailer and never reads further.
//
// Every registered name must appear exactly once and every entry must be registered with the
// same encoding and element type, else a *MismatchError naming the entry is returned. Damage
// is reported as a *CorruptError naming the entry. Read failures of r other than running out
// of input are returned wrapped as they are.
//
// ReadFrom is all-or-nothing: the values are decoded into new memory and assigned only once
// the whole stream, trailer included, has been verified; on error nothing registered is
// modified. Registered slices are replaced by new slices of the incoming length (a nil slice
// is restored as nil, an empty one as empty).
func (r *Registry) ReadFrom(rd io.Reader) (int64, error) {
	return r.ReadFromWith(rd, ReadOptions{})
}

// A SliceSink takes the data of a raw slice entry in place of the registered slice, so that
// a caller can read a stream's slice straight into memory of its own, or only part of it
// (package pcm reads the rows of a distributed array it needs from another rank's piece).
type SliceSink interface {
	// Window is called once the entry's header has been checked, with the length of its
	// data in bytes. It returns the offset lo of the part it wants and the memory to put it
	// in: bytes [lo, lo+len(dst)) of the data, in host byte order. The rest is checked and
	// dropped. An error aborts the read as a *MismatchError naming the entry.
	Window(length int64) (lo int64, dst []byte, err error)
}

// ReadOptions change what ReadFromWith restores.
type ReadOptions struct {
	// Slices diverts the named raw slice entries to sinks; the registered values of those
	// names are left alone. A sink's memory is written while the stream is read, before it
	// is verified: use it only if ReadFromWith succeeds.
	Slices map[string]SliceSink
	// VerifyOnly: the entries not in Slices are checked but not assigned.
	VerifyOnly bool
}

// ReadFromWith is ReadFrom with some entries diverted or left unassigned (see ReadOptions).
func (r *Registry) ReadFromWith(rd io.Reader, o ReadOptions) (int64, error) {
	sr := &streamReader{r: rd, remaining: inputRemaining(rd), sinks: o.Slices}
	var hdr [headerLen]byte
	if err := sr.readFramed(hdr[:], "header"); err != nil {
		return sr.off, err
	}
	if string(hdr[:len(magic)]) != magic {
		return sr.off, fmt.Errorf("state: read header: %w", ErrNotState)
	}
	if v := binary.LittleEndian.Uint16(hdr[len(magic):]); v != Version {
		return sr.off, fmt.Errorf("state: read header: version %d, want %d: %w", v, Version, ErrUnsupportedVersion)
	}
	if res := binary.LittleEndian.Uint16(hdr[len(magic)+2:]); res != 0 {
		return sr.off, sr.corrupt(fmt.Sprintf("reserved header field is %d", res), nil)
	}

	// Assignments are staged and run only after the trailer verifies (all-or-nothing).
	staged := make([]func(), 0, len(r.entries))
	seen := make(map[string]bool, len(r.entries))
	var count uint32
	for {
		sr.entry = ""
		var tag [1]byte
		if err := sr.readFramed(tag[:], "entry tag"); err != nil {
			return sr.off, err
		}
		if tag[0] == tagTrailer {
			break
		}
		if tag[0] != tagEntry {
			return sr.off, sr.corrupt(fmt.Sprintf("bad tag 0x%02x", tag[0]), nil)
		}
		assign, err := r.readEntry(sr, seen)
		if err != nil {
			return sr.off, err
		}
		if !o.VerifyOnly && assign != nil {
			staged = append(staged, assign)
		}
		count++
	}

	var tr [8]byte
	if err := sr.readFull(tr[:], "trailer"); err != nil {
		return sr.off, err
	}
	sr.sum = crc32.Update(sr.sum, castagnoli, tr[:4])
	if got := binary.LittleEndian.Uint32(tr[:4]); got != count {
		return sr.off, sr.corrupt(fmt.Sprintf("trailer counts %d entries, stream has %d", got, count), nil)
	}
	if got := binary.LittleEndian.Uint32(tr[4:]); got != sr.sum {
		return sr.off, sr.corrupt("stream checksum mismatch", nil)
	}
	for _, e := range r.entries {
		if !seen[e.name] {
			sr.entry = e.name
			return sr.off, sr.mismatch("registered but missing from the stream", nil)
		}
	}
	for _, assign := range staged {
		assign()
	}
	return sr.off, nil
}

// readEntry reads one entry after its tag and returns the assignment that installs its value.
func (r *Registry) readEntry(sr *streamReader, seen map[string]bool) (func(), error) {
	// Sized for any nameLen byte; names longer than MaxNameLen are rejected after the CRC.
	var buf [2 + 255 + 4 + 8 + 4]byte
	hb := append(buf[:0], tagEntry, 0)
	if err := sr.readFull(hb[1:2], "entry header"); err != nil {
		return nil, err
	}
	nameLen := int(hb[1])
	hb = hb[:2+nameLen+4+8+4]
	if err := sr.readFull(hb[2:], "entry header"); err != nil {
		return nil, err
	}
	body := hb[:len(hb)-4]
	hdrCRC := crc32.Update(0, castagnoli, body)
	name := string(hb[2 : 2+nameLen])
	if binary.LittleEndian.Uint32(hb[len(body):]) != hdrCRC {
		// The name itself may be damaged; report it only as a hint.
		sr.entry = name
		return nil, sr.corrupt("entry header checksum mismatch", nil)
	}
	sr.sum = crc32.Update(sr.sum, castagnoli, hb[1:]) // the tag was added when read
	sr.entry = name
	f := hb[2+nameLen:]
	enc, elem, flags, elemSize := encoding(f[0]), f[1], f[2], int(f[3])
	length := binary.LittleEndian.Uint64(f[4:])

	e := r.byName[name]
	switch {
	case validName(name) != nil:
		return nil, sr.corrupt("invalid entry name", nil)
	case seen[name]:
		return nil, sr.corrupt("duplicate entry", nil)
	case e == nil:
		return nil, sr.mismatch("not registered", nil)
	case enc != encRaw && enc != encMsgpack:
		return nil, sr.corrupt(fmt.Sprintf("unknown encoding %d", enc), nil)
	case enc != e.enc:
		return nil, sr.mismatch(fmt.Sprintf("stream has a %s value, registered value is %s", encName(enc), encName(e.enc)), nil)
	}
	seen[name] = true
	if enc == encMsgpack {
		if reflect.Kind(elem) != e.typ.Kind() {
			return nil, sr.mismatch(fmt.Sprintf("stream has a %s, registered value is a %s", reflect.Kind(elem), e.typ.Kind()), nil)
		}
		if flags != 0 || elemSize != 0 {
			return nil, sr.corrupt("unexpected flags on msgpack entry", nil)
		}
		return r.readMsgpack(sr, e, length, hdrCRC)
	}
	return r.readRaw(sr, e, Kind(elem), flags, elemSize, length, hdrCRC)
}

func encName(e encoding) string {
	if e == encRaw {
		return "raw numeric"
	}
	return "msgpack"
}

// readEntryCRC reads the entry CRC that follows the data and compares it with crc.
func (sr *streamReader) readEntryCRC(crc uint32) error {
	var b [4]byte
	if err := sr.readFramed(b[:], "entry checksum"); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(b[:]) != crc {
		return sr.corrupt("checksum mismatch", nil)
	}
	return nil
}

func (r *Registry) readRaw(sr *streamReader, e *entry, kind Kind, flags uint8, elemSize int, length uint64, crc uint32) (func(), error) {
	if kind == KindInvalid || int(kind) >= len(kindNames) {
		return nil, sr.corrupt(fmt.Sprintf("unknown element code %d", kind), nil)
	}
	isSlice := flags&flagSlice != 0
	switch {
	case flags&^(flagSlice|flagNil) != 0 || (!isSlice && flags&flagNil != 0):
		return nil, sr.corrupt(fmt.Sprintf("invalid flags 0x%02x", flags), nil)
	case kind != e.kind:
		return nil, sr.mismatch(fmt.Sprintf("stream has %s elements, registered value has %s", kind, e.kind), nil)
	case elemSize != e.elemSize:
		return nil, sr.mismatch(fmt.Sprintf("stream has %d-byte %s, this platform's are %d bytes", elemSize, kind, e.elemSize), nil)
	case isSlice != e.slice:
		return nil, sr.mismatch(fmt.Sprintf("stream has a %s, registered value is a %s", shape(isSlice), shape(e.slice)), nil)
	case length%uint64(elemSize) != 0:
		return nil, sr.corrupt(fmt.Sprintf("length %d is not a multiple of the element size %d", length, elemSize), nil)
	case !isSlice && length != uint64(elemSize):
		return nil, sr.corrupt(fmt.Sprintf("scalar length %d, want %d", length, elemSize), nil)
	case flags&flagNil != 0 && length != 0:
		return nil, sr.corrupt("nil slice with data", nil)
	}
	if err := sr.checkLength(length, MaxRawEntryBytes); err != nil {
		return nil, err
	}
	unit := kind.swapUnit(elemSize)

	if !isSlice {
		var buf [16]byte
		b := buf[:elemSize]
		if err := sr.readFull(b, "data"); err != nil {
			return nil, err
		}
		if err := sr.readEntryCRC(crc32.Update(crc, castagnoli, b)); err != nil {
			return nil, err
		}
		if !hostLittleEndian {
			swapBytes(b, unit)
		}
		dst := unsafe.Slice((*byte)(e.ptr.UnsafePointer()), elemSize)
		return func() { copy(dst, b) }, nil
	}

	if sink := sr.sinks[e.name]; sink != nil {
		return nil, sr.readToSink(sink, int64(length), unit, crc)
	}
	typ := e.typ
	if flags&flagNil != 0 {
		if err := sr.readEntryCRC(crc); err != nil {
			return nil, err
		}
		return func() { e.ptr.Elem().Set(reflect.Zero(typ)) }, nil
	}
	total := int(length / uint64(elemSize))
	// With the remaining input known the length has been checked against it, so allocate at
	// once; otherwise grow as data arrives so a lying length costs nothing.
	capacity := total
	if sr.remaining < 0 {
		capacity = min(total, chunkSize/elemSize)
	}
	v := reflect.MakeSlice(typ, capacity, capacity)
	filled := 0 // elements read
	for filled < total {
		if filled == v.Len() {
			nv := reflect.MakeSlice(typ, min(total, 2*v.Len()), min(total, 2*v.Len()))
			reflect.Copy(nv, v)
			v = nv
		}
		n := min(v.Len()-filled, chunkSize/elemSize)
		b := unsafe.Slice((*byte)(v.UnsafePointer()), v.Len()*elemSize)[filled*elemSize : (filled+n)*elemSize]
		if err := sr.readFull(b, "data"); err != nil {
			return nil, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		if !hostLittleEndian {
			swapBytes(b, unit)
		}
		filled += n
	}
	if err := sr.readEntryCRC(crc); err != nil {
		return nil, err
	}
	return func() { e.ptr.Elem().Set(v) }, nil
}

// readToSink streams a raw slice's data of length bytes, checksumming all of it and copying
// the part the sink wants straight into its memory.
func (sr *streamReader) readToSink(sink SliceSink, length int64, unit int, crc uint32) error {
	lo, dst, err := sink.Window(length)
	if err != nil {
		return sr.mismatch(err.Error(), err)
	}
	if lo < 0 || lo+int64(len(dst)) > length || lo%int64(max(unit, 1)) != 0 {
		return sr.mismatch(fmt.Sprintf("sink window [%d,%d) of %d bytes", lo, lo+int64(len(dst)), length), nil)
	}
	var scratch []byte
	skip := func(n int64) error {
		for n > 0 {
			if scratch == nil {
				scratch = make([]byte, min(chunkSize, length))
			}
			b := scratch[:min(int64(len(scratch)), n)]
			if err := sr.readFull(b, "data"); err != nil {
				return err
			}
			crc = crc32.Update(crc, castagnoli, b)
			n -= int64(len(b))
		}
		return nil
	}
	if err := skip(lo); err != nil {
		return err
	}
	for off := 0; off < len(dst); off += chunkSize {
		b := dst[off:min(off+chunkSize, len(dst))]
		if err := sr.readFull(b, "data"); err != nil {
			return err
		}
		crc = crc32.Update(crc, castagnoli, b)
		if !hostLittleEndian {
			swapBytes(b, unit)
		}
	}
	if err := skip(length - lo - int64(len(dst))); err != nil {
		return err
	}
	return sr.readEntryCRC(crc)
}

func shape(slice bool) string {
	if slice {
		return "slice"
	}
	return "scalar"
}

func (r *Registry) readMsgpack(sr *streamReader, e *entry, length uint64, crc uint32) (func(), error) {
	if err := sr.checkLength(length, MaxMsgpackEntryBytes); err != nil {
		return nil, err
	}
	var data []byte
	if sr.remaining >= 0 {
		data = make([]byte, length)
		if err := sr.readFull(data, "data"); err != nil {
			return nil, err
		}
	} else {
		// Unknown input size: let the buffer grow with the data actually received.
		var buf bytes.Buffer
		buf.Grow(int(min(length, chunkSize)))
		n, err := io.CopyN(&buf, sr.r, int64(length))
		sr.off += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, sr.corrupt("truncated data", io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("state: read entry %q: %w", e.name, err)
		}
		data = buf.Bytes()
	}
	// Verify before decoding: the decoder only ever sees intact bytes.
	if err := sr.readEntryCRC(crc32.Update(crc, castagnoli, data)); err != nil {
		return nil, err
	}
	if err := checkMsgpack(data); err != nil {
		return nil, sr.corrupt("malformed msgpack", err)
	}
	tmp := reflect.New(e.typ)
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	if err := dec.DecodeValue(tmp.Elem()); err != nil {
		// The bytes are intact and well-formed, so they encode a different type.
		return nil, sr.mismatch(fmt.Sprintf("cannot decode into %s", e.typ), err)
	}
	return func() { e.ptr.Elem().Set(tmp.Elem()) }, nil
}
