package pcm_test

import (
	"io"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

// BenchmarkReconfigureNoCheckpoint measures a Reconfigure call at which no checkpoint is
// taken: the cost PCM adds to every iteration.
func BenchmarkReconfigureNoCheckpoint(b *testing.B) {
	for _, c := range []struct {
		name  string
		ranks int
		opts  pcm.Options
	}{
		{"off/np1", 1, pcm.Options{}},
		{"every/np1", 1, pcm.Options{Every: 1 << 30}},             // scheduled, never due: no communication
		{"ondemand-adaptive/np1", 1, pcm.Options{OnDemand: true}}, // agreement every M calls, M adaptive
		{"ondemand-adaptive/np4", 4, pcm.Options{Every: 1 << 30, OnDemand: true}},
		{"ondemand-every-call/np4", 4, pcm.Options{OnDemand: true, PollEvery: 1}}, // the cost of one agreement
	} {
		b.Run(c.name, func(b *testing.B) {
			c.opts.JobID, c.opts.Dir, c.opts.Log = "bench", b.TempDir(), io.Discard
			mpitest.Run(b, mpitest.InProc, c.ranks, func(w *mpi.Comm) error {
				p, err := pcm.InitWith(w, c.opts)
				if err != nil {
					return err
				}
				u := make([]float64, 1024)
				if err := p.Register("u", &u); err != nil {
					return err
				}
				if err := p.Load(); err != nil {
					return err
				}
				if w.Rank() == 0 {
					b.ResetTimer()
				}
				for i := 1; i <= b.N; i++ {
					if _, err := p.Reconfigure(i); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
