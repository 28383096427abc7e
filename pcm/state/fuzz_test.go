package state

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"
)

type fuzzTarget struct {
	U    []float64
	C    Field
	Iter int32
	Z    complex128
	P    Params
	M    map[string][]int
	S    string
	Rows [][]float64
	Any  any
}

func fuzzSeed(tb testing.TB) []byte {
	w := NewRegistry()
	registerFields(tb, w, &fuzzTarget{
		U: []float64{1, 2}, C: Field{3}, Iter: 4, Z: 5i, P: Params{Name: "p", Steps: []int{1}},
		M: map[string][]int{"a": {1}}, S: "s", Rows: [][]float64{{1}, nil}, Any: []any{"x", 1.5},
	})
	return encode(tb, w)
}

// FuzzReadFrom checks that the decoder never panics, never accepts a stream it cannot write
// back, and never allocates much more than the input's size.
func FuzzReadFrom(f *testing.F) {
	seed := fuzzSeed(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOne(t, data)
		// Checksums stop nearly every mutation at the framing; also try the input with its
		// checksums repaired so the fuzzer reaches the validation and decoding behind them.
		fuzzOne(t, fixChecksums(data))
	})
}

func fuzzOne(t *testing.T, data []byte) {
	{
		r := NewRegistry()
		registerFields(t, r, &fuzzTarget{})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := r.ReadFrom(bytes.NewReader(data))
		runtime.ReadMemStats(&after)
		// The decoded values may legitimately be a few dozen times larger than their msgpack
		// form (e.g. one byte per slice header); what must never happen is an allocation
		// driven by a declared length.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(256*len(data))+8<<20 {
			t.Fatalf("allocated %d bytes for %d bytes of input", alloc, len(data))
		}
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := r.WriteTo(&buf); err != nil {
			t.Fatalf("accepted stream cannot be written back: %v", err)
		}
		r2 := NewRegistry()
		registerFields(t, r2, &fuzzTarget{})
		if _, err := r2.ReadFrom(&buf); err != nil {
			t.Fatalf("rewritten stream does not read back: %v", err)
		}
	}
}

// fixChecksums returns a copy of b with every entry CRC, the trailer count and the stream
// CRC recomputed, as far as b's framing can be followed.
func fixChecksums(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) < headerLen {
		return b
	}
	sum := crc32.Update(0, castagnoli, b[:headerLen])
	p, count := headerLen, uint32(0)
	for p < len(b) && b[p] == tagEntry {
		if p+2 > len(b) {
			return b
		}
		hl := 2 + int(b[p+1]) + 4 + 8
		if p+hl+4 > len(b) {
			return b
		}
		crc := crc32.Update(0, castagnoli, b[p:p+hl])
		binary.LittleEndian.PutUint32(b[p+hl:], crc)
		length := binary.LittleEndian.Uint64(b[p+hl-8:])
		d := p + hl + 4
		if length > uint64(len(b)-d) || uint64(len(b)-d)-length < 4 {
			return b
		}
		end := d + int(length)
		binary.LittleEndian.PutUint32(b[end:], crc32.Update(crc, castagnoli, b[d:end]))
		sum = crc32.Update(sum, castagnoli, b[p:d])
		sum = crc32.Update(sum, castagnoli, b[end:end+4])
		p = end + 4
		count++
	}
	if p+trailerLen > len(b) || b[p] != tagTrailer {
		return b
	}
	binary.LittleEndian.PutUint32(b[p+1:], count)
	sum = crc32.Update(sum, castagnoli, b[p:p+5])
	binary.LittleEndian.PutUint32(b[p+5:], sum)
	return b
}

func TestFixChecksumsIdentity(t *testing.T) {
	seed := fuzzSeed(t)
	if !bytes.Equal(fixChecksums(seed), seed) {
		t.Fatal("fixChecksums changed a valid stream")
	}
}
