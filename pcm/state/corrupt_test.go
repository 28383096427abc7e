package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// span locates one entry in a stream.
type span struct {
	name                          string
	start, lenOff, data, crc, end int // tag, length field, data, entry CRC, next byte
}

// layout parses a well-formed stream's framing.
func layout(t testing.TB, b []byte) (entries []span, trailer int) {
	t.Helper()
	p := headerLen
	for b[p] == tagEntry {
		nl := int(b[p+1])
		s := span{name: string(b[p+2 : p+2+nl]), start: p, lenOff: p + 2 + nl + 4}
		length := int(binary.LittleEndian.Uint64(b[s.lenOff:]))
		s.data = s.lenOff + 8 + 4
		s.crc = s.data + length
		s.end = s.crc + 4
		entries = append(entries, s)
		p = s.end
	}
	return entries, p
}

type corruptFixture struct {
	U    []float64
	Iter int
	P    Params
}

func corruptStream(t testing.TB) []byte {
	w := NewRegistry()
	registerFields(t, w, &corruptFixture{U: []float64{1, 2, 3}, Iter: 7, P: Params{Name: "x", Steps: []int{1}}})
	return encode(t, w)
}

// readFixture reads b into a fresh fixture whose values are sentinels, and checks that a
// failed read left them untouched.
func readFixture(t *testing.T, b []byte) error {
	t.Helper()
	dst := &corruptFixture{U: []float64{-1}, Iter: -1, P: Params{Name: "old"}}
	r := NewRegistry()
	registerFields(t, r, dst)
	_, err := r.ReadFrom(bytes.NewReader(b))
	if err != nil && (len(dst.U) != 1 || dst.U[0] != -1 || dst.Iter != -1 || dst.P.Name != "old") {
		t.Fatalf("failed read (%v) modified values: %+v", err, dst)
	}
	return err
}

func TestEveryByteFlipDetected(t *testing.T) {
	good := corruptStream(t)
	entries, _ := layout(t, good)
	for i := range good {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(good)
			b[i] ^= mask
			err := readFixture(t, b)
			if err == nil {
				t.Fatalf("flip 0x%02x at %d not detected", mask, i)
			}
			switch {
			case i < len(magic):
				if !errors.Is(err, ErrNotState) {
					t.Fatalf("byte %d: %v", i, err)
				}
				continue
			case i < len(magic)+2:
				if !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("byte %d: %v", i, err)
				}
				continue
			}
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("byte %d: want *CorruptError, got %v", i, err)
			}
			// Damage inside an entry's data or CRC is attributed to that entry.
			for _, s := range entries {
				if i >= s.data && i < s.end && ce.Entry != s.name {
					t.Fatalf("byte %d (data of %q): error names %q: %v", i, s.name, ce.Entry, err)
				}
			}
		}
	}
}

func TestCorruptionReasons(t *testing.T) {
	good := corruptStream(t)
	entries, trailer := layout(t, good)
	u := entries[0]
	cases := []struct {
		name, entry, reason string
		mutate              func(b []byte) []byte
	}{
		{"data", "U", "checksum mismatch", func(b []byte) []byte { b[u.data+3] ^= 1; return b }},
		{"entryCRC", "U", "checksum mismatch", func(b []byte) []byte { b[u.crc] ^= 1; return b }},
		{"length", "U", "entry header checksum mismatch", func(b []byte) []byte { b[u.lenOff] ^= 8; return b }},
		{"name", "V", "entry header checksum mismatch", func(b []byte) []byte { b[u.start+2] = 'V'; return b }},
		{"trailerCount", "", "trailer counts", func(b []byte) []byte { b[trailer+1]++; return b }},
		{"trailerCRC", "", "stream checksum mismatch", func(b []byte) []byte { b[trailer+5] ^= 1; return b }},
		{"droppedEntry", "", "trailer counts", func(b []byte) []byte {
			return append(b[:entries[1].start:entries[1].start], b[entries[1].end:]...)
		}},
		{"truncatedData", "P", "bytes remaining", func(b []byte) []byte { return b[:entries[2].data+1] }},
		{"truncatedTrailer", "", "truncated trailer", func(b []byte) []byte { return b[:len(b)-2] }},
		{"tag", "", "bad tag", func(b []byte) []byte { b[entries[1].start] = 'X'; return b }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := readFixture(t, c.mutate(bytes.Clone(good)))
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("want *CorruptError, got %v", err)
			}
			if ce.Entry != c.entry || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("got entry %q reason %q (%v), want %q %q", ce.Entry, ce.Reason, err, c.entry, c.reason)
			}
		})
	}
}

