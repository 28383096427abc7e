package profiler_test

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/profiler"
)

// A one-rank world talks to itself; pcm marks iterations with the times it measured.
func Example() {
	p := profiler.New(profiler.Options{Job: "demo", Window: 4})
	if err := p.Install(); err != nil {
		fmt.Println(err)
		return
	}
	defer p.Uninstall()

	world, err := mpi.Attach(comm.NewInProcNetwork(1).Endpoint(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p.Begin(0, start)
	for i := 1; i <= 3; i++ {
		if err := mpi.Send(world, []float64{1, 2, 3, 4}, 0, 0); err != nil {
			fmt.Println(err)
			return
		}
		if _, err := mpi.Recv(world, make([]float64, 4), 0, 0); err != nil {
			fmt.Println(err)
			return
		}
		p.Iteration(0, i, start.Add(time.Duration(i)*100*time.Millisecond))
	}
	if err := mpi.Detach(world); err != nil {
		fmt.Println(err)
		return
	}

	r := p.Snapshot()[0]
	fmt.Printf("sent to self: %+v\n", r.SentTo(0))
	fmt.Printf("received from self: %+v\n", r.ReceivedFrom(0))
	fmt.Printf("iterations %d, mean %.2fs\n", r.Iterations, r.MeanIterSeconds)
	// Output:
	// sent to self: {Rank:0 Messages:3 Bytes:96}
	// received from self: {Rank:0 Messages:3 Bytes:96}
	// iterations 3, mean 0.10s
}
