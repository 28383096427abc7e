package main

import (
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// The report reads an agent's round trips and bandwidths from its state as pcmd's agents
// encode it (job.IOSState, signed by the node), field by field, whatever else the agent's
// version adds; a state in clear is skipped.
func TestAgentStateCarriesTheMeasuredLinks(t *testing.T) {
	data, err := msgpack.Marshal(job.IOSState{Node: "a1", Policy: "atsras",
		PeerRTT: map[string]time.Duration{"b1": 41 * time.Millisecond}, PeerBaseRTT: map[string]time.Duration{"b1": 40 * time.Millisecond},
		PeerBandwidth: map[string]float64{"b1": 1.25e6}})
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateServer()
	w, err := ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: "a1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	const inbox = "_INBOX.x"
	signed, err := w.Wrap(inbox, data, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := agentFromReply(inbox, data); ok {
		t.Error("an unsigned state was taken")
	}
	st, ok := agentFromReply(inbox, signed)
	if !ok || st.Node != "a1" || st.PeerRTT["b1"] != 41*time.Millisecond || st.PeerBaseRTT["b1"] != 40*time.Millisecond || st.PeerBandwidth["b1"] != 1.25e6 {
		t.Fatalf("decoded %+v", st)
	}
}
