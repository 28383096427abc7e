package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/ctlauth"
)

// iosDiscoverSubject is where every pcmd IOS agent answers with its state (job.IOSState,
// msgpack, signed by its node). The state is decoded loosely, by field name, so the experiment keeps working
// (and reports "no agents") whatever the agents' version.
const iosDiscoverSubject = "mpios.nodes.ios"

// agentState is what the report shows of an IOS agent.
type agentState struct {
	Node          string           `json:"node"`
	Policy        string           `json:"policy"`
	Availability  float64          `json:"availability"`
	EffectiveCPUs float64          `json:"effective_cpus"`
	Stats         map[string]int64 `json:"stats"`
	Events        []string         `json:"events"` // the last few, oldest first
	// PeerRTT is the smoothed round trip of the agent's heartbeats to each peer, which
	// NRS classifies into latency locales.
	PeerRTT map[string]time.Duration `json:"peer_rtt,omitempty"`
	// PeerBaseRTT is the least of the last few round trips to each peer, which NRS
	// classifies (agents from before it was reported have none).
	PeerBaseRTT map[string]time.Duration `json:"peer_base_rtt,omitempty"`
	// PeerBandwidth is the smoothed bandwidth (bytes per second) of the buddy copies the
	// agent's node received from each peer, which ATS-RAS and MPI-IOS price the link with.
	PeerBandwidth map[string]float64 `json:"peer_bandwidth,omitempty"`
}

// iosSnapshot asks every IOS agent on the server for its state, for up to wait.
func iosSnapshot(url string, wait time.Duration) ([]agentState, error) {
	nc, err := nats.Connect(url, nats.Name("experiment"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(iosDiscoverSubject, inbox, nil); err != nil {
		return nil, err
	}
	var out []agentState
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // timeout: every agent that will answer has
		}
		if st, ok := agentFromReply(msg.Subject, msg.Data); ok {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b agentState) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// agentFromReply reads an agent's reply on subject: signed by its node (an agent's answer in
// clear, or under another node's name, is skipped), its state decoded loosely.
func agentFromReply(subject string, data []byte) (agentState, bool) {
	signed, err := ctlauth.VerifyStatement(subject, data, ctlauth.AnyKey{})
	if err != nil || signed.From.Role != ctlauth.RoleNode {
		return agentState{}, false
	}
	var m map[string]any
	if msgpack.Unmarshal(signed.Body, &m) != nil {
		return agentState{}, false
	}
	st := decodeAgent(m)
	return st, st.Node == signed.From.Node
}

func decodeAgent(m map[string]any) agentState {
	st := agentState{Node: str(m["node"]), Policy: str(m["policy"]), Availability: num(m["availability"]),
		EffectiveCPUs: num(m["effective_cpus"]), Stats: map[string]int64{}}
	if stats, ok := m["stats"].(map[string]any); ok {
		for k, v := range stats {
			st.Stats[k] = int64(num(v))
		}
	}
	ns := func(x float64) time.Duration { return time.Duration(x) }
	st.PeerRTT, st.PeerBaseRTT = perPeer(m["peer_rtt"], ns), perPeer(m["peer_base_rtt"], ns)
	st.PeerBandwidth = perPeer(m["peer_bandwidth"], func(x float64) float64 { return x })
	if evs, ok := m["events"].([]any); ok {
		for _, e := range evs {
			em, ok := e.(map[string]any)
			if !ok {
				continue
			}
			s := str(em["kind"])
			if r, ok := em["rank"]; ok && num(r) >= 0 {
				s += fmt.Sprintf(" rank %v", num(r))
			}
			if p := str(em["peer"]); p != "" {
				s += " peer " + p
			}
			if r := str(em["reason"]); r != "" {
				s += ": " + r
			}
			st.Events = append(st.Events, s)
		}
		if len(st.Events) > 6 {
			st.Events = st.Events[len(st.Events)-6:]
		}
	}
	return st
}

// perPeer decodes a map of peer names to numbers, each converted by conv (nil if v is not one).
func perPeer[T any](v any, conv func(float64) T) map[string]T {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]T, len(m))
	for p, d := range m {
		out[p] = conv(num(d))
	}
	return out
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	case int:
		return float64(x)
	}
	return 0
}
