package iosbridge

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// RankID names one MPI process across the cluster. Ranks are only unique within a job,
// so every decision and message carries both.
type RankID struct {
	// Job is the job id (internal/job), Rank the MPI world rank within it.
	Job  string `msgpack:"job"`
	Rank int    `msgpack:"rank"`
}

// String renders the id as "job/rank" for logs and decision explanations.
func (r RankID) String() string { return fmt.Sprintf("%s/%d", r.Job, r.Rank) }

// NodeProfile is the resource-level profile of one IOS node (MPI/IOS §"ios architecture":
// "available cpu power, memory ... measured and recorded periodically"). It is what a stealer
// puts into its StealRequest (thesis §2.2.1: the request carries "a snapshot of the local
// profiling information") and what the receiving decision component compares itself against.
type NodeProfile struct {
	// Node is the IOS node's name; also its address on the peer network.
	Node string `msgpack:"node"`
	// CPUs is the number of online logical CPUs the kernel reports.
	CPUs int `msgpack:"cpus"`
	// EffectiveCPUs is CPUs clipped by the cgroup CPU quota: the capacity this node may use.
	EffectiveCPUs float64 `msgpack:"effective_cpus"`
	// Availability is the idle fraction (0..1) of EffectiveCPUs; the thesis' "available
	// computational power" that drives S-RAS and the steal trigger.
	Availability float64 `msgpack:"availability"`
	// MemFreeBytes is memory available to new processes (MemAvailable), MemTotalBytes the total.
	MemFreeBytes  uint64 `msgpack:"mem_free"`
	MemTotalBytes uint64 `msgpack:"mem_total"`
	// Load1 is the one-minute load average, kept for operators; no policy depends on it.
	Load1 float64 `msgpack:"load1"`
	// LoadSource names the counter Availability was measured with (nodecpu.Source: the
	// whole machine's /proc/stat, a cgroup's usage or throttling counters), for status pages.
	LoadSource string `msgpack:"load_source,omitempty"`
	// Speed is the speed of one of its cores relative to a reference core (Bustos' rank and
	// the IO paper's processing power weigh CPUs by it); 0 means unknown, taken as 1.
	Speed float64 `msgpack:"speed,omitempty"`
	// Cluster names the node's cluster (pcmd serve --cluster): Satin's cluster-aware
	// stealing (PolicyCRS) tells local from wide-area steals by it. "" is a cluster too.
	Cluster string `msgpack:"cluster,omitempty"`
	// Ranks lists the ranks hosted here. A stealer's list lets the giver compute how much a
	// rank talks to the stealer (S(A,R) in eq. 2.3, c_f in table 2.2).
	Ranks []RankID `msgpack:"ranks"`
	// Slots is how many ranks the node may host (pcmd serve --slots); 0: no limit known. A
	// node whose Ranks fill its slots gets no rank by a single move: its pcmd would refuse it.
	Slots int `msgpack:"slots,omitempty"`
	// Leaving counts ranks this node gave away that are not in Ranks but still hold a slot
	// here: a migrating rank's process runs until its successor took over, and pcmd counts
	// it in its slots until then.
	Leaving int `msgpack:"leaving,omitempty"`
	// SampledAt is when the sampler produced the numbers (injected clock, not wall time).
	SampledAt time.Time `msgpack:"sampled_at"`
}

// full reports whether the node's ranks fill its slots (never, when Slots is unknown).
func (p NodeProfile) full() bool { return !p.roomFor(1) }

// roomFor reports whether the node has k free slots (always, when Slots is unknown).
func (p NodeProfile) roomFor(k int) bool {
	return p.Slots <= 0 || len(p.Ranks)+p.Leaving+k <= p.Slots
}

// FreeCPUs is the absolute spare capacity, EffectiveCPUs × Availability. Absolute numbers
// make heterogeneous nodes comparable (a 50% idle 16-core node beats an idle 2-core one).
func (p NodeProfile) FreeCPUs() float64 {
	return p.EffectiveCPUs * p.Availability
}

