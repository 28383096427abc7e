package mpi

import (
	"testing"

	"github.com/mpios/mpios/comm"
)

// Only the world that Init made in a launched process describes a launched process: a
// goroutine world has no job, no control plane and cannot migrate ranks.
func TestLaunchedOnlyForTheLaunchedWorld(t *testing.T) {
	w, err := Attach(comm.NewInProcNetwork(1).Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	defer Detach(w)
	if l := Launched(w); l != nil {
		t.Fatalf("Launched(goroutine world) = %+v", l)
	}
	if l := Launched(nil); l != nil {
		t.Fatalf("Launched(nil) = %+v", l)
	}
	if m := memberOf(w); m != nil {
		t.Fatalf("an in-process world can migrate ranks: %T", m)
	}
}
