package profiler

import (
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// BenchmarkObserve is the profiler's own cost per mpi call.
func BenchmarkObserve(b *testing.B) {
	cs := world(b, 4)
	p := New(Options{})
	ev := mpi.CallEvent{Op: "Sendrecv", Comm: cs[1], Peer: 2, Bytes: 64, Start: t0, Dur: 1}
	p.Observe(ev)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.Observe(ev)
	}
}

// BenchmarkObserveParallel has one goroutine per rank, as in a goroutine world: the shards
// keep them from contending.
func BenchmarkObserveParallel(b *testing.B) {
	cs := world(b, 64)
	p := New(Options{})
	var next = make(chan int, len(cs))
	for i := range cs {
		next <- i
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := cs[<-next%len(cs)]
		ev := mpi.CallEvent{Op: "Allreduce", Comm: c, Peer: -1, Bytes: 8, Start: t0, Dur: 1}
		for pb.Next() {
			p.Observe(ev)
		}
	})
}

type noop struct{}

func (noop) Observe(mpi.CallEvent) {}

// BenchmarkSendrecvRing is a 2-rank ring exchange of 8 float64 per op, without an
// interceptor, with one that does nothing (mpi's own hook cost) and with the profiler.
func BenchmarkSendrecvRing(b *testing.B) {
	for _, bc := range []struct {
		name    string
		install func() func()
	}{
		{"off", func() func() { return func() {} }},
		{"noop", func() func() { mpi.SetInterceptor(noop{}); return func() { mpi.SetInterceptor(nil) } }},
		{"profiler", func() func() {
			p := New(Options{})
			if err := p.Install(); err != nil {
				b.Fatal(err)
			}
			return func() { p.Uninstall() }
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			undo := bc.install()
			defer undo()
			b.ReportAllocs()
			mpitest.Run(b, mpitest.InProc, 2, func(c *mpi.Comm) error {
				send, recv := make([]float64, 8), make([]float64, 8)
				peer := 1 - c.Rank()
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.Rank() == 0 {
					b.ResetTimer()
				}
				for range b.N {
					if _, err := mpi.Sendrecv(c, send, peer, 0, recv, peer, 0); err != nil {
						return err
					}
				}
				if c.Rank() == 0 {
					b.StopTimer()
				}
				return nil
			})
		})
	}
}

// BenchmarkJobIteration is what pcm pays at every iteration boundary.
func BenchmarkJobIteration(b *testing.B) {
	cs := world(b, 1)
	jp, err := StartJob(cs[0], JobOptions{Every: time.Hour, Publish: func([]byte) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer jp.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		jp.Iteration(i + 1)
	}
}