func TestEveryTruncationDetected(t *testing.T) {
	good := corruptStream(t)
	for n := 0; n < len(good); n++ {
		if err := readFixture(t, good[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
		// Without a known input size, truncation is found when the data runs out.
		r := NewRegistry()
		registerFields(t, r, &corruptFixture{})
		_, err := r.ReadFrom(noLen{bytes.NewReader(good[:n])})
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "truncated") {
			t.Fatalf("truncated to %d, unknown size: %v", n, err)
		}
	}
}

// craft builds a stream with one entry whose framing fields are given explicitly, with valid
// CRCs, so that validation beyond the checksums can be exercised.
func craft(name string, enc encoding, elem, flags, elemSize uint8, length uint64, data []byte) []byte {
	b := []byte(magic)
	b = binary.LittleEndian.AppendUint16(b, Version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	hdr := entryHeader(nil, name, enc, elem, flags, elemSize, length)
	crc := crc32.Update(0, castagnoli, hdr)
	b = append(b, hdr...)
	b = binary.LittleEndian.AppendUint32(b, crc)
	b = append(b, data...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Update(crc, castagnoli, data))
	sum := crc32.Update(0, castagnoli, b[:headerLen+len(hdr)+4])
	sum = crc32.Update(sum, castagnoli, b[len(b)-4:])
	tr := binary.LittleEndian.AppendUint32([]byte{tagTrailer}, 1)
	sum = crc32.Update(sum, castagnoli, tr)
	b = append(b, tr...)
	return binary.LittleEndian.AppendUint32(b, sum)
}

func TestCraftedValid(t *testing.T) {
	// Sanity check of craft itself.
	data := binary.LittleEndian.AppendUint64(nil, 0x4010000000000000) // 4.0
	var u []float64
	r := NewRegistry()
	must(t, r.Register("u", &u))
	if _, err := r.ReadFrom(bytes.NewReader(craft("u", encRaw, uint8(KindFloat64), flagSlice, 8, 8, data))); err != nil || len(u) != 1 || u[0] != 4 {
		t.Fatalf("u=%v err=%v", u, err)
	}
}

func TestCraftedInvalid(t *testing.T) {
	f64, sl := uint8(KindFloat64), uint8(flagSlice)
	cases := []struct {
		name   string
		stream []byte
		reason string
	}{
		{"tooLong", craft("u", encRaw, f64, sl, 8, MaxRawEntryBytes+8, nil), "exceeds the maximum"},
		{"beyondInput", craft("u", encRaw, f64, sl, 8, 1<<30, nil), "bytes remaining"},
		{"notMultiple", craft("u", encRaw, f64, sl, 8, 7, make([]byte, 7)), "not a multiple"},
		{"badElem", craft("u", encRaw, 99, sl, 8, 8, make([]byte, 8)), "unknown element code"},
		{"badFlags", craft("u", encRaw, f64, 0x10|sl, 8, 8, make([]byte, 8)), "invalid flags"},
		{"nilWithData", craft("u", encRaw, f64, sl|flagNil, 8, 8, make([]byte, 8)), "nil slice with data"},
		{"badEncoding", craft("u", 7, f64, sl, 8, 8, make([]byte, 8)), "unknown encoding"},
		{"badName", craft("u/", encRaw, f64, sl, 8, 8, make([]byte, 8)), "invalid entry name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var u []float64
			r := NewRegistry()
			must(t, r.Register("u", &u))
			_, err := r.ReadFrom(bytes.NewReader(c.stream))
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("got %v, want reason %q", err, c.reason)
			}
		})
	}
}

