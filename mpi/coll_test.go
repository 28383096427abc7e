package mpi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// sizes covers 1, powers of two and the awkward sizes in between.
var sizes = []int{1, 2, 3, 4, 5, 7, 8}

func forSizes(t *testing.T, fn func(c *mpi.Comm) error) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) { mpitest.Run(t, mpitest.InProc, n, fn) })
	}
	t.Run("tcp-np5", func(t *testing.T) { mpitest.Run(t, mpitest.TCP, 5, fn) })
}

func TestBarrierOrdersPhases(t *testing.T) {
	// After a barrier every rank's pre-barrier message has been sent; receiving it with Iprobe
	// after a second barrier must succeed on every rank.
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		if err := mpi.Send(c, []int{r}, (r+1)%p, 0); err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if err := c.Barrier(); err != nil {
				return err
			}
		}
		if _, ok, err := c.Iprobe((r-1+p)%p, 0); !ok || err != nil {
			return fmt.Errorf("message from left neighbour not there after barrier: %v", err)
		}
		_, err := mpi.Recv(c, []int{0}, (r-1+p)%p, 0)
		return err
	})
}

func TestBcastEveryRoot(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		for root := 0; root < c.Size(); root++ {
			for _, n := range []int{1, 1000, 70000} {
				buf := make([]float64, n)
				if c.Rank() == root {
					copy(buf, seq(n, float64(root)))
				}
				if err := mpi.Bcast(c, buf, root); err != nil {
					return err
				}
				if err := equal(buf, seq(n, float64(root))); err != nil {
					return fmt.Errorf("root %d n %d: %v", root, n, err)
				}
			}
		}
		return nil
	})
}

// expected computes the reduction of rank contributions v(r) sequentially.
func expected(p, n int, op mpi.Op, v func(r, i int) int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		acc := v(0, i)
		for r := 1; r < p; r++ {
			x := v(r, i)
			switch op {
			case mpi.Sum:
				acc += x
			case mpi.Prod:
				acc *= x
			case mpi.Max:
				acc = max(acc, x)
			case mpi.Min:
				acc = min(acc, x)
			}
		}
		out[i] = acc
	}
	return out
}

func contribution(r, i int) int64 { return int64((r+1)*(i%5+1)) - int64(3*r) }

func TestReduceAndAllreduceAllOps(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		for _, op := range []mpi.Op{mpi.Sum, mpi.Prod, mpi.Max, mpi.Min} {
			for _, n := range []int{1, 3, 5000} { // 5000 int64 = 40 KB: the ring algorithm
				send := make([]int64, n)
				for i := range send {
					send[i] = contribution(r, i)
				}
				want := expected(p, n, op, contribution)
				got := make([]int64, n)
				if err := mpi.Allreduce(c, send, got, op); err != nil {
					return err
				}
				if err := equal(got, want); err != nil {
					return fmt.Errorf("Allreduce %v n %d: %v", op, n, err)
				}
				root := (n + 1) % p
				got = make([]int64, n)
				if err := mpi.Reduce(c, send, got, op, root); err != nil {
					return err
				}
				if r == root {
					if err := equal(got, want); err != nil {
						return fmt.Errorf("Reduce %v n %d root %d: %v", op, n, root, err)
					}
				}
			}
		}
		return nil
	})
}

func TestAllreduceFloatIsBitwiseIdenticalOnAllRanks(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		for _, n := range []int{7, 9000} {
			send := make([]float64, n)
			for i := range send {
				send[i] = 1.0 / float64(3+c.Rank()*7+i)
			}
			got := make([]float64, n)
			if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
				return err
			}
			all := make([]float64, n*c.Size())
			if err := mpi.Allgather(c, got, all); err != nil {
				return err
			}
			for r := 1; r < c.Size(); r++ {
				if err := equal(all[r*n:(r+1)*n], all[:n]); err != nil {
					return fmt.Errorf("n %d: rank %d differs from rank 0: %v", n, r, err)
				}
			}
		}
		return nil
	})
}

func TestGatherScatterEveryRoot(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		for root := 0; root < p; root++ {
			n := 3 + root
			send := seq(n, float64(100*r))
			var all []float64
			if r == root {
				all = make([]float64, p*n)
			}
			if err := mpi.Gather(c, send, all, root); err != nil {
				return err
			}
			if r == root {
				for k := 0; k < p; k++ {
					if err := equal(all[k*n:(k+1)*n], seq(n, float64(100*k))); err != nil {
						return fmt.Errorf("Gather root %d block %d: %v", root, k, err)
					}
				}
			}
			back := make([]float64, n)
			if err := mpi.Scatter(c, all, back, root); err != nil {
				return err
			}
			if err := equal(back, send); err != nil {
				return fmt.Errorf("Scatter root %d: %v", root, err)
			}
		}
		return nil
	})
}