// speed is Speed, or 1 when unknown.
func (p NodeProfile) speed() float64 {
	if p.Speed > 0 {
		return p.Speed
	}
	return 1
}

// Hosts reports whether r is in p.Ranks.
func (p NodeProfile) Hosts(r RankID) bool {
	for _, x := range p.Ranks {
		if x == r {
			return true
		}
	}
	return false
}

// Validate rejects profiles that cannot come from a sane sampler; profiles arrive from the
// network, and NaN or negative capacities would poison every gain computed from them.
func (p NodeProfile) Validate() error {
	switch {
	case p.Node == "":
		return fmt.Errorf("iosbridge: node profile: empty node name")
	case p.CPUs < 0:
		return fmt.Errorf("iosbridge: node profile %s: negative CPU count %d", p.Node, p.CPUs)
	case !finite(p.EffectiveCPUs) || p.EffectiveCPUs < 0:
		return fmt.Errorf("iosbridge: node profile %s: effective CPUs %v out of range", p.Node, p.EffectiveCPUs)
	case !finite(p.Availability) || p.Availability < 0 || p.Availability > 1:
		return fmt.Errorf("iosbridge: node profile %s: availability %v not in [0,1]", p.Node, p.Availability)
	case p.MemFreeBytes > p.MemTotalBytes && p.MemTotalBytes != 0:
		return fmt.Errorf("iosbridge: node profile %s: free memory %d exceeds total %d", p.Node, p.MemFreeBytes, p.MemTotalBytes)
	case !finite(p.Load1) || p.Load1 < 0:
		return fmt.Errorf("iosbridge: node profile %s: load %v out of range", p.Node, p.Load1)
	case !finite(p.Speed) || p.Speed < 0:
		return fmt.Errorf("iosbridge: node profile %s: speed %v out of range", p.Node, p.Speed)
	case p.Slots < 0:
		return fmt.Errorf("iosbridge: node profile %s: negative slot count %d", p.Node, p.Slots)
	case p.Leaving < 0 || p.Leaving > 1<<20: // no node hosts that many; keeps roomFor's sum from overflowing
		return fmt.Errorf("iosbridge: node profile %s: leaving ranks %d out of range", p.Node, p.Leaving)
	case len(p.Cluster) > MaxClusterName:
		return fmt.Errorf("iosbridge: node profile %s: cluster name of %d bytes (at most %d)", p.Node, len(p.Cluster), MaxClusterName)
	}
	for _, r := range p.Ranks {
		if r.Job == "" || r.Rank < 0 {
			return fmt.Errorf("iosbridge: node profile %s: bad rank %q", p.Node, r)
		}
	}
	return nil
}

// PeerComm is what one rank sent to one peer rank of the same job since the profile was
// last reset: the edge weight of the "weighted communication subgraph" the MPI/IOS PMPI
// profiling library reports.
type PeerComm struct {
	// Rank is the peer's world rank in the same job; Bytes and Messages what was sent to it.
	Rank     int   `msgpack:"rank"`
	Bytes    int64 `msgpack:"bytes"`
	Messages int64 `msgpack:"messages"`
}

