package pcm

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
)

// blockJob runs a job with a block "u" and a replicated counter: fresh, it fills the rows,
// rebalances them by weights (if any) and checkpoints at iteration 5; restarted, it checks
// what Load restored. It returns the process's error.
func blockJob(c *mpi.Comm, opts Options, weights []float64, check func(p *Process, b *Block[float64], iter int) error) error {
	p, err := InitWith(c, opts)
	if err != nil {
		return err
	}
	b, err := NewBlock[float64](p, "u", 29, testRowLen, Halo(1))
	if err != nil {
		return err
	}
	iter, err := loadCounting(p)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(p, b, *iter); err != nil {
			return err
		}
		return p.Close()
	}
	fillRows(b)
	if weights != nil {
		if err := p.Rebalance(weights); err != nil {
			return err
		}
		if b.Range().Len() == 0 {
			return errors.New("empty range after rebalance")
		}
		fillRows(b) // the same values: fillRows writes each row's own
	}
	for *iter = 1; *iter <= 5; *iter++ {
		if _, err := p.Reconfigure(*iter); err != nil {
			return err
		}
	}
	return p.Close()
}

// TestRestartIntoAnotherSize: a checkpoint of 4 ranks, one with an uneven (rebalanced)
// layout, loads into 3, 4 and 6 ranks: every rank gets exactly the rows of its new block
// (the checkpoint's own layout at the same size) and the replicated values.
func TestRestartIntoAnotherSize(t *testing.T) {
	for _, weights := range [][]float64{nil, {1, 3, 1, 2}} {
		dir := t.TempDir()
		mpitest.Run(t, mpitest.InProc, 4, func(c *mpi.Comm) error {
			return blockJob(c, Options{JobID: "first", Dir: dir, Every: 5, SyncCheckpoints: true, Node: "nodeA", Log: io.Discard}, weights, nil)
		})
		for _, n := range []int{3, 4, 6} {
			t.Run(fmt.Sprintf("weights%v/np%d", weights, n), func(t *testing.T) {
				mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
					return blockJob(c, Options{JobID: fmt.Sprint("second", n), Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard}, nil,
						func(p *Process, b *Block[float64], iter int) error {
							if iter != 5 {
								return fmt.Errorf("restored iter %d, want 5", iter)
							}
							want, _ := redist.Blocks(29, nil, n)
							if n == 4 && weights != nil {
								want, _ = redist.Blocks(29, weights, n)
							}
							return checkRows(b, want[c.Rank()])
						})
				})
			})
		}
	}
}

// TestRestartWithoutBlocksAtAnotherSizeIsRefused: a job without distributed data cannot be
// restarted at another size, and says why.
func TestRestartWithoutBlocksAtAnotherSizeIsRefused(t *testing.T) {
	dir := t.TempDir()
	run := func(c *mpi.Comm, opts Options) error {
		p, err := InitWith(c, opts)
		if err != nil {
			return err
		}
		x := []float64{float64(c.Rank())}
		if err := p.Register("x", &x); err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		if _, err := p.Reconfigure(1); err != nil {
			return err
		}
		return p.Close()
	}
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		return run(c, Options{JobID: "first", Dir: dir, Every: 1, SyncCheckpoints: true, Node: "nodeA", Log: io.Discard})
	})
	mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
		err := run(c, Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard})
		var sm *SizeMismatchError
		if !errors.As(err, &sm) || sm.Checkpoint != 2 || sm.World != 3 {
			return fmt.Errorf("got %v, want a *SizeMismatchError 2 vs 3", err)
		}
		return nil
	})
}
