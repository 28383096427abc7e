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

const testRowLen = 3

// cell is the value of element j of global row i: any rank can check any row.
func cell(i, j int) float64 { return float64(i*1000 + j) }

func fillRows(b *Block[float64]) {
	lo := b.Offset()
	for k := range b.Rows() {
		for j := range testRowLen {
			b.Local()[k*testRowLen+j] = cell(lo+k, j)
		}
	}
}

// checkRows verifies that b holds rows want with their values, and zero halo rows.
func checkRows(b *Block[float64], want redist.Range) error {
	if b.Range() != want {
		return fmt.Errorf("block holds rows %v, want %v", b.Range(), want)
	}
	if len(b.Local()) != want.Len()*testRowLen {
		return fmt.Errorf("%d elements for rows %v", len(b.Local()), want)
	}
	for k := range want.Len() {
		for j := range testRowLen {
			if got := b.Local()[k*testRowLen+j]; got != cell(want.Lo+k, j) {
				return fmt.Errorf("row %d element %d is %v, want %v", want.Lo+k, j, got, cell(want.Lo+k, j))
			}
		}
	}
	pad := b.Padded()
	for _, v := range append(pad[:b.halo*testRowLen:b.halo*testRowLen], pad[len(pad)-b.halo*testRowLen:]...) {
		if v != 0 {
			return fmt.Errorf("halo holds %v after the resize", v)
		}
	}
	return nil
}

// oldAndJoining starts the processes of c: the first old ones in a world of their own, the
// others (which join at the first resize) in another, each with a block "u".
func oldAndJoining(c *mpi.Comm, old, rows, rowLen int, opts ...BlockOption) (*Process, *Block[float64], error) {
	color := 0
	if c.Rank() >= old {
		color = 1
	}
	start, err := c.Split(color, c.Rank())
	if err != nil {
		return nil, nil, err
	}
	p, err := InitWith(start, Options{Log: io.Discard})
	if err != nil {
		return nil, nil, err
	}
	b, err := NewBlock[float64](p, "u", rows, rowLen, opts...)
	return p, b, err
}

// TestResizeDataSplitThenMerge follows the thesis's heat experiment: 4 ranks split to 6
// (two processes join with nothing), then merge to 3 (ranks 1, 3 and 5 leave), then
// rebalance by weight. After each step every process holds exactly the rows of its new rank
// with their values, the joiners got the replicated values, and the leavers hold nothing.
func TestResizeDataSplitThenMerge(t *testing.T) {
	const rows = 41
	mpitest.Run(t, mpitest.InProc, 6, func(c *mpi.Comm) error {
		me := c.Rank()
		p, b, err := oldAndJoining(c, 4, rows, testRowLen, Halo(1), DoubleBuffer())
		if err != nil {
			return err
		}
		iter, err := loadCounting(p)
		if err != nil {
			return err
		}
		if me < 4 {
			fillRows(b)
			*iter = 17
		}
		if p.hasDistributed() != true {
			return errors.New("hasDistributed is false")
		}

		// Split: 4 -> 6.
		if err := resize(p, c, 4, []int{0, 1, 2, 3, 4, 5}, 6, nil); err != nil {
			return fmt.Errorf("split: %w", err)
		}
		six, _ := redist.Blocks(rows, nil, 6)
		if err := checkRows(b, six[me]); err != nil {
			return fmt.Errorf("after the split: %w", err)
		}
		if *iter != 17 {
			return fmt.Errorf("after the split iter is %d, want 17", *iter)
		}
		if len(b.Scratch()) != len(b.Padded()) {
			return fmt.Errorf("scratch of %d elements, padded %d", len(b.Scratch()), len(b.Padded()))
		}
		p.world = c

		// Merge: 6 -> 3, the odd ranks leave.
		newRank := []int{0, -1, 1, -1, 2, -1}
		if err := resize(p, c, 6, newRank, 3, nil); err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		three, _ := redist.Blocks(rows, nil, 3)
		color := 0
		if newRank[me] < 0 {
			color = mpi.Undefined
		}
		merged, err := c.Split(color, me)
		if err != nil {
			return err
		}
		if newRank[me] < 0 {
			if b.Local() != nil || b.Rows() != 0 {
				return fmt.Errorf("a leaver holds rows %v", b.Range())
			}
			return nil
		}
		if err := checkRows(b, three[newRank[me]]); err != nil {
			return fmt.Errorf("after the merge: %w", err)
		}
		p.world = merged

		// Rebalance: 1:2:5.
		weights := []float64{1, 2, 5}
		if err := p.Rebalance(weights); err != nil {
			return fmt.Errorf("rebalance: %w", err)
		}
		want, _ := redist.Blocks(rows, weights, 3)
		if err := checkRows(b, want[merged.Rank()]); err != nil {
			return fmt.Errorf("after the rebalance: %w", err)
		}
		return nil
	},
	)
}

