package collcheck

import (
	"fmt"

	"github.com/mpios/mpios/mpi"
)

func init() {
	Misfits = append(Misfits,
		Check{"allreduce-large-length-misfit", AllreduceLargeLengthMisfit},
		Check{"allreduce-large-type-misfit", AllreduceLargeTypeMisfit},
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
