package job

import (
	"fmt"
	"time"
)

// The IOS agent of every pcmd (internal/pcmd, decisions in package iosbridge) talks to the
// other agents and answers status requests on these subjects. Like the rest of the node
// protocol the messages are msgpack and every receiver validates them.
//
//	mpios.ios.<node>            iosbridge.Message: the RAS protocol (join, announce, heartbeat,
//	                            leave, steal request/accept/fail) addressed to node's agent
//	mpios.node.<node>.ios       request: that node's agent replies with its IOSState
//	mpios.nodes.ios             request: every agent replies with its IOSState
//
// The agents also listen on ProfileSubjectAll for the ranks' profiles and send their
// migration decisions as ControlRequests (Kind ControlMigrate) on the job's ControlSubject.

// IOSInboxSubject carries the protocol messages (iosbridge.Message) for node's IOS agent.
func IOSInboxSubject(node string) string { return "mpios.ios." + node }

// IOSStateSubject: request/reply, the named node's agent answers with its IOSState.
func IOSStateSubject(node string) string { return "mpios.node." + node + ".ios" }

// IOSDiscoverSubject: request; every IOS agent replies with its IOSState.
const IOSDiscoverSubject = "mpios.nodes.ios"

// Limits on IOSState, so that a bad reply cannot make pcmd status misbehave.
const (
	MaxIOSEvents   = 256
	MaxIOSProfiles = MaxSlots
	MaxIOSPeers    = 65536
)

// IOSState is what an IOS agent reports about itself: its policy, the resource profile it
// last sampled, the protocol's state, recent decisions and the latest profiles of the ranks
// on its node.
type IOSState struct {
	Node string `msgpack:"node" json:"node"`
	// Policy is the node's own decision policy (pcmd serve --policy); JobPolicies the jobs on
	// this node that chose another one (mpirun --policy), by job id.
	Policy      string            `msgpack:"policy" json:"policy"`
	JobPolicies map[string]string `msgpack:"job_policies,omitempty" json:"job_policies,omitempty"`
	// StealThreshold is the availability at or above which the node steals; Period the
	// resource sampling period.
	StealThreshold float64       `msgpack:"steal_threshold" json:"steal_threshold"`
	Period         time.Duration `msgpack:"period" json:"-"`

	// The last resource sample (SampledAt zero: none yet; SampleError: why the last failed).
	SampledAt     time.Time `msgpack:"sampled_at" json:"sampled_at"`
	CPUs          int       `msgpack:"cpus" json:"cpus"`
	EffectiveCPUs float64   `msgpack:"effective_cpus" json:"effective_cpus"`
	Availability  float64   `msgpack:"availability" json:"availability"`
	MemFreeBytes  uint64    `msgpack:"mem_free" json:"mem_free_bytes"`
	MemTotalBytes uint64    `msgpack:"mem_total" json:"mem_total_bytes"`
	Load1         float64   `msgpack:"load1" json:"load1"`
	SampleError   string    `msgpack:"sample_error,omitempty" json:"sample_error,omitempty"`
	// LoadSource names the counter the availability comes from (the whole machine's
	// /proc/stat, or the node cgroup's usage or throttling counters; see package nodecpu).
	LoadSource string `msgpack:"load_source,omitempty" json:"load_source,omitempty"`

	// Steal is the node's outstanding steal request, if any.
	Steal *IOSSteal `msgpack:"steal,omitempty" json:"steal,omitempty"`
	// Peers are the agents this one exchanges protocol messages with.
	Peers []string `msgpack:"peers" json:"peers"`
	// PeerRTT is the smoothed round trip time of the heartbeats to each peer that answered.
	PeerRTT map[string]time.Duration `msgpack:"peer_rtt,omitempty" json:"peer_rtt_ns,omitempty"`
	// PeerBaseRTT is the least of the last few round trips to each peer, the network's share
	// without the agents' delays, which NRS classifies into latency locales.
	PeerBaseRTT map[string]time.Duration `msgpack:"peer_base_rtt,omitempty" json:"peer_base_rtt_ns,omitempty"`
	// PeerBandwidth is the smoothed bandwidth, in bytes per second, of the bulk transfers
	// (buddy copies of checkpoint pieces) received from each peer that sent one large enough
	// to measure. The agent's heartbeats tell each peer its value, and ATS-RAS and MPI-IOS
	// price a link with what the peer told, else with this, else with MPI-IOS's default
	// 12.5 MB/s.
	PeerBandwidth map[string]float64 `msgpack:"peer_bandwidth,omitempty" json:"peer_bandwidth_bps,omitempty"`
	// Cluster is the node's cluster (pcmd serve --cluster); "" if none.
	Cluster string `msgpack:"cluster,omitempty" json:"cluster,omitempty"`
	// Counters of the protocol and of dropped input.
	Stats IOSStats `msgpack:"stats" json:"stats"`
	// Events are the most recent decisions and their outcomes, oldest first.
	Events []IOSEvent `msgpack:"events" json:"events"`
	// Profiles are the latest profiles of this node's ranks, each the JSON object the rank
	// published (a profiler.RankProfile), oldest rank first.
	Profiles [][]byte `msgpack:"profiles" json:"-"`
	// ProfilesOmitted counts profiles left out to keep the reply within a NATS message.
	ProfilesOmitted int `msgpack:"profiles_omitted,omitempty" json:"profiles_omitted,omitempty"`
}

