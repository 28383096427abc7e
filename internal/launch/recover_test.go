package launch

import (
	"testing"

	"github.com/mpios/mpios/internal/supervisor"
)

// The Machine is told every change of mpirun's NATS connection once, the latest state
// winning when changes come faster than the loop reads them.
func TestControlPlaneChangesReachTheMachineOnce(t *testing.T) {
	cp := newControlPlane()
	if ev := cp.event(); ev != (supervisor.Tick{}) {
		t.Errorf("no change: %T", ev)
	}
	cp.set(false)
	<-cp.changed
	if ev := cp.event(); ev != (supervisor.ControlPlaneDown{}) {
		t.Errorf("after a disconnect: %T", ev)
	}
	cp.set(true)
	cp.set(false)
	cp.set(true) // one wake-up for the three
	<-cp.changed
	select {
	case <-cp.changed:
		t.Error("more than one wake-up pending")
	default:
	}
	if ev := cp.event(); ev != (supervisor.ControlPlaneUp{}) {
		t.Errorf("after reconnecting: %T", ev)
	}
	if ev := cp.event(); ev != (supervisor.Tick{}) {
		t.Errorf("told twice: %T", ev)
	}
}