// RankProfile is the application-level profile of one rank (MPI/IOS "application entity
// profiles: processing, communication, data accesses, memory usage"), fed by the PMPI
// interposition library through pcmd. Counters cover the window since the last reset, so
// rates are counter/Window (the thesis' T(A)).
type RankProfile struct {
	// Job and Rank identify the rank; Node is where it ran when profiled.
	Job  string `msgpack:"job"`
	Rank int    `msgpack:"rank"`
	Node string `msgpack:"node"`
	// Iteration is the last completed iteration; IterationTime the current average per
	// iteration on this node; RemainingIterations what is left. Their product is the
	// life expectancy of the MPI/IOS gain.
	Iteration           int64         `msgpack:"iteration"`
	IterationTime       time.Duration `msgpack:"iteration_time"`
	RemainingIterations int64         `msgpack:"remaining_iterations"`
	// StateBytes is the checkpoint size PCM must ship: the migration cost numerator.
	StateBytes int64 `msgpack:"state_bytes"`
	// MemoryBytes is the resident memory; 0 means "use StateBytes".
	MemoryBytes int64 `msgpack:"memory_bytes"`
	// CPUUse is the CPUs this rank consumes here (0.5 = half a core). 0 means unknown; the
	// policies then assume an equal share of the node (see RankProfile.cpuUse).
	CPUUse float64 `msgpack:"cpu_use"`
	// CommTime and CompTime split the window into time in MPI calls and outside them.
	CommTime time.Duration `msgpack:"comm_time"`
	CompTime time.Duration `msgpack:"comp_time"`
	// Window is the time since the profile was last reset: T(A) of eq. 2.2.
	Window time.Duration `msgpack:"window"`
	// MessagesProcessed is P(A) of eq. 2.2: messages received and processed in Window.
	MessagesProcessed int64 `msgpack:"messages_processed"`
	// ComputePerMessage is F(A) of eq. 2.3, the work per processed message, measured as the
	// time computed (outside MPI calls) per message received on the rank's current node:
	// its FLOPs over the node's speed for it. 0 means unknown. The rest of a message's
	// time, Window/MessagesProcessed − ComputePerMessage, is spent in mpi calls: sending,
	// the halos' network time and, in a bulk-synchronous job mostly, waiting for slower
	// ranks. The profile does not split it (that would need clocks shared between nodes);
	// ATS-RAS takes its network share from the round trip the agents measure
	// (ATSRASRemoteEstimate).
	ComputePerMessage time.Duration `msgpack:"compute_per_message"`
	// Peers is the per-peer traffic this rank sent during Window, sorted by Rank.
	Peers []PeerComm `msgpack:"peers"`
	// LastMigration is when this rank last arrived on a node; zero if never moved.
	LastMigration time.Time `msgpack:"last_migration"`
	// Policy is the job's own decision policy (mpirun --policy, MPIOS_POLICY), one of
	// PolicyNames; "" means the node's. Node applies it to this rank instead of the node's
	// policy (see PerRank), so a job started with "none" is never moved.
	Policy string `msgpack:"policy,omitempty"`
}

// ID returns the rank's cluster-wide id.
func (r RankProfile) ID() RankID { return RankID{Job: r.Job, Rank: r.Rank} }

// Validate rejects profiles with impossible values; see NodeProfile.Validate for why.
func (r RankProfile) Validate() error {
	switch {
	case r.Job == "":
		return fmt.Errorf("iosbridge: rank profile: empty job")
	case r.Rank < 0:
		return fmt.Errorf("iosbridge: rank profile %s: negative rank", r.ID())
	case r.IterationTime < 0 || r.RemainingIterations < 0 || r.Iteration < 0:
		return fmt.Errorf("iosbridge: rank profile %s: negative iteration data", r.ID())
	case r.StateBytes < 0 || r.MemoryBytes < 0:
		return fmt.Errorf("iosbridge: rank profile %s: negative size", r.ID())
	case !finite(r.CPUUse) || r.CPUUse < 0:
		return fmt.Errorf("iosbridge: rank profile %s: CPU use %v out of range", r.ID(), r.CPUUse)
	case r.CommTime < 0 || r.CompTime < 0 || r.Window < 0:
		return fmt.Errorf("iosbridge: rank profile %s: negative duration", r.ID())
	case r.MessagesProcessed < 0 || r.ComputePerMessage < 0:
		return fmt.Errorf("iosbridge: rank profile %s: negative message counters", r.ID())
	}
	if r.Policy != "" && !validPolicyName(r.Policy) {
		return fmt.Errorf("iosbridge: rank profile %s: unknown policy %q (valid: %s)", r.ID(), r.Policy, strings.Join(PolicyNames(), ", "))
	}
	for _, pc := range r.Peers {
		if pc.Rank < 0 || pc.Bytes < 0 || pc.Messages < 0 {
			return fmt.Errorf("iosbridge: rank profile %s: bad peer entry %+v", r.ID(), pc)
		}
	}
	return nil
}

