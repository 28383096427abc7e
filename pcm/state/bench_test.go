package state

import (
	"bytes"
	"io"
	"testing"
)

func BenchmarkWriteRaw(b *testing.B) {
	u := make([]float64, 64<<20/8)
	for i := range u {
		u[i] = float64(i)
	}
	r := NewRegistry()
	must(b, r.Register("u", &u))
	b.SetBytes(int64(len(u) * 8))
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadRaw(b *testing.B) {
	u := make([]float64, 64<<20/8)
	w := NewRegistry()
	must(b, w.Register("u", &u))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	var v []float64
	r := NewRegistry()
	must(b, r.Register("u", &v))
	b.SetBytes(int64(len(u) * 8))
	b.ResetTimer()
	for b.Loop() {
		v = nil // release the previous copy, as a restoring rank would
		if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
