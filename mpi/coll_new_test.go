package mpi_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// recorder is an Interceptor that keeps the names of the calls it saw.
type recorder struct {
	mu  sync.Mutex
	ops map[string]int
}

func (r *recorder) Observe(ev mpi.CallEvent) {
	r.mu.Lock()
	r.ops[ev.Op]++
	r.mu.Unlock()
}

func TestEveryNewCollectiveIsSeenByTheInterceptor(t *testing.T) {
	rec := &recorder{ops: map[string]int{}}
	mpi.SetInterceptor(rec)
	defer mpi.SetInterceptor(nil)
	mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
		p := c.Size()
		ones := make([]int, p)
		for i := range ones {
			ones[i] = 1
		}
		v := []int{c.Rank()}
		all := make([]int, p)
		if err := mpi.Exscan(c, v, make([]int, 1), mpi.Sum); err != nil {
			return err
		}
		if err := mpi.ReduceScatter(c, all, v, ones, mpi.Sum); err != nil {
			return err
		}
		if err := mpi.Alltoallv(c, all, ones, make([]int, p), ones); err != nil {
			return err
		}
		var reqs []*mpi.Request
		for _, start := range []func() (*mpi.Request, error){
			c.Ibarrier,
			func() (*mpi.Request, error) { return mpi.Ibcast(c, v, 0) },
			func() (*mpi.Request, error) { return mpi.Ireduce(c, []int{1}, make([]int, 1), mpi.Sum, 0) },
			func() (*mpi.Request, error) { return mpi.Iallreduce(c, []int{1}, make([]int, 1), mpi.Sum) },
			func() (*mpi.Request, error) { return mpi.Iallgather(c, []int{1}, make([]int, p)) },
			func() (*mpi.Request, error) { return mpi.Ialltoall(c, all, make([]int, p)) },
		} {
			r, err := start()
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		return mpi.WaitAll(reqs...)
	})
	for _, op := range []string{"Exscan", "ReduceScatter", "Alltoallv", "Ibarrier", "Ibcast", "Ireduce", "Iallreduce", "Iallgather", "Ialltoall"} {
		if rec.ops[op] != 3 {
			t.Errorf("%s observed %d times, want once per rank (3)", op, rec.ops[op])
		}
	}
}

func TestNewCollectivesReturnTypedErrors(t *testing.T) {
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		if err := mpi.Allreduce(c, []float32{1}, make([]float32, 1), mpi.BXor); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("bitwise op on floats: %v", err)
		}
		if err := mpi.Reduce(c, []int{1}, make([]int, 1), mpi.Op{}, 0); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("zero Op: %v", err)
		}
		if err := mpi.Allreduce(c, []int{1}, make([]int, 1), mpi.NewOp[int]("nil", true, nil)); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("op without a function: %v", err)
		}
		if err := mpi.Exscan(c, []int{1}, make([]int, 2), mpi.Sum); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("Exscan length mismatch: %v", err)
		}
		if err := mpi.Alltoallv(c, []int{1}, []int{1}, []int{1}, []int{1}); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("Alltoallv with one count for two ranks: %v", err)
		}
		r, err := mpi.Iallreduce(c, []int{1}, make([]int, 3), mpi.Sum)
		if err != nil {
			return err
		}
		if _, err := r.Wait(); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("Iallreduce length mismatch: %v", err)
		}
		var nilComm *mpi.Comm
		if _, err := mpi.Ibcast(nilComm, []int{1}, 0); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("Ibcast on nil: %v", err)
		}
		return nil
	})
}

func TestNonblockingCollectivesOnTwoCommunicatorsOverlap(t *testing.T) {
	// Collectives on different communicators are independent: an Iallreduce on a duplicate
	// completes while one on the world waits for a rank that has not started it yet.
	mpitest.Run(t, mpitest.TCP, 3, func(c *mpi.Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		var first *mpi.Request
		if c.Rank() != 0 {
			if first, err = mpi.Iallreduce(c, []int{1}, make([]int, 1), mpi.Sum); err != nil {
				return err
			}
		}
		got := make([]int, 1)
		if err := mpi.Allreduce(d, []int{2}, got, mpi.Sum); err != nil || got[0] != 6 {
			return fmt.Errorf("Allreduce on the duplicate: %v %v", got, err)
		}
		if c.Rank() == 0 {
			if first, err = mpi.Iallreduce(c, []int{1}, make([]int, 1), mpi.Sum); err != nil {
				return err
			}
		}
		_, err = first.Wait()
		return err
	})
}