// IOSSteal is an outstanding steal request: its number and the peer it was sent to.
type IOSSteal struct {
	ID     uint64 `msgpack:"id" json:"id"`
	Target string `msgpack:"target" json:"target"`
}

// IOSStats counts protocol events (iosbridge.Stats) and what the agent dropped.
type IOSStats struct {
	StealsSent        uint64 `msgpack:"steals_sent" json:"steals_sent"`
	StealsAccepted    uint64 `msgpack:"steals_accepted" json:"steals_accepted"`
	StealsFailed      uint64 `msgpack:"steals_failed" json:"steals_failed"`
	StealsTimedOut    uint64 `msgpack:"steals_timed_out" json:"steals_timed_out"`
	RequestsForwarded uint64 `msgpack:"requests_forwarded" json:"requests_forwarded"`
	RequestsFailed    uint64 `msgpack:"requests_failed" json:"requests_failed"`
	RanksGiven        uint64 `msgpack:"ranks_given" json:"ranks_given"`
	// RanksPushed counts ranks given by Robin-Hood pushes, WideStealsSent CRS's
	// wide-area steals.
	RanksPushed    uint64 `msgpack:"ranks_pushed,omitempty" json:"ranks_pushed,omitempty"`
	WideStealsSent uint64 `msgpack:"wide_steals_sent,omitempty" json:"wide_steals_sent,omitempty"`
	// StealRequestsInCluster and StealRequestsAcross count the steal requests the agent
	// sent (its own and forwarded ones) to a node of its own cluster and of another one
	// (pcmd serve --cluster on both).
	StealRequestsInCluster uint64 `msgpack:"steal_requests_in_cluster,omitempty" json:"steal_requests_in_cluster,omitempty"`
	StealRequestsAcross    uint64 `msgpack:"steal_requests_across,omitempty" json:"steal_requests_across,omitempty"`
	// Exchanges between busy nodes (iosbridge exchange.go): requests this node sent while
	// busy, ranks it sent as the offered half of a swap or pair swap, forwarded requests it
	// added a relay to, ranks it sent as a relay, rotations it decided as the third node,
	// answers it refused (late or mismatched: nothing moved) and promises it released
	// (cancelled or expired).
	ExchangesSent      uint64 `msgpack:"exchanges_sent,omitempty" json:"exchanges_sent,omitempty"`
	RanksSwapped       uint64 `msgpack:"ranks_swapped,omitempty" json:"ranks_swapped,omitempty"`
	RelaysOffered      uint64 `msgpack:"relays_offered,omitempty" json:"relays_offered,omitempty"`
	RanksRelayed       uint64 `msgpack:"ranks_relayed,omitempty" json:"ranks_relayed,omitempty"`
	RotationsDecided   uint64 `msgpack:"rotations_decided,omitempty" json:"rotations_decided,omitempty"`
	ExchangesRefused   uint64 `msgpack:"exchanges_refused,omitempty" json:"exchanges_refused,omitempty"`
	ExchangesCancelled uint64 `msgpack:"exchanges_cancelled,omitempty" json:"exchanges_cancelled,omitempty"`
	// MigrationsOK and MigrationsFailed count the ControlRequests the jobs accepted and
	// refused (or left unanswered).
	MigrationsOK     uint64 `msgpack:"migrations_ok" json:"migrations_ok"`
	MigrationsFailed uint64 `msgpack:"migrations_failed" json:"migrations_failed"`
	// BadMessages counts protocol messages dropped as malformed or misaddressed,
	// BadProfiles profiles dropped as malformed or invalid.
	BadMessages uint64 `msgpack:"bad_messages" json:"bad_messages"`
	BadProfiles uint64 `msgpack:"bad_profiles" json:"bad_profiles"`
}