// TestResizeDataRefusesBadRequests: bad new ranks and weights are refused on every process
// before anything moves.
func TestResizeDataRefusesBadRequests(t *testing.T) {
	for _, c := range []struct {
		old     int
		newRank []int
		size    int
		weights []float64
	}{
		{2, []int{0, 0}, 2, nil},          // two processes take rank 0
		{2, []int{0, -1}, 2, nil},         // nobody takes rank 1
		{2, []int{0, 1}, 2, []float64{1}}, // weights of the wrong length
		{0, []int{0, 1}, 2, nil},          // no old rank
		{2, []int{0, 2}, 2, nil},          // rank out of range
	} {
		if err := checkResize(2, c.old, c.newRank, c.size, c.weights); !errors.Is(err, ErrConfig) {
			t.Errorf("checkResize(%d, %v, %d, %v) = %v, want ErrConfig", c.old, c.newRank, c.size, c.weights, err)
		}
	}
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		p, err := InitWith(c, Options{Log: io.Discard})
		if err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		if err := p.Rebalance(nil); !errors.Is(err, ErrCallOrder) {
			return fmt.Errorf("Rebalance without blocks: %v, want ErrCallOrder", err)
		}
		return nil
	})
}

// TestResizeDataAbortsWhenAPeerDies: a process that dies before it hands its rows over makes
// the redistribution fail on the others within bounded time, and they keep the rows they had
// (the job can go on at its old size or restart from a checkpoint).
func TestResizeDataAbortsWhenAPeerDies(t *testing.T) {
	const rows = 3000
	eps := mpitest.Endpoints(t, mpitest.TCP, 3)
	errs := make(chan error, 3)
	for r := range eps {
		go func() {
			errs <- func() error {
				c, err := mpi.Attach(eps[r])
				if err != nil {
					return err
				}
				p, err := InitWith(c, Options{Log: io.Discard})
				if err != nil {
					return err
				}
				b, err := NewBlock[float64](p, "u", rows, testRowLen)
				if err != nil {
					return err
				}
				if err := p.Load(); err != nil {
					return err
				}
				fillRows(b)
				before := b.Range()
				if err := c.Barrier(); err != nil {
					return err
				}
				if r == 2 {
					return eps[r].Close() // dies instead of taking part
				}
				err = p.Rebalance([]float64{1, 1, 6})
				if err == nil {
					return fmt.Errorf("rank %d: Rebalance succeeded without rank 2", r)
				}
				if cerr := checkRows(b, before); cerr != nil {
					return fmt.Errorf("rank %d after the failed rebalance (%v): %w", r, err, cerr)
				}
				eps[r].Close()
				return nil
			}()
		}()
	}
	for range eps {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// resize is resizeData committed at once on each process (the tests' processes do not need
// to agree on the outcome first).
func resize(p *Process, c *mpi.Comm, oldSize int, newRank []int, newSize int, weights []float64) error {
	_, err := p.resizeData(c, oldSize, newRank, newSize, weights)
	p.resizeDone(err == nil)
	return err
}

// TestResizeDoneAbortKeepsTheOldRows: after a resize whose outcome is abort, every process
// holds the rows it had.
func TestResizeDoneAbortKeepsTheOldRows(t *testing.T) {
	mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
		p, b, err := oldAndJoining(c, 3, 20, testRowLen, DoubleBuffer())
		if err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		fillRows(b)
		before := b.Range()
		if _, err := p.resizeData(c, 3, []int{0, -1, 1}, 2, nil); err != nil {
			return err
		}
		p.resizeDone(false)
		return checkRows(b, before)
	})
}
