//go:build unix

package profiler

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// BenchmarkHeat2D measures the profiler's overhead on the workload the issue names: heat2d's
// Jacobi sweep (the same stencil and halo exchange as ./heat2d) on an N = 2048 grid over
// P = 2 goroutine ranks, one iteration per b.N, without a profiler ("off") and with the
// JobProfiler pcm starts ("profiled": interceptor, an Iteration mark per iteration, a
// profile published every second). Compare the two ns/op, e.g.
//
//	go test -run '^$' -bench Heat2D -benchtime 300x -count 10 ./profiler/
func BenchmarkHeat2D(b *testing.B) {
	const n, size = 2048, 2
	for _, profiled := range []bool{false, true} {
		name := "off"
		if profiled {
			name = "profiled"
		}
		b.Run(name, func(b *testing.B) {
			mpitest.Run(b, mpitest.InProc, size, func(c *mpi.Comm) error {
				var jp *JobProfiler
				if profiled {
					var err error
					jp, err = StartJob(c, JobOptions{JobID: "bench", Every: time.Second, Publish: func([]byte) error { return nil }})
					if err != nil {
						return err
					}
					defer jp.Close()
				}
				rank := c.Rank()
				h := newHeatRank(c, n)
				if rank == 0 {
					for j := range n + 2 {
						h.u[j], h.unew[j] = 100, 100
					}
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if rank == 0 {
					b.ResetTimer()
				}
				for i := 1; i <= b.N; i++ {
					if err := h.step(); err != nil {
						return err
					}
					jp.Iteration(i)
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if rank == 0 {
					b.StopTimer()
				}
				return nil
			})
		})
	}
}

// BenchmarkHeat2DOverhead is BenchmarkHeat2D made robust to a busy machine: each of b.N
// rounds times a block of heat2dBlock iterations without the profiler and one with it (in
// alternating order), on the same grid and goroutines, and the benchmark reports the median
// over rounds of the relative slowdown in wall time ("overhead-%") and in the process's CPU
// time ("cpu-overhead-%", less sensitive to other processes) besides the mean wall times
// per iteration.
// Load that changes slowly affects both blocks of a round alike and cancels out. It runs
// over the in-process transport and over loopback TCP (what mpirun's ranks use).
//
//	go test -run '^$' -bench Heat2DOverhead -benchtime 40x ./profiler/
func BenchmarkHeat2DOverhead(b *testing.B) {
	for _, tr := range []mpitest.Transport{mpitest.InProc, mpitest.TCP} {
		b.Run(tr.String(), func(b *testing.B) { heat2dOverhead(b, tr) })
	}
}

func heat2dOverhead(b *testing.B, tr mpitest.Transport) {
	const n, size = 2048, 2
	var off, on, cpuOff, cpuOn []time.Duration
	var cpuStart time.Duration
	mpitest.Run(b, tr, size, func(c *mpi.Comm) error {
		rank := c.Rank()
		h := newHeatRank(c, n)
		iter := 0
		block := func(jp *JobProfiler) (time.Duration, error) {
			if err := c.Barrier(); err != nil {
				return 0, err
			}
			start := time.Now()
			if rank == 0 {
				cpuStart = processCPU()
			}
			for range heat2dBlock {
				if err := h.step(); err != nil {
					return 0, err
				}
				iter++
				jp.Iteration(iter)
			}
			err := c.Barrier()
			d := time.Since(start)
			if rank == 0 {
				cpuStart = processCPU() - cpuStart // both ranks' CPU time: they share the process
			}
			return d, err
		}
		profiled := func() (time.Duration, error) {
			jp, err := StartJob(c, JobOptions{JobID: "bench", Every: time.Second, Publish: func([]byte) error { return nil }})
			if err != nil {
				return 0, err
			}
			d, err := block(jp)
			if cerr := jp.Close(); err == nil {
				err = cerr
			}
			return d, err
		}
		if _, err := block(nil); err != nil { // warm up caches and connections
			return err
		}
		if rank == 0 {
			b.ResetTimer()
		}
		for i := range b.N {
			var dOff, dOn time.Duration
			var err error
			var cOff, cOn time.Duration
			if i%2 == 0 {
				if dOff, err = block(nil); err == nil {
					cOff = cpuStart
					dOn, err = profiled()
					cOn = cpuStart
				}
			} else {
				if dOn, err = profiled(); err == nil {
					cOn = cpuStart
					dOff, err = block(nil)
					cOff = cpuStart
				}
			}
			if err != nil {
				return err
			}
			if rank == 0 {
				off, on = append(off, dOff), append(on, dOn)
				cpuOff, cpuOn = append(cpuOff, cOff), append(cpuOn, cOn)
			}
		}
		if rank == 0 {
			b.StopTimer()
		}
		return nil
	})
	if len(off) == 0 {
		return
	}
	median := func(a, b []time.Duration) float64 {
		r := make([]float64, len(a))
		for i := range a {
			r[i] = float64(b[i])/float64(a[i]) - 1
		}
		slices.Sort(r)
		return 100 * r[len(r)/2]
	}
	var sumOff, sumOn time.Duration
	for i := range off {
		sumOff += off[i]
		sumOn += on[i]
	}
	iters := float64(len(off) * heat2dBlock)
	b.ReportMetric(median(off, on), "overhead-%")
	b.ReportMetric(median(cpuOff, cpuOn), "cpu-overhead-%")
	b.ReportMetric(float64(sumOff.Nanoseconds())/iters, "off-ns/iter")
	b.ReportMetric(float64(sumOn.Nanoseconds())/iters, "profiled-ns/iter")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heat2dBlock is the number of iterations BenchmarkHeat2DOverhead times in one block.
const heat2dBlock = 20

// jacobi is heat2d's step: one 5-point sweep over the rows interior rows.
// heatRank is one rank's block of rows of heat2d's grid, with a ghost row above and below.
type heatRank struct {
	c        *mpi.Comm
	n, rows  int
	up, down int // neighbour ranks, or mpi.ProcNull
	u, unew  []float64
}

func newHeatRank(c *mpi.Comm, n int) *heatRank {
	rank, size := c.Rank(), c.Size()
	h := &heatRank{c: c, n: n, rows: n / size, up: rank - 1, down: rank + 1}
	if rank == 0 {
		h.up = mpi.ProcNull
	}
	if rank == size-1 {
		h.down = mpi.ProcNull
	}
	w := n + 2
	h.u, h.unew = make([]float64, (h.rows+2)*w), make([]float64, (h.rows+2)*w)
	return h
}

// step exchanges the ghost rows with the neighbours and sweeps once, as heat2d does.
func (h *heatRank) step() error {
	n, rows, w, u := h.n, h.rows, h.n+2, h.u
	if _, err := mpi.Sendrecv(h.c, u[w+1:w+1+n], h.up, 1, u[(rows+1)*w+1:(rows+1)*w+1+n], h.down, 1); err != nil {
		return err
	}
	if _, err := mpi.Sendrecv(h.c, u[rows*w+1:rows*w+1+n], h.down, 2, u[1:1+n], h.up, 2); err != nil {
		return err
	}
	jacobi(h.unew, u, rows, n)
	h.u, h.unew = h.unew, h.u
	return nil
}

func jacobi(dst, src []float64, rows, n int) {
	w := n + 2
	for i := 1; i <= rows; i++ {
		out := dst[i*w+1 : i*w+1+n]
		up := src[(i-1)*w+1:][:len(out)]
		dn := src[(i+1)*w+1:][:len(out)]
		left := src[i*w:][:len(out)]
		right := src[i*w+2:][:len(out)]
		for j := range out {
			out[j] = 0.25 * (up[j] + dn[j] + left[j] + right[j])
		}
	}
}
