// Package collcheck holds the semantics of mpi's collectives as checks that every rank of a
// job runs: the statements of MPICH's test/mpi/coll programs (bcasttest, reduce, redscat,
// alltoallv, exscan, opmaxloc, opland, opbor, uoplong, the nonblocking tests, ...), written
// anew for the mpios API, and the behaviour of collectives whose buffers do not fit. A check
// returns an error on the rank that sees a violation.
//
// mpi's tests run them on goroutine ranks (internal/mpitest); internal/e2e runs them as real
// processes through mpirun (testdata/collcheck).
package collcheck

import (
	"errors"
	"fmt"

	"github.com/mpios/mpios/mpi"
)

// Check is one named check.
type Check struct {
	Name string
	Run  func(c *mpi.Comm) error
}

// Semantics are the checks of what the collectives compute.
var Semantics = []Check{}

// Misfits are the checks of collectives whose buffers do not fit on some rank: the ranks that
// can see it return ErrCount, none blocks, and the communicator stays usable.
var Misfits = []Check{
	{"bcast-root-longer", BcastRootLonger},
	{"bcast-root-shorter", BcastRootShorter},
	{"reduce-misfit", ReduceMisfit},
	{"gather-misfit", GatherMisfit},
	{"scatter-misfit", ScatterMisfit},
	{"gatherv-misfit", GathervMisfit},
	{"scatterv-misfit", ScattervMisfit},
	{"allgatherv-misfit", AllgathervMisfit},
	{"alltoallv-misfit", AlltoallvMisfit},
	{"reducescatter-misfit", ReduceScatterMisfit},
	{"allreduce-recv-misfit", AllreduceRecvMisfit},
	{"allreduce-length-misfit", AllreduceLengthMisfit},
}

// Find returns the check called name.
func Find(name string) (Check, bool) {
	for _, list := range [][]Check{Semantics, Misfits} {
		for _, ch := range list {
			if ch.Name == name {
				return ch, true
			}
		}
	}
	return Check{}, false
}

// wantCount fails unless err matches mpi.ErrCount.
func wantCount(what string, err error) error {
	if !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("%s: want an error matching ErrCount, got %v", what, err)
	}
	return nil
}

// wantCountOrNil fails on any error other than one matching mpi.ErrCount (a rank that cannot
// see the misfit may succeed).
func wantCountOrNil(what string, err error) error {
	if err != nil && !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("%s: want nil or ErrCount, got %v", what, err)
	}
	return nil
}

// stillUsable checks that a communicator on which a collective failed for a misfit carries
// the next collectives correctly: no message of the failed one is left over to match them.
func stillUsable(c *mpi.Comm) error {
	for _, n := range []int{1, 20000} {
		in := make([]float64, n)
		for i := range in {
			in[i] = float64(c.Rank() + i)
		}
		out := make([]float64, n)
		if err := mpi.Allreduce(c, in, out, mpi.Sum); err != nil {
			return fmt.Errorf("Allreduce after the misfit: %w", err)
		}
		p := c.Size()
		if want := float64(p*(p-1)/2 + (n-1)*p); out[n-1] != want {
			return fmt.Errorf("Allreduce after the misfit: %v, want %v", out[n-1], want)
		}
	}
	buf := []int32{0}
	if c.Rank() == 0 {
		buf[0] = 42
	}
	if err := mpi.Bcast(c, buf, 0); err != nil || buf[0] != 42 {
		return fmt.Errorf("Bcast after the misfit: %v %v", buf, err)
	}
	return nil
}

// judge checks the outcome of a collective with a misfit: ErrCount on rank seer, which must
// see it (when there is more than one rank), nil or ErrCount on the others; then that the
// communicator still carries collectives.
func judge(c *mpi.Comm, what string, seer int, err error) error {
	if c.Rank() == seer && c.Size() > 1 {
		if err := wantCount(what+" on rank "+fmt.Sprint(seer), err); err != nil {
			return err
		}
	} else if err := wantCountOrNil(what, err); err != nil {
		return err
	}
	return stillUsable(c)
}

// BcastRootLonger: the root broadcasts 10 elements (and, second, 20000: a rendezvous message)
// into buffers of 1 on the other ranks. Every other rank gets ErrCount; the root succeeds.
func BcastRootLonger(c *mpi.Comm) error {
	return bcastMisfit(c, func(root bool, big int) int {
		if root {
			return big
		}
		return 1
	})
}

// BcastRootShorter: the root's buffer is shorter than the others'. The others get ErrCount
// instead of a stale tail; none forwards old data.
func BcastRootShorter(c *mpi.Comm) error {
	return bcastMisfit(c, func(root bool, big int) int {
		if root {
			return 1
		}
		return big
	})
}

