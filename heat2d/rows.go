package main

import (
	"fmt"

	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

// rowBlocks is the default decomposition: the grid is a pcm.Block of n rows, n+2 wide
// (boundary columns included), split over the ranks in row order. pcm checkpoints it,
// restores it on another number of ranks and moves its rows when the job is resized. Each
// rank's rows are framed by a ghost (or boundary) row above and below (pcm.Halo); the
// block's scratch buffer of the same shape receives the next sweep (pcm.DoubleBuffer).
type rowBlocks struct {
	u                          *pcm.Block[float64]
	n                          int
	world                      *mpi.Comm
	rank, size, rows, up, down int
}

// newRowBlocks registers the grid with p; init is the interior's initial value.
func newRowBlocks(p *pcm.Process, world *mpi.Comm, n int, init float64) (*rowBlocks, error) {
	if world.Size() > n {
		// Every rank needs at least one row for the neighbour chain to work.
		return nil, fmt.Errorf("-n %d is smaller than the number of ranks %d", n, world.Size())
	}
	u, err := pcm.NewBlock[float64](p, "u", n, n+2, pcm.Halo(1), pcm.ChangedOnlyByFlip())
	if err != nil {
		return nil, err
	}
	if init != 0 {
		local := u.Local()
		for i := range u.Rows() {
			for j := 1; j <= n; j++ {
				local[i*(n+2)+j] = init
			}
		}
	}
	return &rowBlocks{u: u, n: n}, nil
}

func (d *rowBlocks) setup(world *mpi.Comm) error {
	d.world = world
	d.rank, d.size, d.rows = world.Rank(), world.Size(), d.u.Rows()
	d.up, d.down = d.rank-1, d.rank+1
	if d.rank == 0 {
		d.up = mpi.ProcNull
		// The hot boundary is the upper ghost row of the first block, in both buffers.
		for _, g := range [][]float64{d.u.Padded(), d.u.Scratch()} {
			for j := range d.n + 2 {
				g[j] = topBoundary
			}
		}
	}
	if d.rank == d.size-1 {
		d.down = mpi.ProcNull
	}
	return nil
}

func (d *rowBlocks) shape() (rows, cols int) { return d.rows, d.n }

func (d *rowBlocks) grids() (cur, next []float64) { return d.u.Padded(), d.u.Scratch() }

func (d *rowBlocks) halo(cur []float64) error {
	return exchange(d.world, cur, d.rows, d.n, d.up, d.down)
}

func (d *rowBlocks) flip() { d.u.Flip() }

func (d *rowBlocks) dump(path string) error {
	counts := make([]int, d.size)
	for r, rg := range d.u.Ranges() {
		counts[r] = rg.Len() * d.n
	}
	all, err := gatherInterior(d.world, d.u.Padded(), d.rows, d.n, counts)
	if err != nil || d.rank != 0 {
		return err
	}
	return solverkit.WriteFloats(path, all)
}
