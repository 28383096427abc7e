package nodecpu

import (
	"testing"
	"time"
)

// What the IOS agent pays per sampling period on this machine.
func BenchmarkMeterSample(b *testing.B) {
	r, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	m := NewMeter(r, false)
	now := time.Now()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		if _, err := m.Sample(now); err != nil {
			b.Skip(err)
		}
	}
}

// What comm's load gate pays per sample (every 100 ms while polling).
func BenchmarkStallRead(b *testing.B) {
	r, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := r.OpenStall(nil)
	if err != nil {
		b.Skip(err)
	}
	defer s.Close()
	for i := 0; i < b.N; i++ {
		if _, err := s.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
