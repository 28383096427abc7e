// Package iossim runs the deployed IOS agent code — iosbridge.Node with its stability guard
// and policies, exactly as pcmd's agent driver runs it — on a simulated grid under virtual
// time. The grid is a model: nodes with a capacity and a background load, ranks (actors)
// with work per iteration and per-iteration messages to peer ranks, links whose latency and
// bandwidth depend on whether two nodes share a cluster (the NRS "latency locales" of the IO
// paper), and migrations that take latency + state / bandwidth during which the rank does
// no work. Everything the agents see is what pcmd would feed them (Update with a node and
// rank profiles, Tick on a timer, Step per message); everything they ask for (messages,
// migrations) is carried out by the model.
//
// A run is a pure function of its Config: one goroutine, one event queue ordered by
// (virtual time, sequence number), and per-node random sources derived from Config.Seed.
package iossim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mpios/mpios/iosbridge"
)

// NodeSpec is one simulated node.
type NodeSpec struct {
	// ID names the node on the peer network (required, unique).
	ID string
	// CPUs is the node's capacity in cores (EffectiveCPUs of its profile); must be > 0.
	CPUs float64
	// Speed scales the work a core does per second (1 = the reference core; 0 means 1): the
	// thesis's clusters differ in clock rate (0.8 to 2.2 GHz).
	Speed float64
	// Cluster is the node's locale: links inside a cluster use LinkModel's local numbers.
	Cluster string
	// Background is the CPUs other programs use on the node at the start.
	Background float64
	// JoinAt delays the node's start (a node joining a running grid); 0 = at the start.
	JoinAt time.Duration
}

// Edge is one peer a rank sends a message to every iteration.
type Edge struct {
	// Rank is the peer's rank in the same job; Bytes the message size.
	Rank  int
	Bytes int64
}

// RankSpec is one simulated rank (an actor of the thesis's benchmarks).
type RankSpec struct {
	// Job and Rank identify it; Node is where it starts.
	Job  string
	Rank int
	Node string
	// Work is the CPU-seconds of one iteration on a reference core.
	Work float64
	// StateBytes is what a migration ships.
	StateBytes int64
	// Peers receive one message from this rank per iteration (the application topology).
	Peers []Edge
	// Policy is the job's own policy (RankProfile.Policy); "" follows the node's.
	Policy string
}

// LinkModel prices a message or a migration between two nodes: latency plus size over
// bandwidth, with one pair of numbers inside a cluster and one between clusters. Ranks on
// the same node talk in SameNode time (shared memory).
type LinkModel struct {
	SameNode                      time.Duration
	LocalLatency, WideLatency     time.Duration
	LocalBandwidth, WideBandwidth float64 // bytes per second
}

// DefaultLinks is a cluster LAN (100 µs, 1 GB/s) and a wide-area link (20 ms, 10 MB/s), the
// orders of magnitude of the thesis's testbeds.
func DefaultLinks() LinkModel {
	return LinkModel{
		SameNode:     time.Microsecond,
		LocalLatency: 100 * time.Microsecond, WideLatency: 20 * time.Millisecond,
		LocalBandwidth: 1e9, WideBandwidth: 1e7,
	}
}

// LoadChange sets a node's background load at virtual time At.
type LoadChange struct {
	At         time.Duration
	Node       string
	Background float64
}

