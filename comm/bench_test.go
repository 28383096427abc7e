package comm

import "testing"

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
