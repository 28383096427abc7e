package collcheck

import (
	"fmt"

	"github.com/mpios/mpios/mpi"
)

func init() {
	Misfits = append(Misfits,
		Check{"allreduce-large-length-misfit", AllreduceLargeLengthMisfit},
		Check{"allreduce-large-type-misfit", AllreduceLargeTypeMisfit},
		Check{"iallreduce-misfit", IallreduceMisfit},
		Check{"allgather-misfit", AllgatherMisfit},
		Check{"alltoall-misfit", AlltoallMisfit},
		Check{"scan-misfit", ScanMisfit},
		Check{"exscan-misfit", ExscanMisfit},
		Check{"ibcast-misfit", IbcastMisfit},
	)
}

// wantCountEverywhere fails unless err matches ErrCount (on one rank, where nothing can
// disagree, unless it is nil), then checks that c still carries collectives.
func wantCountEverywhere(c *mpi.Comm, what string, err error) error {
	if c.Size() == 1 {
		if err != nil {
			return fmt.Errorf("%s on one rank: %v", what, err)
		}
	} else if err := wantCount(fmt.Sprintf("%s on rank %d", what, c.Rank()), err); err != nil {
		return err
	}
	return stillUsable(c)
}

// AllreduceLargeLengthMisfit: the last rank's vector differs in length from the others', with
// vectors around the ring's threshold (64 KiB): one side takes recursive doubling and the
// other the ring, or both take the ring and cut the vector into different blocks. Every rank
// returns ErrCount (the ranks agree on the length before the ring starts) and none blocks.
func AllreduceLargeLengthMisfit(c *mpi.Comm) error {
	last := c.Rank() == c.Size()-1
	for _, lens := range [][2]int{
		{8000, 9000},   // 62.5 KiB by recursive doubling, 70 KiB by the ring
		{9000, 8000},   // the other way round
		{20000, 20001}, // both by the ring
		{40000, 3},
	} {
		n := lens[0]
		if last {
			n = lens[1]
		}
		send := make([]float64, n)
		err := mpi.Allreduce(c, send, make([]float64, n), mpi.Sum)
		if err := wantCountEverywhere(c, fmt.Sprintf("Allreduce of %d elements here, %d on the others", n, lens[0]), err); err != nil {
			return err
		}
	}
	return nil
}

// AllreduceLargeTypeMisfit: the last rank reduces int64 where the others reduce float64, of
// the same length and size (by the ring). Every rank returns ErrCount; none blocks.
func AllreduceLargeTypeMisfit(c *mpi.Comm) error {
	const n = 20000
	var err error
	if c.Rank() == c.Size()-1 {
		err = mpi.Allreduce(c, make([]int64, n), make([]int64, n), mpi.Sum)
	} else {
		err = mpi.Allreduce(c, make([]float64, n), make([]float64, n), mpi.Sum)
	}
	return wantCountEverywhere(c, "Allreduce of int64 on the last rank, float64 on the others", err)
}

// sizes are the vector lengths of the misfit checks: one eager message, and one of 160 KB
// (float64) that travels by rendezvous and, in Allreduce, by the ring.
var sizes = []int{3, 20000}

// IallreduceMisfit: Iallreduce with the last rank's vector one element longer, small and large
// (and around the ring's threshold); then with rank 0's recv too short. In the first case every
// rank's Wait returns ErrCount; in the second rank 0's does and the others get the sum.
func IallreduceMisfit(c *mpi.Comm) error {
	p, last := c.Size(), c.Rank() == c.Size()-1
	for _, n := range append(sizes, 8000) {
		m := n
		if last {
			m = n + 1000
		}
		req, err := mpi.Iallreduce(c, make([]float64, m), make([]float64, m), mpi.Sum)
		if err == nil {
			_, err = req.Wait()
		}
		if err := wantCountEverywhere(c, fmt.Sprintf("Iallreduce of %d elements here, %d on the others", m, n), err); err != nil {
			return err
		}
	}
	for _, n := range sizes {
		send := make([]int32, n)
		for i := range send {
			send[i] = int32(c.Rank())
		}
		recv := make([]int32, n)
		if c.Rank() == 0 {
			recv = recv[:n-1]
		}
		req, err := mpi.Iallreduce(c, send, recv, mpi.Sum)
		if err == nil {
			_, err = req.Wait()
		}
		if c.Rank() == 0 {
			if err := wantCount("Iallreduce with a short recv on rank 0", err); err != nil {
				return err
			}
		} else if err != nil || recv[n-1] != int32(p*(p-1)/2) {
			return fmt.Errorf("Iallreduce n %d beside rank 0's short recv: %v, %v", n, recv[n-1], err)
		}
		if err := stillUsable(c); err != nil {
			return err
		}
	}
	return nil
}

