package mpi_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
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
	t.Run("shm-np5", func(t *testing.T) { mpitest.Run(t, mpitest.SHM, 5, fn) })
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
			for _, n := range []int{1, 3, 5000, 9000} { // 9000 int64 = 72 KB: the ring algorithm
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

// ringContribution is rank r's element i in the ring tests: values of very different
// magnitudes, so that the order of the additions shows in the result's bits.
func ringContribution(r, i int) float64 {
	return math.Ldexp(1.0/float64(3+i%97+7*r), (i*(r+1))%40-20)
}

// ringOrderSum is the sum the ring algorithm computes for element i of n on p ranks: element i
// lies in block b of the ring's partition (p nearly equal blocks, the first n%p one element
// larger), whose partial sum starts at rank b and picks up the ranks b+1, b+2, ... in turn,
// each adding its own value to the received partial sum.
func ringOrderSum(n, p, i int) float64 {
	q, rem := n/p, n%p
	b := 0
	for lo := 0; ; b++ {
		hi := lo + q
		if b < rem {
			hi++
		}
		if i < hi {
			break
		}
		lo = hi
	}
	acc := ringContribution(b, i)
	for s := 1; s < p; s++ {
		acc = acc + ringContribution((b+s)%p, i)
	}
	return acc
}

// ringOrderSums is ringOrderSum for every element, computed once per (n, p) and shared by the
// ranks of a run: each of eight ranks computing a million reference sums under the race
// detector took longer than the collective itself.
func ringOrderSums(n, p int) []float64 {
	ringWantMu.Lock()
	defer ringWantMu.Unlock()
	key := [2]int{n, p}
	if want, ok := ringWant[key]; ok {
		return want
	}
	want := make([]float64, n)
	for i := range want {
		want[i] = ringOrderSum(n, p, i)
	}
	ringWant[key] = want
	return want
}

var (
	ringWantMu sync.Mutex
	ringWant   = map[[2]int][]float64{}
)

func bitsEqual(got, want []float64) error {
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			return fmt.Errorf("element %d = %v (%#x), want %v (%#x)", i, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
		}
	}
	return nil
}

// ringSizes are float64 counts that take the pipelined ring (64 KiB and more): one segment
// per block, several segments per block, blocks whose segment counts differ (8192 float64
// fill one 64 KiB segment), and a count that is not a multiple of the rank count.
func ringSizes(p int) []int {
	return []int{8192*p - 1, 8192*p*3 + p - 1, 8192*2*p + 1, 80000}
}

// bigRingSize has blocks above ringBigBlock: two rendezvous segments per block, one short.
func bigRingSize(p int) int { return 140000*p + 3 }

// The large-vector Allreduce is deterministic: every rank gets the same bits, and they are the
// bits of the documented ring order (which is also the order of earlier versions, so results
// do not change between releases).
func TestAllreduceRingOrderIsFixed(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		if p == 1 {
			return nil
		}
		for _, n := range append(ringSizes(p), bigRingSize(p)) {
			send := make([]float64, n)
			for i := range send {
				send[i] = ringContribution(r, i)
			}
			got := make([]float64, n)
			if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
				return err
			}
			want := ringOrderSums(n, p)
			if err := bitsEqual(got, want); err != nil {
				return fmt.Errorf("n %d: %v", n, err)
			}
			// In place (send and recv the same slice) gives the same bits.
			if err := mpi.Allreduce(c, send, send, mpi.Sum); err != nil {
				return err
			}
			if err := bitsEqual(send, want); err != nil {
				return fmt.Errorf("n %d in place: %v", n, err)
			}
		}
		return nil
	})
}

