package spawner

import (
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlplane"
)

// "A launcher is not declared gone while the observer's own connection is down or within
// the grace after it comes back" (issue 16): a node cut off from NATS keeps the ranks whose
// launcher it cannot hear; once back, the launcher has the lease's time to be heard again.
func TestANodeCutOffFromNATSKeepsItsLeases(t *testing.T) {
	tb := NewTable("n1", 4, 10*time.Second)
	start(t, tb, RankKey{"j", 0}, 100, t0, 0)
	w := &ctlplane.Watch{Grace: 20 * time.Second}
	w.Disconnected(t0.Add(time.Second))
	if ex := tb.ExpireBy(t0.Add(15*time.Second), w.Silence); len(ex) != 0 {
		t.Fatalf("expired during the node's own outage: %+v", ex)
	}
	w.Reconnected(t0.Add(16 * time.Second))
	if ex := tb.ExpireBy(t0.Add(25*time.Second), w.Silence); len(ex) != 0 {
		t.Fatalf("expired 9s after the reconnection, with a 10s lease: %+v", ex)
	}
	if ex := tb.ExpireBy(t0.Add(27*time.Second), w.Silence); len(ex) != 1 || ex[0].Silence != 11*time.Second {
		t.Fatalf("a launcher silent for 11s after the reconnection: %+v, want its lease expired", ex)
	}
}