func TestHostileMsgpackLengths(t *testing.T) {
	// An array32 header claiming 2^32-1 elements, intact checksums: the msgpack decoder would
	// preallocate 32 GiB for a []float64; the structural check must reject it first.
	data := []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}
	var rows [][]float64
	r := NewRegistry()
	must(t, r.Register("rows", &rows))
	_, err := r.ReadFrom(bytes.NewReader(craft("rows", encMsgpack, uint8(reflect.Slice), 0, 0, uint64(len(data)), data)))
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Reason != "malformed msgpack" {
		t.Fatalf("got %v", err)
	}
}

func TestLyingLengthUnknownReader(t *testing.T) {
	// With no way to know the input size, a huge declared length must not be allocated up
	// front.
	var u []float64
	r := NewRegistry()
	must(t, r.Register("u", &u))
	stream := craft("u", encRaw, uint8(KindFloat64), flagSlice, 8, 1<<39, make([]byte, 64))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := r.ReadFrom(noLen{bytes.NewReader(stream)})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("allocated %d bytes for a 64-byte input", alloc)
	}
}

func TestCheckMsgpack(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, maxMsgpackDepth+1)
	deep = append(deep, 0xc0)
	for _, c := range []struct {
		in []byte
		ok bool
	}{
		{[]byte{0xc0}, true},
		{[]byte{0x92, 0x01, 0xa1, 'x'}, true},
		{[]byte{0x81, 0xa1, 'k', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, true},
		{[]byte{0xd6, 0xff, 0, 0, 0, 1}, true},             // fixext4 (timestamp)
		{[]byte{0xc7, 0x02, 0x05, 0xaa, 0xbb}, true},       // ext8
		{[]byte{0x92, 0x01}, false},                        // missing element
		{[]byte{0xc0, 0xc0}, false},                        // trailing
		{[]byte{0xc1}, false},                              // never-used code
		{[]byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, false}, // str32 longer than input
		{[]byte{0xdf, 0x7f, 0xff, 0xff, 0xff}, false},      // map32 with 2^31 entries
		{[]byte{0xcb, 0, 0}, false},                        // short float64
		{deep, false},
		{nil, false},
	} {
		if err := checkMsgpack(c.in); (err == nil) != c.ok {
			t.Errorf("checkMsgpack(% x) = %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestReadIOErrorIsNotCorruption(t *testing.T) {
	good := corruptStream(t)
	boom := errors.New("connection reset")
	r := NewRegistry()
	registerFields(t, r, &corruptFixture{})
	_, err := r.ReadFrom(io.MultiReader(bytes.NewReader(good[:40]), errReader{boom}))
	if !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), `"U"`) {
		t.Errorf("error does not name the entry: %v", err)
	}
}

func ExampleCorruptError() {
	u := []float64{1, 2, 3}
	w := NewRegistry()
	_ = w.Register("u", &u)
	var buf bytes.Buffer
	_, _ = w.WriteTo(&buf)
	b := buf.Bytes()
	b[len(b)-20] ^= 0xff // damage the data

	r := NewRegistry()
	var restored []float64
	_ = r.Register("u", &restored)
	_, err := r.ReadFrom(bytes.NewReader(b))
	var ce *CorruptError
	if errors.As(err, &ce) {
		fmt.Printf("entry %s: %s\n", ce.Entry, ce.Reason)
	}
	fmt.Println(restored == nil)
	// Output:
	// entry u: checksum mismatch
	// true
}
