package state

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

type windowOf struct {
	lo, n int64
	buf   []byte
	saw   int64
}

func (w *windowOf) Window(length int64) (int64, []byte, error) {
	w.saw = length
	if w.lo < 0 {
		return 0, nil, errors.New("refused")
	}
	w.buf = make([]byte, w.n)
	return w.lo, w.buf, nil
}

// TestReadFromWithSinks: a diverted slice delivers exactly the asked window and leaves the
// registered slice alone; VerifyOnly assigns nothing; a damaged stream is still detected
// in the part the sink did not want; a refusing sink is a mismatch.
func TestReadFromWithSinks(t *testing.T) {
	src := NewRegistry()
	xs, n := []float64{1, 2, 3, 4, 5, 6}, 7
	src.Register("x", &xs)
	src.Register("n", &n)
	var stream bytes.Buffer
	if _, err := src.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}

	dst := NewRegistry()
	ys, m := []float64{9}, 0
	dst.Register("x", &ys)
	dst.Register("n", &m)
	sink := &windowOf{lo: 16, n: 24} // elements 2..4
	if _, err := dst.ReadFromWith(bytes.NewReader(stream.Bytes()), ReadOptions{Slices: map[string]SliceSink{"x": sink}}); err != nil {
		t.Fatal(err)
	}
	got := unsafe.Slice((*float64)(unsafe.Pointer(&sink.buf[0])), 3)
	if sink.saw != 48 || got[0] != 3 || got[1] != 4 || got[2] != 5 {
		t.Errorf("window: length %d, values %v, want 48 and [3 4 5]", sink.saw, got)
	}
	if len(ys) != 1 || ys[0] != 9 || m != 7 {
		t.Errorf("registered values after the read: x %v (want untouched [9]), n %d (want 7)", ys, m)
	}

	m = 0
	if _, err := dst.ReadFromWith(bytes.NewReader(stream.Bytes()), ReadOptions{Slices: map[string]SliceSink{"x": &windowOf{n: 0}}, VerifyOnly: true}); err != nil {
		t.Fatal(err)
	}
	if m != 0 {
		t.Errorf("VerifyOnly assigned n = %d", m)
	}

	bad := bytes.Clone(stream.Bytes())
	bad[len(bad)/2] ^= 1 // in the data of x, outside the window below
	if _, err := dst.ReadFromWith(bytes.NewReader(bad), ReadOptions{Slices: map[string]SliceSink{"x": &windowOf{n: 8}}}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("damage outside the window: %v, want ErrCorrupt", err)
	}
	if _, err := dst.ReadFromWith(bytes.NewReader(stream.Bytes()), ReadOptions{Slices: map[string]SliceSink{"x": &windowOf{lo: -1}}}); !errors.Is(err, ErrMismatch) {
		t.Errorf("refusing sink: %v, want ErrMismatch", err)
	}
	sub := dst.Select(func(name string) bool { return name == "n" })
	if sub.Len() != 1 || sub.Names()[0] != "n" {
		t.Errorf("Select: %v", sub.Names())
	}
}
