package iosbridge

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// This file turns a cluster manager's MalleabilityDecision into the control requests a job
// understands (pcmd serve --hierarchical): grow the job onto joined nodes, rebalance its
// data by weights, or move its ranks. Pure: the agent driver gathers JobShape and sends.

// JobShape is what a manager knows of a job beyond its nodes' power and ranks: from the
// job's launcher (job.JobInfo) and the nodes' profiles.
type JobShape struct {
	// Size is the job's number of ranks.
	Size int
	// Malleable says the ranks keep distributed data (pcm.NewBlock): the job may grow and
	// its data may be rebalanced by weights.
	Malleable bool
	// Weights are the ranks' current block weights (those of the last committed resize of
	// this size); nil means equal shares.
	Weights []float64
	// FreeSlots are the ranks each node can take now: its free slots (pcmd serve --slots,
	// which defaults to the CPUs, minus the ranks it runs), one rank each (see ClusterRequests).
	FreeSlots map[string]int
}

// ClusterRequestKind names what a ClusterRequest asks of the job.
type ClusterRequestKind string

// The requests a cluster manager sends.
const (
	// RequestGrow is a resize to NP ranks with the new ones on On (pcmd resize --on).
	RequestGrow ClusterRequestKind = "grow"
	// RequestRebalance is a resize to the same NP with Weights (pcmd resize --weights).
	RequestRebalance ClusterRequestKind = "rebalance"
	// RequestMigrate moves Ranks to node To (pcmd migrate).
	RequestMigrate ClusterRequestKind = "migrate"
)

// NodeRanks is a number of ranks on a node.
type NodeRanks struct {
	Node  string
	Ranks int
}

// ClusterRequest is one control request of a cluster manager to a job.
type ClusterRequest struct {
	Kind ClusterRequestKind
	// NP, On: a grow's new size and where its new ranks start; NP, Weights: a rebalance.
	NP      int
	On      []NodeRanks
	Weights []float64
	// Ranks, To: a migration.
	Ranks  []int
	To     string
	Reason string
}

// DefaultWeightThreshold is HierarchyConfig.WeightThreshold's zero value.
const DefaultWeightThreshold = 0.1

// ClusterRequests is what the cluster manager of d sends job j (§2.2.2: "the decisions
// become resize, rebalance and migrate requests"), given the subordinates d was planned
// over:
//
//   - a malleable job grows onto the available nodes that host none of its ranks and have
//     free slots (one request, NP = Size + the new ranks). The number of ranks per node is
//     eq. 2.9–2.10's granularity, which needs the nodes' cache sizes; the agents do not
//     measure them, so it is one rank per free slot (a slot is a CPU: the node's processors,
//     each its own entity, as eq. 2.10 gives with M = ∞ per processor);
//   - a malleable job whose ranks all run on available nodes, all of which host some, is
//     rebalanced in place when a rank's share of the data by eq. 2.15 (its node's share,
//     split evenly among the node's ranks) differs from its current weight by more than
//     WeightThreshold of it;
//   - otherwise the plan's migrations, one request per target node.
//
// Nothing when d asks for nothing.
func (c HierarchyConfig) ClusterRequests(d MalleabilityDecision, subs []Subordinate, j JobShape) []ClusterRequest {
	if len(d.Shares) != len(subs) || j.Size <= 0 {
		return nil
	}
	if j.Malleable {
		if r, ok := growRequest(d, subs, j); ok {
			return []ClusterRequest{r}
		}
		if r, ok, placed := c.rebalanceRequest(d, subs, j); placed {
			if ok {
				return []ClusterRequest{r}
			}
			return nil
		}
	}
	return migrateRequests(d)
}

// growRequest grows a malleable job onto its idle available nodes with free slots.
func growRequest(d MalleabilityDecision, subs []Subordinate, j JobShape) (ClusterRequest, bool) {
	r := ClusterRequest{Kind: RequestGrow, NP: j.Size}
	var names []string
	for i, s := range subs {
		k := j.FreeSlots[s.Name]
		if s.Power <= 0 || len(s.Ranks) > 0 || k <= 0 || d.Shares[i].Data <= 0 {
			continue
		}
		r.On = append(r.On, NodeRanks{Node: s.Name, Ranks: k})
		r.NP += k
		names = append(names, fmt.Sprintf("%s:%d", s.Name, k))
	}
	if len(r.On) == 0 {
		return r, false
	}
	r.Reason = fmt.Sprintf("%s; grow %d -> %d onto %s (one rank per free slot)", d.Reason, j.Size, r.NP, strings.Join(names, ","))
	return r, true
}

// rebalanceRequest weighs a malleable job's ranks by their nodes' shares. placed is false
// when the ranks' placement must change first (a node without ranks or an unavailable one
// with ranks, or ranks the manager cannot place): then migrations apply.
func (c HierarchyConfig) rebalanceRequest(d MalleabilityDecision, subs []Subordinate, j JobShape) (r ClusterRequest, ok, placed bool) {
	threshold := c.WeightThreshold
	if threshold <= 0 {
		threshold = DefaultWeightThreshold
	}
	var total float64
	for i, s := range subs {
		if (s.Power > 0) != (len(s.Ranks) > 0) {
			return r, false, false
		}
		if len(s.Ranks) > 0 {
			total += d.Shares[i].Data
		}
	}
	if !(total > 0) {
		return r, false, false
	}
	want := make([]float64, j.Size)
	seen := 0
	for i, s := range subs {
		for _, rk := range s.Ranks {
			if rk.Rank < 0 || rk.Rank >= j.Size || want[rk.Rank] != 0 {
				return r, false, false
			}
			want[rk.Rank] = d.Shares[i].Data / total / float64(len(s.Ranks))
			seen++
		}
	}
	if seen != j.Size {
		return r, false, false
	}
	cur := j.Weights
	if len(cur) != j.Size {
		cur = slices.Repeat([]float64{1}, j.Size)
	}
	var sum float64
	for _, w := range cur {
		sum += w
	}
	worst, at := 0.0, 0
	for rk, w := range want {
		have := cur[rk] / sum
		if diff := math.Abs(w-have) / have; diff > worst {
			worst, at = diff, rk
		}
	}
	if worst <= threshold {
		return r, false, true
	}
	// Weights in units of an equal share, rounded: readable in logs and in pcmd status.
	for rk := range want {
		want[rk] = math.Round(want[rk]*float64(j.Size)*1e4) / 1e4
		if want[rk] <= 0 {
			want[rk] = 1e-4
		}
	}
	return ClusterRequest{Kind: RequestRebalance, NP: j.Size, Weights: want,
		Reason: fmt.Sprintf("%s; rebalance: rank %d's share differs from its weight by %.0f%%", d.Reason, at, 100*worst)}, true, true
}

// migrateRequests groups the plan's migrations by target node, in the plan's order.
func migrateRequests(d MalleabilityDecision) []ClusterRequest {
	var out []ClusterRequest
	idx := map[string]int{}
	for _, m := range d.Migrations {
		i, ok := idx[m.To]
		if !ok {
			i = len(out)
			idx[m.To] = i
			out = append(out, ClusterRequest{Kind: RequestMigrate, To: m.To, Reason: d.Reason})
		}
		out[i].Ranks = append(out[i].Ranks, m.Rank.Rank)
	}
	return out
}
