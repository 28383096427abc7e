package launch

import (
	"testing"
	"time"

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

// mpirun's loop wakes at least every stallTick; a longer gap than stallAfter between two
// wake-ups is a stall of mpirun itself, reported with its length.
func TestALongGapBetweenWakeUpsIsAStall(t *testing.T) {
	var w stallWatch
	now := time.Now()
	if _, stalled := w.woke(now); stalled {
		t.Error("the first wake-up is a stall")
	}
	for range 10 {
		now = now.Add(stallTick)
		if gap, stalled := w.woke(now); stalled || gap != stallTick {
			t.Fatalf("a wake-up after %v: gap %v, stall %v", stallTick, gap, stalled)
		}
	}
	now = now.Add(25 * time.Second)
	if gap, stalled := w.woke(now); !stalled || gap != 25*time.Second {
		t.Errorf("a wake-up after 25s: gap %v, stall %v; want a stall of 25s", gap, stalled)
	}
	if _, stalled := w.woke(now.Add(stallAfter)); stalled {
		t.Errorf("a gap of exactly %v is a stall", stallAfter)
	}
}
