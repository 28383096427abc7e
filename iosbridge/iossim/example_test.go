package iossim_test

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/iosbridge/iossim"
)

// Eight CPU-bound actors start on one of four 2-core nodes; S-RAS spreads them.
func ExampleRun() {
	nodes := iossim.Grid(1, 4, 2, 1)
	ranks, err := iossim.App("demo", iossim.Unconnected, 8, 0.1, 1<<20, 0, 1, nodes, iossim.OnFirstNode)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := iossim.Run(iossim.Config{Seed: 1, Policy: "sras", Nodes: nodes, Ranks: ranks, Duration: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	perNode := map[string]int{}
	for _, node := range res.Placement {
		perNode[node]++
	}
	fmt.Println("migrations:", res.Migrations)
	fmt.Println("ranks per node:", perNode["c0n0"], perNode["c0n1"], perNode["c0n2"], perNode["c0n3"])
	fmt.Printf("throughput: %.0f iterations/s\n", res.Throughput(30*time.Second))
	// Output:
	// migrations: 6
	// ranks per node: 2 2 2 2
	// throughput: 80 iterations/s
}
