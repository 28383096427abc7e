package pcm

import (
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// heatStep is heat2d's sweep: rows interior rows of src (rows+2 rows of n+2, ghost rows and
// boundary columns included) into dst, in the same expression order.
func heatStep(dst, src []float64, rows, n int) {
	w := n + 2
	for i := 1; i <= rows; i++ {
		for j := 1; j <= n; j++ {
			dst[i*w+j] = 0.25 * (src[(i-1)*w+j] + src[(i+1)*w+j] + src[i*w+j-1] + src[i*w+j+1])
		}
	}
}

// seqHeat is the undisturbed run on one process: the final interior rows, n+2 wide.
func seqHeat(n, iters int) []float64 {
	w := n + 2
	u, v := make([]float64, (n+2)*w), make([]float64, (n+2)*w)
	for j := range w {
		u[j], v[j] = 100, 100
	}
	for range iters {
		heatStep(v, u, n, n)
		u, v = v, u
	}
	return u[w : (n+1)*w]
}

// TestResizeSequenceKeepsHeatBitwise runs the thesis's heat application with its grid in a
// Block on 4 of 6 processes, splits it to 6, merges it to 3 (ranks 1, 3 and 5 leave) and
// splits it to 5 (two of them come back) at iteration boundaries, moving the rows with
// resizeData, and checks the final grid is bitwise the undisturbed run's.
func TestResizeSequenceKeepsHeatBitwise(t *testing.T) {
	const n, iters, procs = 29, 40, 6
	want := seqHeat(n, iters)
	got := make([]float64, n*(n+2))
	at := []int{10, 20, 30}
	// members[k][q]: the rank of process q in configuration k, -1 if it has none.
	members := [][]int{{0, 1, 2, 3, -1, -1}}
	for _, size := range []int{6, 3, 5} {
		cur, next := members[len(members)-1], make([]int, procs)
		old := 0
		for _, r := range cur {
			if r >= 0 {
				old++
			}
		}
		joined := old
		for q, r := range cur {
			next[q] = -1
			switch {
			case size < old && r >= 0 && r%2 == 0:
				next[q] = r / 2 // the odd ranks leave
			case size > old && r >= 0:
				next[q] = r
			case size > old && joined < size:
				next[q], joined = joined, joined+1
			}
		}
		members = append(members, next)
	}
	mpitest.Run(t, mpitest.InProc, procs, func(all *mpi.Comm) error {
		me := all.Rank()
		rank, size := members[0][me], 4
		first, err := all.Split(min(rank, 0)+1, me) // the holders, and the others apart
		if err != nil {
			return err
		}
		p, err := InitWith(first, Options{Log: io.Discard})
		if err != nil {
			return err
		}
		u, err := NewBlock[float64](p, "u", n, n+2, Halo(1), DoubleBuffer())
		if err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		if rank < 0 {
			u.release()
		}
		world := first
		boundary := func() {
			if rank == 0 {
				for _, g := range [][]float64{u.Padded(), u.Scratch()} {
					for j := range n + 2 {
						g[j] = 100
					}
				}
			}
		}
		boundary()
		iter := 0
		run := func(until int) error {
			w := n + 2
			for ; iter < until; iter++ {
				if rank < 0 {
					continue
				}
				g, rows := u.Padded(), u.Rows()
				up, down := rank-1, rank+1
				if rank == 0 {
					up = mpi.ProcNull
				}
				if rank == size-1 {
					down = mpi.ProcNull
				}
				if _, err := mpi.Sendrecv(world, g[w:2*w], up, 1, g[(rows+1)*w:(rows+2)*w], down, 1); err != nil {
					return err
				}
				if _, err := mpi.Sendrecv(world, g[rows*w:(rows+1)*w], down, 2, g[:w], up, 2); err != nil {
					return err
				}
				heatStep(u.Scratch(), g, rows, n)
				u.Flip()
			}
			return nil
		}
		for k, stop := range at {
			if err := run(stop); err != nil {
				return err
			}
			cur, next := members[k], members[k+1]
			newSize := 0
			for _, r := range next {
				if r >= 0 {
					newSize++
				}
			}
			// c: the holders keep their numbers, the joiners follow in their new ranks'
			// order.
			key := func(q int) int {
				if cur[q] >= 0 {
					return cur[q]
				}
				return next[q]
			}
			color := mpi.Undefined
			if cur[me] >= 0 || next[me] >= 0 {
				color = 0
			}
			c, err := all.Split(color, key(me))
			if err != nil {
				return err
			}
			if c != nil {
				newRanks := make([]int, c.Size())
				for q := range procs {
					if cur[q] >= 0 || next[q] >= 0 {
						newRanks[key(q)] = next[q]
					}
				}
				if err := resize(p, c, size, newRanks, newSize, nil); err != nil {
					return fmt.Errorf("resize %d -> %d: %w", size, newSize, err)
				}
			}
			color = mpi.Undefined
			if next[me] >= 0 {
				color = 0
			}
			nw, err := all.Split(color, next[me])
			if err != nil {
				return err
			}
			rank, size, world = next[me], newSize, nw
			if nw != nil {
				p.world = nw
			}
			boundary()
		}
		if err := run(iters); err != nil {
			return err
		}
		if rank >= 0 {
			copy(got[u.Offset()*(n+2):], u.Local())
		}
		return nil
	})
	for k := range want {
		if math.Float64bits(got[k]) != math.Float64bits(want[k]) {
			t.Fatalf("cell (%d,%d) = %v after the resizes, undisturbed %v", k/(n+2), k%(n+2), got[k], want[k])
		}
	}
}
