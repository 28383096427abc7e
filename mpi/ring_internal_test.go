package mpi

import (
	"math"
	"sync"
	"testing"

	"github.com/mpios/mpios/comm"
)

// allreduceOnRanks runs Allreduce of n elements on p goroutine ranks; rank r contributes
// contrib(r, i) at element i. It returns every rank's result.
func allreduceOnRanks(t *testing.T, p, n int, contrib func(r, i int) float64) [][]float64 {
	t.Helper()
	nw := comm.NewInProcNetwork(p)
	got := make([][]float64, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := 0; r < p; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Attach(nw.Endpoint(r))
			if err != nil {
				errs[r] = err
				return
			}
			send := make([]float64, n)
			for i := range send {
				send[i] = contrib(r, i)
			}
			got[r] = make([]float64, n)
			errs[r] = Allreduce(c, send, got[r], Sum)
			if err := Detach(c); errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return got
}

// Short phases (few receives posted at once) give bitwise the results of one long phase, for
// eager and for rendezvous segments.
func TestAllreduceRingPhases(t *testing.T) {
	const p = 3
	contrib := func(r, i int) float64 { return math.Sqrt(float64(r*7919+i)) / 3 }
	for _, n := range []int{
		p*4*8192 - 5,   // blocks of 4 eager segments
		p*5*65536 + 11, // blocks of 5 rendezvous segments and a bit
	} {
		want := allreduceOnRanks(t, p, n, contrib)
		saved := ringWindow
		ringWindow = 2 * (p - 1) // one segment per block and phase
		got := allreduceOnRanks(t, p, n, contrib)
		ringWindow = saved
		for r := 0; r < p; r++ {
			for i := range got[r] {
				if math.Float64bits(got[r][i]) != math.Float64bits(want[0][i]) {
					t.Fatalf("n %d rank %d element %d: %v with short phases, %v with one phase", n, r, i, got[r][i], want[0][i])
				}
			}
		}
	}
}
