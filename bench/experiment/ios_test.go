package main

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/job"
)

// The report reads an agent's round trips and bandwidths from its state as pcmd's agents
// encode it (job.IOSState), field by field, whatever else the agent's version adds.
func TestAgentStateCarriesTheMeasuredLinks(t *testing.T) {
	data, err := msgpack.Marshal(job.IOSState{Node: "a1", Policy: "atsras",
		PeerRTT: map[string]time.Duration{"b1": 41 * time.Millisecond}, PeerBaseRTT: map[string]time.Duration{"b1": 40 * time.Millisecond},
		PeerBandwidth: map[string]float64{"b1": 1.25e6}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	st := decodeAgent(m)
	if st.Node != "a1" || st.PeerRTT["b1"] != 41*time.Millisecond || st.PeerBaseRTT["b1"] != 40*time.Millisecond || st.PeerBandwidth["b1"] != 1.25e6 {
		t.Fatalf("decoded %+v", st)
	}
}
