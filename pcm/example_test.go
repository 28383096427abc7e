package pcm_test

import (
	"fmt"
	"os"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// solve is an application's iterative loop under PCM: u and iter are its state. It stops
// after iteration stop, as if its time allocation had run out.
func solve(world *mpi.Comm, opts pcm.Options, iters, stop int) (_ []float64, err error) {
	p, err := pcm.InitWith(world, opts)
	if err != nil {
		return nil, err
	}
	// Close commits a checkpoint still in flight (here the one of iteration 4).
	defer func() {
		if cerr := p.Close(); err == nil {
			err = cerr
		}
	}()
	u, iter := []float64{1, 2, 3}, 0
	if err := p.Register("u", &u); err != nil {
		return nil, err
	}
	if err := p.Register("iter", &iter); err != nil {
		return nil, err
	}
	if err := p.Load(); err != nil {
		return nil, err
	}
	if p.Status() == pcm.Restarted {
		fmt.Println("restarted after iteration", iter)
	}
	for iter < iters {
		for i := range u {
			u[i] *= 1.5
		}
		iter++ // iter counts completed iterations when Reconfigure is called
		act, err := p.Reconfigure(iter)
		if err != nil {
			return nil, err
		}
		if act == pcm.Leave || iter == stop {
			break
		}
	}
	return u, nil
}

func Example() {
	dir, _ := os.MkdirTemp("", "pcm")
	defer os.RemoveAll(dir)
	world, _ := mpi.Attach(comm.NewInProcNetwork(1).Endpoint(0)) // a one-rank world
	defer mpi.Detach(world)

	// Job "run1" checkpoints every 2 iterations and stops after iteration 5.
	opts := pcm.Options{JobID: "run1", Dir: dir, Every: 2, Log: os.Stdout}
	if _, err := solve(world, opts, 6, 5); err != nil {
		fmt.Println(err)
		return
	}
	// Job "run2" restarts from run1's newest checkpoint (iteration 4) and finishes.
	opts = pcm.Options{JobID: "run2", Dir: dir, Every: 2, Restart: "run1", Log: os.Stdout}
	u, err := solve(world, opts, 6, 0)
	fmt.Println(u, err)
	// Output:
	// pcm: job run2 restarts from job run1 checkpoint 2 (iteration 4)
	// restarted after iteration 4
	// [11.390625 22.78125 34.171875] <nil>
}

// The loop calls Reconfigure at every iteration boundary and leaves when it returns Leave
// (the rank moved to another node). RequestCheckpoint, callable from any goroutine (a
// signal handler, a control message), has every rank checkpoint the same iteration at the
// next agreement point; here an agreement point is every call (PollEvery 1).
func ExampleProcess_Reconfigure() {
	dir, _ := os.MkdirTemp("", "pcm")
	defer os.RemoveAll(dir)
	world, _ := mpi.Attach(comm.NewInProcNetwork(1).Endpoint(0))
	defer mpi.Detach(world)

	p, err := pcm.InitWith(world, pcm.Options{JobID: "demo", Dir: dir, OnDemand: true, PollEvery: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	sum, iter := 0, 0
	p.Register("sum", &sum)
	p.Register("iter", &iter)
	if err := p.Load(); err != nil {
		fmt.Println(err)
		return
	}
	for iter < 5 {
		sum += iter
		iter++
		if iter == 3 {
			p.RequestCheckpoint()
		}
		act, err := p.Reconfigure(iter)
		if err != nil {
			fmt.Println(err)
			return
		}
		if act == pcm.Leave {
			return
		}
	}
	if err := p.Close(); err != nil { // commits the checkpoint if it is still in flight
		fmt.Println(err)
		return
	}
	store, _ := ckptstore.Open(dir, nil)
	ms, _ := store.Checkpoints("demo")
	for _, m := range ms {
		fmt.Printf("checkpoint %d holds iteration %d\n", m.Seq, m.Iteration)
	}
	fmt.Println("sum", sum)
	// Output:
	// checkpoint 1 holds iteration 3
	// sum 10
}