func TestAllgatherAndAllgatherv(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		all := make([]int32, 2*p)
		if err := mpi.Allgather(c, []int32{int32(r), int32(-r)}, all); err != nil {
			return err
		}
		for k := 0; k < p; k++ {
			if all[2*k] != int32(k) || all[2*k+1] != int32(-k) {
				return fmt.Errorf("Allgather: %v", all)
			}
		}
		counts := make([]int, p)
		total := 0
		for k := range counts {
			counts[k] = (k * 3) % 4 // includes zero counts
			total += counts[k]
		}
		mine := make([]int32, counts[r])
		for i := range mine {
			mine[i] = int32(10*r + i)
		}
		got := make([]int32, total)
		if err := mpi.Allgatherv(c, mine, got, counts); err != nil {
			return err
		}
		off := 0
		for k := 0; k < p; k++ {
			for i := 0; i < counts[k]; i++ {
				if got[off+i] != int32(10*k+i) {
					return fmt.Errorf("Allgatherv: %v", got)
				}
			}
			off += counts[k]
		}
		// Gatherv and Scatterv with the same counts.
		root := p - 1
		var at []int32
		if r == root {
			at = make([]int32, total)
		}
		if err := mpi.Gatherv(c, mine, at, counts, root); err != nil {
			return err
		}
		if r == root {
			if err := equal(at, got); err != nil {
				return fmt.Errorf("Gatherv: %v", err)
			}
		}
		back := make([]int32, counts[r])
		if err := mpi.Scatterv(c, at, back, counts, root); err != nil {
			return err
		}
		return equal(back, mine)
	})
}

func TestAlltoall(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		const n = 3
		send := make([]int64, p*n)
		for j := 0; j < p; j++ {
			for i := 0; i < n; i++ {
				send[j*n+i] = int64(1000*r + 10*j + i)
			}
		}
		recv := make([]int64, p*n)
		if err := mpi.Alltoall(c, send, recv); err != nil {
			return err
		}
		for j := 0; j < p; j++ {
			for i := 0; i < n; i++ {
				if want := int64(1000*j + 10*r + i); recv[j*n+i] != want {
					return fmt.Errorf("block %d elem %d = %d, want %d", j, i, recv[j*n+i], want)
				}
			}
		}
		return nil
	})
}

func TestScanAndReduceScatterBlock(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		got := make([]int64, 2)
		if err := mpi.Scan(c, []int64{int64(r + 1), 1}, got, mpi.Sum); err != nil {
			return err
		}
		if want := int64((r + 1) * (r + 2) / 2); got[0] != want || got[1] != int64(r+1) {
			return fmt.Errorf("Scan: %v, want [%d %d]", got, want, r+1)
		}
		send := make([]int64, 2*p)
		for i := range send {
			send[i] = int64(i * (r + 1))
		}
		blk := make([]int64, 2)
		if err := mpi.ReduceScatterBlock(c, send, blk, mpi.Sum); err != nil {
			return err
		}
		sumRanks := int64(p * (p + 1) / 2)
		if blk[0] != int64(2*r)*sumRanks || blk[1] != int64(2*r+1)*sumRanks {
			return fmt.Errorf("ReduceScatterBlock: %v", blk)
		}
		return nil
	})
}

func TestSplitAndDupIsolateTraffic(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		// Even and odd ranks, ordered by descending world rank.
		sub, err := c.Split(r%2, -r)
		if err != nil {
			return err
		}
		wantSize := (p + 1 - r%2) / 2
		if sub.Size() != wantSize {
			return fmt.Errorf("split size %d, want %d", sub.Size(), wantSize)
		}
		// Ranks in sub are ordered by key = -r: highest world rank first.
		all := make([]int, sub.Size())
		if err := mpi.Allgather(sub, []int{r}, all); err != nil {
			return err
		}
		for i := 1; i < len(all); i++ {
			if all[i] >= all[i-1] {
				return fmt.Errorf("split order %v", all)
			}
		}
		dup, err := c.Dup()
		if err != nil {
			return err
		}
		// A message on dup must not match a receive on c or sub with the same tag.
		if p > 1 {
			peer := (r + 1) % p
			if err := mpi.Send(dup, []int{1}, peer, 5); err != nil {
				return err
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			if _, ok, _ := c.Iprobe(mpi.AnySource, 5); ok {
				return errors.New("message sent on dup is visible on the parent")
			}
			if _, err := mpi.Recv(dup, []int{0}, (r-1+p)%p, 5); err != nil {
				return err
			}
		}
		none, err := c.Split(mpi.Undefined, 0)
		if none != nil || err != nil {
			return fmt.Errorf("Split(Undefined) = %v, %v", none, err)
		}
		if err := sub.Free(); err != nil {
			return err
		}
		if err := sub.Barrier(); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("Barrier on freed comm: %v", err)
		}
		return nil
	})
}