func bcastMisfit(c *mpi.Comm, length func(root bool, big int) int) error {
	for _, big := range []int{10, 20000} {
		for root := 0; root < c.Size(); root++ {
			buf := make([]int32, length(c.Rank() == root, big))
			if c.Rank() == root {
				for i := range buf {
					buf[i] = int32(i + 1)
				}
			}
			err := mpi.Bcast(c, buf, root)
			what := fmt.Sprintf("Bcast root %d, %d elements at the root, %d here", root, length(true, big), len(buf))
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
	return nil
}

// ReduceMisfit: the last rank contributes one element more than the others. The root must see
// ErrCount (the news travels up the tree); no rank blocks.
func ReduceMisfit(c *mpi.Comm) error {
	p := c.Size()
	for _, n := range []int{3, 20000} {
		send := make([]int64, n)
		if c.Rank() == p-1 {
			send = make([]int64, n+1)
		}
		recv := make([]int64, len(send))
		if err := judge(c, fmt.Sprintf("Reduce n %d", n), 0, mpi.Reduce(c, send, recv, mpi.Sum, 0)); err != nil {
			return err
		}
	}
	return nil
}

// GatherMisfit: the root's receive buffer is one element short. The root reports ErrCount
// after taking every rank's message; the others succeed.
func GatherMisfit(c *mpi.Comm) error {
	p, n := c.Size(), 20000
	root := p - 1
	send := make([]float32, n)
	var recv []float32
	if c.Rank() == root {
		recv = make([]float32, p*n-1)
	}
	err := mpi.Gather(c, send, recv, root)
	if c.Rank() == root {
		if err := wantCount("Gather root", err); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("Gather non-root: %v", err)
	}
	return stillUsable(c)
}

// ScatterMisfit: the root's send buffer is one element short; every rank gets ErrCount.
func ScatterMisfit(c *mpi.Comm) error {
	p, n := c.Size(), 20000
	var send []float64
	if c.Rank() == 0 {
		send = make([]float64, p*n-1)
	}
	recv := make([]float64, n)
	if err := wantCount("Scatter", mpi.Scatter(c, send, recv, 0)); err != nil {
		return err
	}
	return stillUsable(c)
}

// GathervMisfit: rank 1 sends 40000 elements where the root's counts say 10. The root gets
// ErrCount; the sender is not left blocked in its rendezvous.
func GathervMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = 10
	}
	n := 10
	if r == 1 {
		n = 40000 // 80 KB: a rendezvous message
	}
	var recv []int16
	if r == 0 {
		recv = make([]int16, 10*p)
	}
	err := mpi.Gatherv(c, make([]int16, n), recv, counts, 0)
	switch {
	case r == 0 && p > 1:
		if err := wantCount("Gatherv root", err); err != nil {
			return err
		}
	case r == 1:
		// The sender cannot see the misfit.
	default:
		if err != nil {
			return fmt.Errorf("Gatherv: %v", err)
		}
	}
	return stillUsable(c)
}

// ScattervMisfit: the root's counts do not sum to its buffer's length; every rank gets
// ErrCount.
func ScattervMisfit(c *mpi.Comm) error {
	p := c.Size()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = 5
	}
	var send []uint32
	if c.Rank() == 0 {
		send = make([]uint32, 5*p+1)
	}
	if err := wantCount("Scatterv", mpi.Scatterv(c, send, make([]uint32, 5), counts, 0)); err != nil {
		return err
	}
	return stillUsable(c)
}

// AllgathervMisfit: rank 0 believes rank 1 contributes 20000 elements, the others (and rank 1)
// 3. Rank 0 sees ErrCount; nobody blocks.
func AllgathervMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = 3
	}
	if r == 0 && p > 1 {
		counts[1] = 20000
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	return judge(c, "Allgatherv", 0, mpi.Allgatherv(c, make([]int32, 3), make([]int32, total), counts))
}

// AlltoallvMisfit: rank 0 sends rank 1 20000 elements where rank 1 expects 2. Rank 1 sees
// ErrCount; nobody blocks.
func AlltoallvMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	sc, rc := make([]int, p), make([]int, p)
	for i := range sc {
		sc[i], rc[i] = 2, 2
	}
	if r == 0 && p > 1 {
		sc[1] = 20000
	}
	return judge(c, "Alltoallv", 1, mpi.Alltoallv(c, make([]float64, sum(sc)), sc, make([]float64, sum(rc)), rc))
}

// ReduceScatterMisfit: the last rank's counts give it one element more than the others
// believe. Every rank returns, the last one with ErrCount.
func ReduceScatterMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = 4
	}
	if r == p-1 && p > 1 {
		counts[p-1] = 5
	}
	return judge(c, "ReduceScatter", p-1, mpi.ReduceScatter(c, make([]int64, sum(counts)), make([]int64, counts[r]), counts, mpi.Sum))
}

// AllreduceRecvMisfit: rank 0's receive buffer is too short. Rank 0 gets ErrCount; the others
// get the right sum (rank 0 took part all the same), small and large.
func AllreduceRecvMisfit(c *mpi.Comm) error {
	p := c.Size()
	for _, n := range []int{2, 20000} {
		send := make([]int64, n)
		for i := range send {
			send[i] = int64(c.Rank())
		}
		recv := make([]int64, n)
		if c.Rank() == 0 {
			recv = recv[:1]
		}
		err := mpi.Allreduce(c, send, recv, mpi.Sum)
		if c.Rank() == 0 {
			if err := wantCount("Allreduce rank 0", err); err != nil {
				return err
			}
		} else if err != nil || recv[n-1] != int64(p*(p-1)/2) {
			return fmt.Errorf("Allreduce n %d: %v %v", n, recv[n-1], err)
		}
	}
	return stillUsable(c)
}

// AllreduceLengthMisfit: the last rank reduces one element more than the others (vectors
// below the ring's threshold). The last rank gets ErrCount, the others nil or ErrCount, and no
// rank blocks.
func AllreduceLengthMisfit(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	n := 3
	if r == p-1 {
		n = 4
	}
	return judge(c, "Allreduce", p-1, mpi.Allreduce(c, make([]float64, n), make([]float64, n), mpi.Sum))
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func isCount(err error) bool { return errors.Is(err, mpi.ErrCount) }

func isOp(err error) bool { return errors.Is(err, mpi.ErrOp) }
