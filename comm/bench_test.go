package comm

import (
	"fmt"
	"testing"
)

func BenchmarkAppendHeader(b *testing.B) {
	h := &Header{Kind: KindEager, Elem: 12, Ctx: 4, Tag: 7, Len: 16, Total: 16}
	buf := make([]byte, 0, HeaderSize)
	for b.Loop() {
		buf = AppendHeader(buf[:0], h)
	}
}

func BenchmarkDecodeHeader(b *testing.B) {
	enc := AppendHeader(nil, &Header{Kind: KindEager, Elem: 12, Ctx: 4, Tag: 7, Len: 16, Total: 16})
	for b.Loop() {
		if _, err := DecodeHeader(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRing measures one frame through a ring, written and read by one goroutine: the
// copies and the counters' atomics, without any waiting.
func BenchmarkRing(b *testing.B) {
	for _, size := range []int{16, 4096, 65536} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			mem := make([]byte, ringMapBytes)
			r, err := newShmRing(mem)
			if err != nil {
				b.Fatal(err)
			}
			w, rd := newRingWriter(r, nil), newRingReader(r, nil)
			hdr := AppendHeader(nil, &Header{Kind: KindEager, Len: uint32(size), Total: uint64(size)})
			payload, dst := make([]byte, size), make([]byte, HeaderSize+size)
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := w.write(noDeadline, hdr, payload); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < len(dst); {
					n, err := rd.Read(dst[got:])
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}
