package state_test

import (
	"bytes"
	"fmt"

	"github.com/mpios/mpios/pcm/state"
)

func Example() {
	// A rank's state: a grid (written raw), the iteration counter and some parameters
	// (written with msgpack).
	type params struct{ Alpha float64 }
	u := []float64{0, 0.5, 1}
	iter := 41
	p := params{Alpha: 0.25}

	reg := state.NewRegistry()
	for name, ptr := range map[string]any{"u": &u, "iter": &iter, "params": &p} {
		if err := reg.Register(name, ptr); err != nil {
			fmt.Println(err)
			return
		}
	}
	var ckpt bytes.Buffer
	if _, err := reg.WriteTo(&ckpt); err != nil {
		fmt.Println(err)
		return
	}

	// Later, possibly in another process: register the same names, then restore.
	var u2 []float64
	var iter2 int
	var p2 params
	restore := state.NewRegistry()
	_ = restore.Register("u", &u2)
	_ = restore.Register("iter", &iter2)
	_ = restore.Register("params", &p2)
	if _, err := restore.ReadFrom(&ckpt); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(u2, iter2, p2.Alpha)
	// Output: [0 0.5 1] 41 0.25
}