// Kinds of IOSEvent.
const (
	IOSGive          = "give"           // this node's policy gave Rank to Peer (a steal request's origin)
	IOSDecline       = "decline"        // this node's policy kept its ranks for Peer's steal request
	IOSStolen        = "stolen"         // Peer accepted this node's steal request: Rank comes here
	IOSStealFailed   = "steal-failed"   // this node's steal request failed (Reason says why)
	IOSMigrateOK     = "migrate-ok"     // the job accepted the ControlRequest for Rank
	IOSMigrateFailed = "migrate-failed" // the job refused it or did not answer: Rank stays
	IOSResizeOK      = "resize-ok"      // the job accepted a hierarchical manager's resize (grow or rebalance)
	IOSResizeFailed  = "resize-failed"  // the job refused it or did not answer
)

// IOSEvent is one decision of an agent or its outcome.
type IOSEvent struct {
	At     time.Time `msgpack:"at" json:"at"`
	Kind   string    `msgpack:"kind" json:"kind"`
	Job    string    `msgpack:"job,omitempty" json:"job,omitempty"`
	Rank   int       `msgpack:"rank" json:"rank"` // -1 when no rank is concerned
	Peer   string    `msgpack:"peer,omitempty" json:"peer,omitempty"`
	Policy string    `msgpack:"policy,omitempty" json:"policy,omitempty"`
	Gain   float64   `msgpack:"gain,omitempty" json:"gain,omitempty"`
	Reason string    `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// Validate checks an IOSState received from the network.
func (s IOSState) Validate() error {
	if err := ValidateNode(s.Node); err != nil {
		return err
	}
	switch {
	case len(s.Events) > MaxIOSEvents:
		return fmt.Errorf("job: ios state of %s: %d events, want at most %d", s.Node, len(s.Events), MaxIOSEvents)
	case len(s.Profiles) > MaxIOSProfiles:
		return fmt.Errorf("job: ios state of %s: %d profiles, want at most %d", s.Node, len(s.Profiles), MaxIOSProfiles)
	case len(s.Peers) > MaxIOSPeers || len(s.PeerRTT) > MaxIOSPeers || len(s.PeerBaseRTT) > MaxIOSPeers || len(s.PeerBandwidth) > MaxIOSPeers || len(s.JobPolicies) > MaxIOSProfiles:
		return fmt.Errorf("job: ios state of %s: %d peers, %d job policies", s.Node, len(s.Peers), len(s.JobPolicies))
	case !(s.Availability >= 0 && s.Availability <= 1) || !(s.EffectiveCPUs >= 0) || s.CPUs < 0:
		return fmt.Errorf("job: ios state of %s: availability %v of %v CPUs", s.Node, s.Availability, s.EffectiveCPUs)
	}
	for p, bw := range s.PeerBandwidth {
		if !(bw > 0 && bw <= MaxPeerBandwidth) {
			return fmt.Errorf("job: ios state of %s: bandwidth %v B/s from %.64q, want in (0, %g]", s.Node, bw, p, MaxPeerBandwidth)
		}
	}
	return nil
}

// MaxPeerBandwidth bounds IOSState.PeerBandwidth (bytes per second): above any NIC, as the
// agents' own bound (iosbridge.MaxBandwidthBps).
const MaxPeerBandwidth = 100e9
