package pcmd

import (
	"reflect"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func beat(name string, pid int) job.NodeInfo {
	return job.NodeInfo{Name: name, Slots: 2, PID: pid, Interval: time.Second}
}

// "A node that misses 3 heartbeats is shown as gone": it is no longer an alive peer (nor
// an IOS neighbour), but stays in the view, with its age, until forgotten.
func TestAPeerThatMissesThreeBeatsIsGone(t *testing.T) {
	pt := newPeerTable("n1", 100)
	pt.heard(beat("n2", 200), t0)
	pt.heard(beat("n3", 300), t0.Add(2*time.Second))
	if got := pt.alive(t0.Add(3 * time.Second)); !reflect.DeepEqual(got, []string{"n2", "n3"}) {
		t.Errorf("alive at 3s = %v", got)
	}
	if got := pt.alive(t0.Add(3*time.Second + time.Millisecond)); !reflect.DeepEqual(got, []string{"n3"}) {
		t.Errorf("alive just after n2's third missed beat = %v", got)
	}
	v := pt.view(t0.Add(4 * time.Second))
	if len(v) != 2 || v[0].Info.Name != "n2" || v[0].Age != 4*time.Second || v[1].Age != 2*time.Second {
		t.Errorf("view %+v", v)
	}
	pt.forget(t0.Add(forgetAfter + time.Second))
	if v := pt.view(t0.Add(forgetAfter + time.Second)); len(v) != 1 || v[0].Info.Name != "n3" {
		t.Errorf("after forgetAfter: %+v, want only n3", v)
	}
}

// A pcmd that stops says so ("leaving"): its peers drop it at once instead of waiting for
// missed beats.
func TestALeavingPeerIsDroppedAtOnce(t *testing.T) {
	pt := newPeerTable("n1", 100)
	pt.heard(beat("n2", 200), t0)
	leaving := beat("n2", 200)
	leaving.Leaving = true
	pt.heard(leaving, t0.Add(time.Millisecond))
	if v := pt.view(t0.Add(time.Millisecond)); len(v) != 0 {
		t.Errorf("view %+v after n2 left", v)
	}
}

// Another pcmd beating with this node's name is reported once per pid, and never becomes a
// peer of itself.
func TestATwinIsReportedOnce(t *testing.T) {
	pt := newPeerTable("n1", 100)
	if pt.heard(beat("n1", 100), t0) {
		t.Error("our own heartbeat reported as a twin")
	}
	if !pt.heard(beat("n1", 999), t0) || pt.heard(beat("n1", 999), t0.Add(time.Second)) {
		t.Error("the twin pid 999 is not reported exactly once")
	}
	if !pt.heard(beat("n1", 998), t0) {
		t.Error("a second twin is not reported")
	}
	if v := pt.view(t0); len(v) != 0 {
		t.Errorf("the node is its own peer: %+v", v)
	}
}