// AllgatherMisfit: the last rank contributes one element more than the others, small and
// large. Rank 0, which receives the last rank's block first in the ring, returns ErrCount; the
// others nil or ErrCount; none blocks. Then rank 0's recv is one element short: it returns
// ErrCount, the others nil or ErrCount.
func AllgatherMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, n := range sizes {
		m := n
		if r == p-1 && p > 1 {
			m = n + 1
		}
		if err := judge(c, fmt.Sprintf("Allgather of %d here, %d on the others", m, n), 0,
			mpi.Allgather(c, make([]int64, m), make([]int64, p*m))); err != nil {
			return err
		}
		recv := make([]int64, p*n)
		if r == 0 {
			recv = recv[:p*n-1]
		}
		// Rank 0 abandons the ring (its part of recv is missing), so the others may get
		// word of it instead of every block.
		if err := judge(c, "Allgather with a short recv on rank 0", 0, mpi.Allgather(c, make([]int64, n), recv)); err != nil {
			return err
		}
	}
	return nil
}

// AlltoallMisfit: the last rank sends blocks one element longer than the others expect, small
// and large. Rank 0 (which receives one of them) returns ErrCount, the others nil or ErrCount,
// and none blocks. Then a send length that is no multiple of the size: ErrCount there.
func AlltoallMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, n := range sizes {
		m := n
		if r == p-1 && p > 1 {
			m = n + 1
		}
		if err := judge(c, fmt.Sprintf("Alltoall of blocks of %d here, %d on the others", m, n), 0,
			mpi.Alltoall(c, make([]float32, p*m), make([]float32, p*m))); err != nil {
			return err
		}
	}
	send, recv := make([]float32, 2*p), make([]float32, 2*p)
	if r == 1 && p > 1 {
		send, recv = send[:2*p-1], recv[:2*p-1]
	}
	return judge(c, "Alltoall with a length no multiple of the size on rank 1", 1%p, mpi.Alltoall(c, send, recv))
}

// ScanMisfit: the last rank's vector is one element longer, small and large. It returns
// ErrCount (its partners' vectors do not fit), the others nil or ErrCount; none blocks.
func ScanMisfit(c *mpi.Comm) error { return scanMisfit(c, "Scan", mpi.Scan[float64]) }

// ExscanMisfit is ScanMisfit for Exscan.
func ExscanMisfit(c *mpi.Comm) error { return scanMisfit(c, "Exscan", mpi.Exscan[float64]) }

func scanMisfit(c *mpi.Comm, name string, scan func(*mpi.Comm, []float64, []float64, mpi.Op) error) error {
	p, r := c.Size(), c.Rank()
	for _, n := range sizes {
		m := n
		if r == p-1 && p > 1 {
			m = n + 1
		}
		if err := judge(c, fmt.Sprintf("%s of %d here, %d on the others", name, m, n), p-1,
			scan(c, make([]float64, m), make([]float64, m), mpi.Sum)); err != nil {
			return err
		}
		// A recv of the wrong length on rank 0: it returns ErrCount and still takes part.
		recv := make([]float64, n)
		if r == 0 {
			recv = recv[:n-1]
		}
		if err := judge(c, fmt.Sprintf("%s with a short recv on rank 0", name), 0,
			scan(c, make([]float64, n), recv, mpi.Sum)); err != nil {
			return err
		}
	}
	return nil
}

// IbcastMisfit: Ibcast with the root's buffer longer, then shorter, than the others', small
// and large, from every root. Every other rank's Wait returns ErrCount, the root's nil.
func IbcastMisfit(c *mpi.Comm) error {
	for _, n := range sizes {
		for _, rootLonger := range []bool{true, false} {
			for root := 0; root < c.Size(); root++ {
				m := n
				if (c.Rank() == root) == rootLonger {
					m = n + 1
				}
				req, err := mpi.Ibcast(c, make([]uint16, m), root)
				if err == nil {
					_, err = req.Wait()
				}
				what := fmt.Sprintf("Ibcast from root %d with %d elements here (root longer: %v)", root, m, rootLonger)
				if c.Rank() == root {
					if err != nil {
						return fmt.Errorf("%s: root: %v", what, err)
					}
				} else if err := wantCount(what, err); err != nil {
					return err
				}
				if err := stillUsable(c); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
			}
		}
	}
	return nil
}
