package msgpackcheck

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheck(t *testing.T) {
	good, _ := msgpack.Marshal(map[string]any{"a": []int{1, 2, 3}, "b": []byte("xyz"), "c": 1.5, "d": nil})
	for name, tc := range map[string]struct {
		in []byte
		ok bool
	}{
		"a real message":           {good, true},
		"array32 of 3e9":           {[]byte("\xdd\xb2\xd0\x5e\x00"), false},
		"map16 of 65535":           {[]byte("\xde\xff\xff\x01"), false},
		"bin32 longer than input":  {[]byte("\xc6\x00\x00\x00\x05abc"), false},
		"nesting at the limit":     {append(bytes.Repeat([]byte{0x91}, MaxDepth-1), 0xc0), true},
		"nesting beyond the limit": {append(bytes.Repeat([]byte{0x91}, MaxDepth), 0xc0), false},
		"never-used code":          {[]byte{0xc1}, false},
		"trailing bytes":           {[]byte{0xc0, 0xc0}, false},
		"empty":                    {nil, false},
		"fixext16 cut short":       {[]byte("\xd8\x01abc"), false},
		"a time (an ext)":          {mustMarshal(t, time.Date(2026, 11, 23, 12, 0, 0, 5, time.UTC)), true},
	} {
		err := Check(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", name, err, tc.ok)
		}
		if name == "empty" && !errors.Is(err, ErrTruncated) {
			t.Errorf("empty: %v, want ErrTruncated", err)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzCheck: what Check accepts is exactly one object the decoder can walk to its end.
func FuzzCheck(f *testing.F) {
	f.Add([]byte("\x82\xa1a\x93\x01\x02\x03\xa1b\xc4\x03xyz"))
	f.Add([]byte("\xdd\xb2\xd0\x5e\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) != nil {
			return
		}
		r := bytes.NewReader(b)
		if err := msgpack.NewDecoder(r).Skip(); err != nil || r.Len() != 0 {
			t.Fatalf("accepted % x: skip %v, %d bytes left", b, err, r.Len())
		}
	})
}
