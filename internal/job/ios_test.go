package job_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/mpios/mpios/internal/job"
)

// A peer's bandwidth in an agent's state comes from the network: pcmd status accepts only a
// positive, finite one up to MaxPeerBandwidth, for at most MaxIOSPeers peers.
func TestIOSStatePeerBandwidthIsBounded(t *testing.T) {
	ok := job.IOSState{Node: "n1", Peers: []string{"n2"}, PeerBandwidth: map[string]float64{"n2": 12.5e6, "n3": job.MaxPeerBandwidth}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid bandwidths refused: %v", err)
	}
	for _, bw := range []float64{0, -1, math.NaN(), math.Inf(1), job.MaxPeerBandwidth * 2} {
		st := job.IOSState{Node: "n1", PeerBandwidth: map[string]float64{"n2": bw}}
		if err := st.Validate(); err == nil {
			t.Errorf("bandwidth %v accepted", bw)
		}
	}
	many := map[string]float64{}
	for i := range job.MaxIOSPeers + 1 {
		many[fmt.Sprint("n", i)] = 1e6
	}
	if err := (job.IOSState{Node: "n1", PeerBandwidth: many}).Validate(); err == nil {
		t.Errorf("%d peers' bandwidths accepted", len(many))
	}
}
