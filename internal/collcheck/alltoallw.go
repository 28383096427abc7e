package collcheck

import (
	"fmt"

	"github.com/mpios/mpios/mpi"
)

func init() {
	Semantics = append(Semantics, Check{"alltoallw", AlltoallwTypes})
	Misfits = append(Misfits, Check{"alltoallw-misfit", AlltoallwMisfit})
}

// wBlock is the block rank from sends rank to in AlltoallwTypes: scale*(to+1) elements of a
// type chosen by to (int32, float64, uint16), valued from*1000+k; nothing when to is from's
// right neighbour (an empty block of a type of its own, which the receiver declares as the
// zero Block).
func wBlock(from, to, p, scale int) (mpi.Block, func(mpi.Block) error) {
	n := scale * (to + 1)
	if p > 1 && to == (from+1)%p {
		return mpi.BlockOf([]float32{}), nil
	}
	switch to % 3 {
	case 0:
		s := make([]int32, n)
		for k := range s {
			s[k] = int32(from*1000 + k)
		}
		return mpi.BlockOf(s), nil
	case 1:
		s := make([]float64, n)
		for k := range s {
			s[k] = float64(from*1000+k) + 0.5
		}
		return mpi.BlockOf(s), nil
	}
	s := make([]uint16, n)
	for k := range s {
		s[k] = uint16(from*1000 + k)
	}
	return mpi.BlockOf(s), nil
}

// AlltoallwTypes (MPICH alltoallw1, alltoallw2, alltoallw_zeros): rank i sends rank j a block
// of its own element type and length (int32, float64 or uint16 by j, (j+1)*scale elements),
// nothing to its right neighbour, small and large (scale 1 and 5000: rendezvous blocks); every
// rank gets each sender's block, typed, and the zero blocks match empty ones of other types.
func AlltoallwTypes(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, scale := range []int{1, 5000} {
		send := make([]mpi.Block, p)
		for j := range send {
			send[j], _ = wBlock(r, j, p, scale)
		}
		recv := make([]mpi.Block, p)
		i32 := make([][]int32, p)
		f64 := make([][]float64, p)
		u16 := make([][]uint16, p)
		n := scale * (r + 1)
		for i := range recv {
			switch {
			case p > 1 && r == (i+1)%p:
				// The zero Block: nothing comes from the left neighbour.
			case r%3 == 0:
				i32[i] = make([]int32, n)
				recv[i] = mpi.BlockOf(i32[i])
			case r%3 == 1:
				f64[i] = make([]float64, n)
				recv[i] = mpi.BlockOf(f64[i])
			default:
				u16[i] = make([]uint16, n)
				recv[i] = mpi.BlockOf(u16[i])
			}
		}
		if err := mpi.Alltoallw(c, send, recv); err != nil {
			return fmt.Errorf("Alltoallw scale %d: %w", scale, err)
		}
		for i := range recv {
			if p > 1 && r == (i+1)%p {
				continue
			}
			for k := range n {
				var got, want float64 = 0, float64(i*1000 + k)
				switch r % 3 {
				case 0:
					got = float64(i32[i][k])
				case 1:
					got, want = f64[i][k], want+0.5
				default:
					got, want = float64(u16[i][k]), float64(uint16(i*1000+k))
				}
				if got != want {
					return fmt.Errorf("Alltoallw scale %d: element %d from rank %d is %v, want %v", scale, k, i, got, want)
				}
			}
		}
	}
	return nil
}

// AlltoallwMisfit: rank 0 sends rank 1 one element more than rank 1 expects, small and large;
// then a block of the right length but another element type. Rank 1 returns ErrCount, the
// others nil or ErrCount, and none blocks.
func AlltoallwMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, tc := range []struct {
		n        int
		longer   bool
		wrongTyp bool
	}{{3, true, false}, {20000, true, false}, {20000, false, true}} {
		send, recv := make([]mpi.Block, p), make([]mpi.Block, p)
		for j := range send {
			m := tc.n
			if r == 0 && j == 1 && tc.longer {
				m++
			}
			if r == 0 && j == 1 && tc.wrongTyp {
				send[j] = mpi.BlockOf(make([]int64, m))
			} else {
				send[j] = mpi.BlockOf(make([]float64, m))
			}
			recv[j] = mpi.BlockOf(make([]float64, tc.n))
		}
		what := fmt.Sprintf("Alltoallw with rank 0's block to rank 1 misfit (%d elements, longer %v, another type %v)", tc.n, tc.longer, tc.wrongTyp)
		if err := judge(c, what, 1%p, mpi.Alltoallw(c, send, recv)); err != nil {
			return err
		}
	}
	// One block too few.
	return judge(c, "Alltoallw with a block too few on rank 0", 0, mpi.Alltoallw(c, make([]mpi.Block, p-1), make([]mpi.Block, p)))
}
