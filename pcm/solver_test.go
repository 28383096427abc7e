package pcm_test

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

// A small synthetic iterative solver: explicit 1-D diffusion over a line of cells split into
// blocks, one per rank, with a halo exchange every iteration and an Allreduce every few. Its
// state has a raw part (u, iter) and a msgpack part (stats), like a real application's.

const cellsPerRank = 16

type stats struct {
	Max  []float64         `msgpack:"max"`
	Note map[string]string `msgpack:"note"`
}

type solver struct {
	c     *mpi.Comm
	u     []float64 // cellsPerRank cells plus a ghost cell at each end
	next  []float64 // scratch
	iter  int
	stats stats
}

func newSolver(c *mpi.Comm) *solver {
	s := &solver{c: c, u: make([]float64, cellsPerRank+2), next: make([]float64, cellsPerRank+2)}
	for i := 1; i <= cellsPerRank; i++ {
		g := c.Rank()*cellsPerRank + i
		s.u[i] = math.Sin(float64(g)*0.7) + float64(g%5)
	}
	s.stats.Note = map[string]string{"rank": fmt.Sprint(c.Rank())}
	return s
}

// step runs one iteration.
func (s *solver) step() error {
	left, right := s.c.Rank()-1, s.c.Rank()+1
	if left < 0 {
		left = mpi.ProcNull
	}
	if right >= s.c.Size() {
		right = mpi.ProcNull
	}
	n := cellsPerRank
	if _, err := mpi.Sendrecv(s.c, s.u[n:n+1], right, 1, s.u[0:1], left, 1); err != nil {
		return err
	}
	if _, err := mpi.Sendrecv(s.c, s.u[1:2], left, 2, s.u[n+1:n+2], right, 2); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		s.next[i] = s.u[i] + 0.23*(s.u[i-1]-2*s.u[i]+s.u[i+1]) + 1e-3*math.Cos(s.u[i])
	}
	s.u, s.next = s.next, s.u
	if (s.iter+1)%4 == 0 {
		local, global := []float64{0}, []float64{0}
		for _, v := range s.u[1 : n+1] {
			local[0] = math.Max(local[0], math.Abs(v))
		}
		if err := mpi.Allreduce(s.c, local, global, mpi.Max); err != nil {
			return err
		}
		s.stats.Max = append(s.stats.Max, global[0])
	}
	return nil
}

// register registers the solver's state with p.
func (s *solver) register(p *pcm.Process) error {
	for _, r := range []struct {
		name string
		ptr  any
	}{{"u", &s.u}, {"iter", &s.iter}, {"stats", &s.stats}} {
		if err := p.Register(r.name, r.ptr); err != nil {
			return err
		}
	}
	return nil
}

// result is the part of a rank's final state that must be reproduced exactly.
type result struct {
	u    []float64
	iter int
	max  []float64
}

func (s *solver) result() result {
	return result{u: append([]float64(nil), s.u[1:cellsPerRank+1]...), iter: s.iter, max: append([]float64(nil), s.stats.Max...)}
}

// runOpts configures one run of the solver under pcm.
type runOpts struct {
	opts  pcm.Options
	iters int                                   // T
	stop  int                                   // return after this iteration; 0: run to T
	kill  bool                                  // at stop, Abandon the checkpoint in flight, as if killed
	hook  func(s *solver, p *pcm.Process) error // called after each Reconfigure
}

// run runs the solver on c under pcm and returns its final state.
func run(c *mpi.Comm, ro runOpts) (result, *pcm.Process, error) {
	p, err := pcm.InitWith(c, ro.opts)
	if err != nil {
		return result{}, nil, err
	}
	s := newSolver(c)
	if err := s.register(p); err != nil {
		return result{}, p, err
	}
	if err := p.Load(); err != nil {
		return result{}, p, err
	}
	for s.iter < ro.iters {
		if err := s.step(); err != nil {
			return result{}, p, err
		}
		s.iter++
		if _, err := p.Reconfigure(s.iter); err != nil {
			return result{}, p, err
		}
		if ro.hook != nil {
			if err := ro.hook(s, p); err != nil {
				return result{}, p, err
			}
		}
		if s.iter == ro.stop {
			if ro.kill {
				p.Abandon()
				return s.result(), p, p.Close() // not collective after Abandon
			}
			break
		}
	}
	// Close commits the checkpoint in flight, if any (collective, like the loop).
	return s.result(), p, p.Close()
}

// results collects one value per rank from goroutine ranks.
type results[T any] struct {
	mu sync.Mutex
	v  map[int]T
}

func (r *results[T]) set(rank int, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.v == nil {
		r.v = make(map[int]T)
	}
	r.v[rank] = v
}

func (r *results[T]) get(rank int) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v[rank]
}

// sameBits reports whether two float slices are bitwise identical.
func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func equalResults(t *testing.T, rank int, got, want result) {
	t.Helper()
	if got.iter != want.iter || !sameBits(got.u, want.u) || !sameBits(got.max, want.max) {
		t.Errorf("rank %d: state differs from the undisturbed run:\n got  iter %d u %v max %v\n want iter %d u %v max %v",
			rank, got.iter, got.u, got.max, want.iter, want.u, want.max)
	}
}