func ExampleIallreduce() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(c *mpi.Comm) error {
		local := []float64{float64(c.Rank() + 1)}
		global := make([]float64, 1)
		req, err := mpi.Iallreduce(c, local, global, mpi.Sum)
		if err != nil {
			return err
		}
		// ... work that does not touch local or global overlaps the reduction ...
		if _, err := req.Wait(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("global sum:", global[0])
		}
		return nil
	})
	// Output: global sum: 10
}

func ExampleMaxLoc() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(c *mpi.Comm) error {
		// Each rank's largest residual and where it is, as a (value, index) pair.
		residual := []float64{float64((c.Rank() * 7) % 4), float64(100 + c.Rank())}
		worst := make([]float64, 2)
		if err := mpi.Allreduce(c, residual, worst, mpi.MaxLoc); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("largest residual %v at index %v\n", worst[0], worst[1])
		}
		return nil
	})
	// Output: largest residual 3 at index 101
}

func ExampleNewOp() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 3, func(c *mpi.Comm) error {
		// Composition of affine maps x -> a*x + b, stored as (a, b) pairs: not commutative, so
		// mpi applies it in rank order.
		compose := mpi.NewOp("compose", false, func(in, inout []int64) {
			for i := 0; i+1 < len(inout); i += 2 {
				a1, b1, a2, b2 := in[i], in[i+1], inout[i], inout[i+1]
				// inout = in ∘ inout: apply in's map first, then inout's.
				inout[i], inout[i+1] = a2*a1, a2*b1+b2
			}
		})
		mine := []int64{2, int64(c.Rank())} // x -> 2x + rank
		all := make([]int64, 2)
		if err := mpi.Allreduce(c, mine, all, compose); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("x -> %dx + %d\n", all[0], all[1])
		}
		return nil
	})
	// Output: x -> 8x + 4
}

func ExampleAlltoallv() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 3, func(c *mpi.Comm) error {
		// Rank r sends j+1 copies of r to rank j.
		p, r := c.Size(), c.Rank()
		sendCounts, recvCounts := make([]int, p), make([]int, p)
		var send []int
		for j := 0; j < p; j++ {
			sendCounts[j], recvCounts[j] = j+1, r+1
			send = append(send, slices.Repeat([]int{r}, j+1)...)
		}
		recv := make([]int, p*(r+1))
		if err := mpi.Alltoallv(c, send, sendCounts, recv, recvCounts); err != nil {
			return err
		}
		if r == 2 {
			fmt.Println(recv)
		}
		return nil
	})
	// Output: [0 0 0 1 1 1 2 2 2]
}

func ExampleGather_inPlace() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 3, func(c *mpi.Comm) error {
		// In place: the root's contribution is already in its block of the result, and the
		// root passes that block as its send buffer.
		const root = 0
		all := make([]int, c.Size())
		send := []int{c.Rank() * 10}
		if c.Rank() == root {
			all[root] = 0
			send = all[root : root+1]
		}
		if err := mpi.Gather(c, send, all, root); err != nil {
			return err
		}
		if c.Rank() == root {
			fmt.Println(all)
		}
		return nil
	})
	// Output: [0 10 20]
}

func ExampleExscan() {
	mpitest.Run(&testing.T{}, mpitest.InProc, 4, func(c *mpi.Comm) error {
		// Where each rank's rows start in a global numbering: the sum of the rows before it.
		rows := []int{10 + c.Rank()}
		start := []int{0} // rank 0's stays 0
		if err := mpi.Exscan(c, rows, start, mpi.Sum); err != nil {
			return err
		}
		if c.Rank() == 3 {
			fmt.Println("rank 3 starts at row", start[0])
		}
		return nil
	})
	// Output: rank 3 starts at row 33
}
