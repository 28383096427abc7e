package pcm

// TEMPORARY (branch mall-b): a stand-in for the data half of issue 15 (branch mall-a:
// pcm.NewBlock, the redistribution planner), so that the process half can be tested before
// the merge. The lead deletes this file when merging mall-a, whose pcm/resize_data.go
// provides resizeData, hasDistributed and resizeDone.

import (
	"fmt"

	"github.com/mpios/mpios/mpi"
)

// TmpBlock is a row-block-distributed array of float64 (rows of RowLen values), split evenly
// over the world; a resize moves its rows to their new owners.
type TmpBlock struct {
	rows, rowLen int
	local        []float64
	prev         []float64 // the part held before a resize, until it commits
	prevOff      int
	off          int // first global row held
}

// NewTmpBlock registers a distributed block of globalRows rows of rowLen values.
func NewTmpBlock(p *Process, globalRows, rowLen int) *TmpBlock {
	b := &TmpBlock{rows: globalRows, rowLen: rowLen}
	lo, hi := evenRows(globalRows, p.world.Rank(), p.world.Size())
	b.off, b.local = lo, make([]float64, (hi-lo)*rowLen)
	p.tmpBlocks = append(p.tmpBlocks, b)
	return b
}

// Local is this rank's rows, row-major.
func (b *TmpBlock) Local() []float64 { return b.local }

// Offset is the global index of this rank's first row.
func (b *TmpBlock) Offset() int { return b.off }

// evenRows is the range of rows rank r of n holds.
func evenRows(rows, r, n int) (int, int) { return r * rows / n, (r + 1) * rows / n }

func (p *Process) hasDistributed() bool { return len(p.tmpBlocks) > 0 }

// resizeData moves every block over c (see the contract in the task of issue 15).
func (p *Process) resizeData(c *mpi.Comm, oldSize int, newRank []int, newSize int, weights []float64) (int64, error) {
	if weights != nil {
		return 0, fmt.Errorf("pcm: resize: weights are not supported by the temporary block")
	}
	me := c.Rank()
	procOf := make([]int, newSize) // new rank -> process in c
	for r, nr := range newRank {
		if nr >= 0 {
			procOf[nr] = r
		}
	}
	var sent int64
	for bi, b := range p.tmpBlocks {
		var oldLo, oldHi int
		if me < oldSize {
			oldLo, oldHi = evenRows(b.rows, me, oldSize)
		}
		var next []float64
		newLo, newHi := 0, 0
		if newRank[me] >= 0 {
			newLo, newHi = evenRows(b.rows, newRank[me], newSize)
			next = make([]float64, (newHi-newLo)*b.rowLen)
		}
		var reqs []*mpi.Request
		if me < oldSize {
			for nr := range newSize {
				lo, hi := evenRows(b.rows, nr, newSize)
				lo, hi = max(lo, oldLo), min(hi, oldHi)
				if lo >= hi {
					continue
				}
				part := b.local[(lo-oldLo)*b.rowLen : (hi-oldLo)*b.rowLen]
				if procOf[nr] == me {
					copy(next[(lo-newLo)*b.rowLen:], part)
					continue
				}
				req, err := mpi.Isend(c, part, procOf[nr], bi)
				if err != nil {
					return sent, err
				}
				sent += int64(len(part) * 8)
				reqs = append(reqs, req)
			}
		}
		if newRank[me] >= 0 {
			for or := range oldSize {
				lo, hi := evenRows(b.rows, or, oldSize)
				lo, hi = max(lo, newLo), min(hi, newHi)
				if lo >= hi || or == me {
					continue
				}
				if _, err := mpi.Recv(c, next[(lo-newLo)*b.rowLen:(hi-newLo)*b.rowLen], or, bi); err != nil {
					return sent, err
				}
			}
		}
		if err := mpi.WaitAll(reqs...); err != nil {
			return sent, err
		}
		b.prev, b.prevOff = b.local, b.off
		b.local, b.off = next, newLo
	}
	return sent, nil
}

// resizeDone keeps the new parts (commit) or puts the old ones back (abort).
func (p *Process) resizeDone(commit bool) {
	for _, b := range p.tmpBlocks {
		if !commit && b.prev != nil {
			b.local, b.off = b.prev, b.prevOff
		}
		b.prev = nil
	}
}
