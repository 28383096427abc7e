package state_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mpios/mpios/pcm/state"
)

// captureState registers a grid, a nil slice, a counter and a msgpack value.
func captureState(t *testing.T) (reg *state.Registry, grid *[]float64, iter *int, names *map[string]int) {
	t.Helper()
	g := []float64{1, 2, 3, 4}
	var empty []int32
	i := 7
	m := map[string]int{"a": 1}
	reg = state.NewRegistry()
	for _, e := range []struct {
		name string
		ptr  any
	}{{"grid", &g}, {"empty", &empty}, {"iter", &i}, {"names", &m}} {
		if err := reg.Register(e.name, e.ptr); err != nil {
			t.Fatal(err)
		}
	}
	return reg, &g, &i, &m
}

func TestCaptureWritesWhatWriteToWroteWhenItWasTaken(t *testing.T) {
	reg, _, iter, names := captureState(t)
	var want bytes.Buffer
	if _, err := reg.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	for _, byRef := range []func(string) bool{nil, func(name string) bool { return name == "grid" }} {
		c, err := reg.Capture(nil, byRef)
		if err != nil {
			t.Fatal(err)
		}
		// The copied values change after the capture: the capture keeps the old ones.
		*iter, (*names)["b"] = 8, 2
		var got bytes.Buffer
		if _, err := c.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("byReference %v: capture wrote %d bytes unlike WriteTo's %d at the capture", byRef != nil, got.Len(), want.Len())
		}
		*iter = 7
		delete(*names, "b")
	}
}

// A referenced entry is read when the capture is written, from the memory it had when taken:
// a later change of its contents shows, a later replacement of the slice does not.
func TestCaptureReadsReferencedMemoryWhenWritten(t *testing.T) {
	reg, grid, _, _ := captureState(t)
	c, err := reg.Capture(nil, func(name string) bool { return name == "grid" })
	if err != nil {
		t.Fatal(err)
	}
	old := *grid
	*grid = []float64{9, 9} // Flip: the registered slice now names other memory
	old[0] = 5              // the captured memory, changed before the write
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var g []float64
	var empty []int32
	var i int
	var m map[string]int
	restore := state.NewRegistry()
	for name, ptr := range map[string]any{"grid": &g, "empty": &empty, "iter": &i, "names": &m} {
		if err := restore.Register(name, ptr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := restore.ReadFrom(&buf); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g) != "[5 2 3 4]" || empty != nil || i != 7 || m["a"] != 1 {
		t.Fatalf("restored grid %v, empty %v (nil %v), iter %d, names %v", g, empty, empty == nil, i, m)
	}
}

func TestCaptureIsReusedWithoutKeepingOldValues(t *testing.T) {
	reg, _, iter, _ := captureState(t)
	c, err := reg.Capture(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	*iter = 1234567
	if c, err = reg.Capture(c, nil); err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	if _, err := c.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("a reused capture wrote other bytes than WriteTo")
	}
}

func ExampleRegistry_Capture() {
	grid := []float64{0, 0.5, 1}
	iter := 41
	reg := state.NewRegistry()
	_ = reg.Register("grid", &grid)
	_ = reg.Register("iter", &iter)

	// At the boundary: copy the counter, reference the grid, which the application leaves
	// alone until the capture is written.
	c, err := reg.Capture(nil, func(name string) bool { return name == "grid" })
	if err != nil {
		fmt.Println(err)
		return
	}
	iter++ // the next iteration begins

	var ckpt bytes.Buffer
	if _, err := c.WriteTo(&ckpt); err != nil { // in the background
		fmt.Println(err)
		return
	}
	restored := state.NewRegistry()
	var grid2 []float64
	var iter2 int
	_ = restored.Register("grid", &grid2)
	_ = restored.Register("iter", &iter2)
	if _, err := restored.ReadFrom(&ckpt); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(grid2, iter2)
	// Output: [0 0.5 1] 41
}