// Config is one simulation. Zero values take the documented defaults.
type Config struct {
	// Seed derives every random source of the run.
	Seed uint64
	// Policy is the nodes' policy name (iosbridge.PolicyByName).
	Policy string
	// Tuned, if set, replaces the named policy's default configuration (the thesis tunes
	// FLC-RAS's cutoffs per application); its Name() is reported.
	Tuned iosbridge.Policy
	// Agent is the template of every node's iosbridge.Config: ID, Policy and Rand are set
	// per node; the rest (thresholds, timeouts, stability) is used as given.
	Agent iosbridge.Config
	Nodes []NodeSpec
	Ranks []RankSpec
	// Links: zero means DefaultLinks().
	Links LinkModel
	Loads []LoadChange
	// Duration is the virtual time simulated (required); with QuietStop, the most.
	Duration time.Duration
	// QuietStop, if positive, ends the run at the first sample after no migration has been
	// ordered or landed for QuietStop of virtual time (none in flight): a run that
	// measures the placement once the agents have settled need not simulate the idle rest.
	QuietStop time.Duration
	// OnSample, if set, is called with every sample as it is taken (progress of long runs).
	OnSample func(Sample)
	// TickPeriod is the agents' timer (default 500ms, as in pcmd); SamplePeriod the
	// profiling period and the throughput sampling (default 1s).
	TickPeriod, SamplePeriod time.Duration
	// Degree is how many earlier nodes each node joins through (default 3): a sparse
	// overlay, as peer servers give, rather than pcmd's full heartbeat table, which at
	// 10,000 nodes would mean 10^8 heartbeats per interval.
	Degree int
	// Sync makes every job bulk-synchronous (an MPI iteration waits for its slowest rank):
	// a job's rate is the minimum of its ranks' rates. Otherwise ranks are independent
	// actors and throughput is the sum of their rates (the thesis's benchmarks).
	Sync bool
	// Lockstep makes every rank wait for its neighbours each iteration (a Jacobi worker
	// needs its neighbours' halos): its rate is the smallest of its own and its
	// neighbours' (one hop, not the whole job as with Sync).
	Lockstep bool
}

func (c *Config) defaults() error {
	if c.Links == (LinkModel{}) {
		c.Links = DefaultLinks()
	}
	if c.TickPeriod == 0 {
		c.TickPeriod = 500 * time.Millisecond
	}
	if c.SamplePeriod == 0 {
		c.SamplePeriod = time.Second
	}
	if c.Degree == 0 {
		c.Degree = 3
	}
	switch {
	case c.Duration <= 0:
		return errors.New("iossim: config needs a positive Duration")
	case c.TickPeriod < 0 || c.SamplePeriod < 0 || c.Degree < 0 || c.QuietStop < 0:
		return errors.New("iossim: negative period, degree or QuietStop")
	case len(c.Nodes) == 0:
		return errors.New("iossim: config has no nodes")
	case c.Links.LocalBandwidth <= 0 || c.Links.WideBandwidth <= 0:
		return fmt.Errorf("iossim: link bandwidths must be positive: %+v", c.Links)
	}
	if c.Tuned != nil {
		c.Policy = c.Tuned.Name()
	}
	if _, err := iosbridge.PolicyByName(c.Policy); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if n.ID == "" || seen[n.ID] {
			return fmt.Errorf("iossim: node %q: empty or duplicate ID", n.ID)
		}
		if !(n.CPUs > 0) || n.Speed < 0 || n.Background < 0 || n.JoinAt < 0 || math.IsInf(n.CPUs, 0) {
			return fmt.Errorf("iossim: node %s: CPUs must be positive and finite, speed, background and join time non-negative", n.ID)
		}
		seen[n.ID] = true
	}
	ranks := map[iosbridge.RankID]bool{}
	for _, r := range c.Ranks {
		id := iosbridge.RankID{Job: r.Job, Rank: r.Rank}
		if r.Job == "" || r.Rank < 0 || ranks[id] {
			return fmt.Errorf("iossim: rank %s: empty job, negative or duplicate rank", id)
		}
		if !seen[r.Node] {
			return fmt.Errorf("iossim: rank %s starts on unknown node %q", id, r.Node)
		}
		if !(r.Work > 0) || r.StateBytes < 0 {
			return fmt.Errorf("iossim: rank %s: work must be positive, state non-negative", id)
		}
		ranks[id] = true
	}
	for _, r := range c.Ranks {
		for _, e := range r.Peers {
			if !ranks[iosbridge.RankID{Job: r.Job, Rank: e.Rank}] || e.Bytes < 0 {
				return fmt.Errorf("iossim: rank %s/%d: edge to unknown rank %d or negative size", r.Job, r.Rank, e.Rank)
			}
		}
	}
	for _, l := range c.Loads {
		if !seen[l.Node] || l.Background < 0 || l.At < 0 {
			return fmt.Errorf("iossim: load change %+v: unknown node or negative value", l)
		}
	}
	return nil
}
