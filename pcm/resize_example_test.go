package pcm_test

import (
	"fmt"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

// A malleable loop: after Reconfigure returns Resized the world has another size (World
// returns it) and communicators derived from the old one are re-created; Leave means this
// process was merged away. A world that mpirun did not launch is never resized, so this one
// just runs its iterations.
func ExampleProcess_World() {
	world, _ := mpi.Attach(comm.NewInProcNetwork(1).Endpoint(0))
	defer mpi.Detach(world)
	p, err := pcm.InitWith(world, pcm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	iter := 0
	p.Register("iter", &iter)
	if err := p.Load(); err != nil {
		fmt.Println(err)
		return
	}
	halo, _ := p.World().Dup()
	for iter < 3 {
		iter++
		act, err := p.Reconfigure(iter)
		if err != nil {
			fmt.Println(err)
			return
		}
		switch act {
		case pcm.Leave:
			return
		case pcm.Resized:
			halo, _ = p.World().Dup()
		}
	}
	fmt.Println("iterations", iter, "on", halo.Size(), "rank(s), status", p.Status())
	// Output: iterations 3 on 1 rank(s), status new
}