// cpuUse is the measured CPUUse or, when unmeasured, the fair share of the node's capacity
// among the ranks it hosts, capped at one core (an MPI rank is single-threaded).
func (r RankProfile) cpuUse(local NodeProfile) float64 {
	if r.CPUUse > 0 {
		return r.CPUUse
	}
	n := len(local.Ranks)
	if n == 0 {
		n = 1
	}
	return math.Min(1, local.EffectiveCPUs/float64(n))
}

// memoryBytes is MemoryBytes, falling back to StateBytes.
func (r RankProfile) memoryBytes() int64 {
	if r.MemoryBytes > 0 {
		return r.MemoryBytes
	}
	return r.StateBytes
}

// commTo sums what r sent to peer ranks of its job hosted on node p: the thesis'
// S(A,t) (messages, eq. 2.3) and c_t(A) (bytes, table 2.2).
func (r RankProfile) commTo(p NodeProfile) (bytes, messages int64) {
	for _, pc := range r.Peers {
		if pc.Rank == r.Rank {
			continue
		}
		if p.Hosts(RankID{Job: r.Job, Rank: pc.Rank}) {
			bytes += pc.Bytes
			messages += pc.Messages
		}
	}
	return bytes, messages
}

// commRate is the bytes per second r sends in total; 0 when Window is unknown.
func (r RankProfile) commRate() float64 {
	if r.Window <= 0 {
		return 0
	}
	var b int64
	for _, pc := range r.Peers {
		b += pc.Bytes
	}
	return float64(b) / r.Window.Seconds()
}

// LinkProfile is the measured network path between two nodes, used to price a migration
// (MPI/IOS: "estimated cost of migration") and as the network resource of the gain.
type LinkProfile struct {
	// From is the measuring node, To the other end.
	From string `msgpack:"from"`
	To   string `msgpack:"to"`
	// BandwidthBps is the smoothed observed throughput in bytes per second.
	BandwidthBps float64 `msgpack:"bandwidth_bps"`
	// Latency is the smoothed observed round-trip latency.
	Latency time.Duration `msgpack:"latency"`
	// Samples counts observations folded in; 0 means no measurement yet.
	Samples int `msgpack:"samples"`
	// MeasuredAt is the (injected) time of the last observation.
	MeasuredAt time.Time `msgpack:"measured_at"`
}

// DefaultLinkAlpha is the EWMA weight of a new bandwidth observation: recent transfers
// matter most but one slow transfer must not make a link look dead.
const DefaultLinkAlpha = 0.3

// Observe folds one transfer of bytes that took d into the bandwidth estimate (EWMA with
// weight alpha; the first sample is taken as is), for a caller that measures transfers (see
// DecisionInput.Link).
func (l *LinkProfile) Observe(bytes int64, d time.Duration, now time.Time, alpha float64) error {
	if bytes <= 0 || d <= 0 {
		return fmt.Errorf("iosbridge: link %s->%s: need positive bytes and duration, got %d in %v", l.From, l.To, bytes, d)
	}
	if !(alpha > 0 && alpha <= 1) {
		return fmt.Errorf("iosbridge: link %s->%s: alpha %v not in (0,1]", l.From, l.To, alpha)
	}
	bw := float64(bytes) / d.Seconds()
	if l.Samples == 0 || l.BandwidthBps <= 0 {
		l.BandwidthBps = bw
	} else {
		l.BandwidthBps = alpha*bw + (1-alpha)*l.BandwidthBps
	}
	l.Samples++
	l.MeasuredAt = now
	return nil
}

// Validate rejects nonsensical link measurements.
func (l LinkProfile) Validate() error {
	switch {
	case l.From == "" || l.To == "":
		return fmt.Errorf("iosbridge: link profile: empty endpoint")
	case !finite(l.BandwidthBps) || l.BandwidthBps < 0:
		return fmt.Errorf("iosbridge: link %s->%s: bandwidth %v out of range", l.From, l.To, l.BandwidthBps)
	case l.Latency < 0 || l.Samples < 0:
		return fmt.Errorf("iosbridge: link %s->%s: negative latency or sample count", l.From, l.To)
	}
	return nil
}

// MaxClusterName bounds a cluster name received from the network.
const MaxClusterName = 128

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
