package pcm_test

import (
	"fmt"
	"io"
	"sync"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

// A grid of 10 rows of 4 values distributed over 2 ranks, then rebalanced 1:4: rows move
// only across the boundary between the two blocks.
func ExampleNewBlock() {
	net := comm.NewInProcNetwork(2)
	var wg sync.WaitGroup
	out := make([]string, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			world, _ := mpi.Attach(net.Endpoint(r))
			defer mpi.Detach(world)
			p, _ := pcm.InitWith(world, pcm.Options{Log: io.Discard})
			defer p.Close()
			u, err := pcm.NewBlock[float64](p, "u", 10, 4, pcm.Halo(1))
			if err != nil {
				out[r] = err.Error()
				return
			}
			if err := p.Load(); err != nil {
				out[r] = err.Error()
				return
			}
			for i := range u.Local() {
				u.Local()[i] = float64(u.Offset()*4 + i) // row-major global index
			}
			before := u.Range()
			if err := p.Rebalance([]float64{1, 4}); err != nil {
				out[r] = err.Error()
				return
			}
			out[r] = fmt.Sprintf("rank %d: rows %v -> %v, first value %v, sent %d bytes",
				r, before, u.Range(), u.Local()[0], p.MovedBytes())
		}()
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: rows [0,5) -> [0,2), first value 0, sent 96 bytes
	// rank 1: rows [5,10) -> [2,10), first value 8, sent 0 bytes
}