func TestAllreduceRingAllOpsAndTypes(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		n := 8192*2*p + 3 // several 64 KiB segments per block
		for _, op := range []mpi.Op{mpi.Sum, mpi.Prod, mpi.Max, mpi.Min} {
			send := make([]int64, n)
			for i := range send {
				send[i] = contribution(r, i)
			}
			got := make([]int64, n)
			if err := mpi.Allreduce(c, send, got, op); err != nil {
				return err
			}
			if err := equal(got, expected(p, n, op, contribution)); err != nil {
				return fmt.Errorf("int64 %v: %v", op, err)
			}
		}
		// int32 and uint8: other segment lengths in elements.
		s32 := make([]int32, 3*16384*p+1)
		for i := range s32 {
			s32[i] = int32(r*i%1000 - 500)
		}
		g32 := make([]int32, len(s32))
		if err := mpi.Allreduce(c, s32, g32, mpi.Max); err != nil {
			return err
		}
		for i, v := range g32 {
			want := int32(-1 << 31)
			for k := 0; k < p; k++ {
				want = max(want, int32(k*i%1000-500))
			}
			if v != want {
				return fmt.Errorf("int32 Max: element %d = %d, want %d", i, v, want)
			}
		}
		s8 := make([]uint8, 70000+p)
		for i := range s8 {
			s8[i] = uint8(i + r)
		}
		g8 := make([]uint8, len(s8))
		if err := mpi.Allreduce(c, s8, g8, mpi.Sum); err != nil {
			return err
		}
		for i, v := range g8 {
			want := uint8(0)
			for k := 0; k < p; k++ {
				want += uint8(i + k)
			}
			if v != want {
				return fmt.Errorf("uint8 Sum: element %d = %d, want %d", i, v, want)
			}
		}
		return nil
	})
}

// Vectors too long for the receives of one pass to be posted at once go around the ring in
// several phases; the result is the same as in one.
func TestAllreduceRingManyPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("24 MiB per rank")
	}
	const p = 3
	n := 3*128*8192 + 7 // 16 rendezvous segments per block on 3 ranks (phases: ring_internal_test.go)
	mpitest.Run(t, mpitest.InProc, p, func(c *mpi.Comm) error {
		send := make([]float64, n)
		for i := range send {
			send[i] = ringContribution(c.Rank(), i)
		}
		got := make([]float64, n)
		if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
			return err
		}
		for i := range got {
			if want := ringOrderSum(n, p, i); math.Float64bits(got[i]) != math.Float64bits(want) {
				return fmt.Errorf("element %d = %v, want %v", i, got[i], want)
			}
		}
		return nil
	})
}

// Back-to-back Allreduce calls of different lengths and algorithms, interleaved with other
// collectives, never take each other's messages.
func TestAllreduceBackToBack(t *testing.T) {
	forSizes(t, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		for round := 0; round < 3; round++ {
			for _, n := range []int{1, 9000*p + 1, 3, 40000 + round} {
				send := make([]int64, n)
				for i := range send {
					send[i] = int64(r*1000 + i + round)
				}
				got := make([]int64, n)
				if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
					return err
				}
				for i, v := range got {
					if want := int64(1000*p*(p-1)/2 + p*(i+round)); v != want {
						return fmt.Errorf("round %d n %d: element %d = %d, want %d", round, n, i, v, want)
					}
				}
			}
			if err := c.Barrier(); err != nil {
				return err
			}
		}
		return nil
	})
}

// An Allreduce whose peer dies fails with the peer's error instead of hanging.
func TestAllreduceFailsWhenPeerDies(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			eps := mpitest.Endpoints(t, tr, 2)
			worlds := make([]*mpi.Comm, 2)
			for i := range eps {
				w, err := mpi.Attach(eps[i])
				if err != nil {
					t.Fatal(err)
				}
				worlds[i] = w
			}
			errc := make(chan error, 1)
			go func() {
				buf := make([]float64, 1<<18)
				errc <- mpi.Allreduce(worlds[0], buf, buf, mpi.Sum)
			}()
			time.Sleep(50 * time.Millisecond)
			switch ep := eps[1].(type) {
			case killer:
				ep.Fail()
			case *comm.TCPEndpoint:
				ep.Abandon()
			}
			select {
			case err := <-errc:
				if !errors.Is(err, mpi.ErrProcFailed) {
					t.Errorf("Allreduce with a dead peer: %v, want ErrProcFailed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Allreduce did not fail within 10s of the peer's death")
			}
			eps[0].Close()
		})
	}
}
