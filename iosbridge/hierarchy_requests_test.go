package iosbridge

import (
	"math"
	"testing"
	"time"
)

func planCluster(t *testing.T, subs []Subordinate) MalleabilityDecision {
	t.Helper()
	d, err := HierarchyConfig{}.Plan("heat", LevelCluster, subs, false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// §2.2.2.1: "when a node joins, the manager splits data to it" — for a malleable job, by
// growing the job onto the joined node: one rank per free CPU there, the new size the old
// plus those, in one resize request.
func TestJoinedNodeWithFreeSlotsGrowsAMalleableJob(t *testing.T) {
	subs := []Subordinate{hsub("a", 2, 4, time.Second, 0, 1, 2, 3), hsub("b", 2, 0, 0)}
	d := planCluster(t, subs)
	reqs := HierarchyConfig{}.ClusterRequests(d, subs, JobShape{Size: 4, Malleable: true, FreeSlots: map[string]int{"b": 2}})
	if len(reqs) != 1 || reqs[0].Kind != RequestGrow || reqs[0].NP != 6 || len(reqs[0].On) != 1 ||
		reqs[0].On[0] != (NodeRanks{Node: "b", Ranks: 2}) {
		t.Fatalf("requests %+v", reqs)
	}
	// No free slot on the joined node: the ranks above a's share move there instead.
	reqs = HierarchyConfig{}.ClusterRequests(d, subs, JobShape{Size: 4, Malleable: true})
	if len(reqs) != 1 || reqs[0].Kind != RequestMigrate || reqs[0].To != "b" || len(reqs[0].Ranks) != 2 {
		t.Fatalf("no free slot: %+v", reqs)
	}
}

// A job that cannot split its data (not malleable) keeps its rank count: the joined node
// gets ranks by migration, one request per target node.
func TestJoinedNodeGetsMigrationsOfARigidJob(t *testing.T) {
	subs := []Subordinate{hsub("a", 2, 4, time.Second, 0, 1, 2, 3), hsub("b", 2, 0, 0)}
	reqs := HierarchyConfig{}.ClusterRequests(planCluster(t, subs), subs, JobShape{Size: 4, FreeSlots: map[string]int{"b": 4}})
	if len(reqs) != 1 || reqs[0].Kind != RequestMigrate || reqs[0].To != "b" || len(reqs[0].Ranks) != 2 || reqs[0].Ranks[0] != 2 {
		t.Fatalf("requests %+v", reqs)
	}
}

// Eq. 2.15 with b = 0: each node's data is in proportion to its processing power. When the
// iteration times diverge on nodes that all host ranks, a malleable job's ranks are weighed
// by their node's share (split evenly among its ranks); weights already that close leave
// the job alone.
func TestDivergedIterationTimesRebalanceAMalleableJobByPower(t *testing.T) {
	subs := []Subordinate{hsub("a", 3, 2, time.Second, 0, 1), hsub("b", 1, 2, 3*time.Second, 2, 3)}
	d := planCluster(t, subs)
	reqs := HierarchyConfig{}.ClusterRequests(d, subs, JobShape{Size: 4, Malleable: true})
	if len(reqs) != 1 || reqs[0].Kind != RequestRebalance || reqs[0].NP != 4 || len(reqs[0].Weights) != 4 {
		t.Fatalf("requests %+v", reqs)
	}
	// a holds 3/4 of the data over 2 ranks, b 1/4: in units of an equal share 1.5 and 0.5.
	for r, w := range []float64{1.5, 1.5, 0.5, 0.5} {
		if math.Abs(reqs[0].Weights[r]-w) > 1e-9 {
			t.Fatalf("weights %v", reqs[0].Weights)
		}
	}
	// The job already holds those weights (within the threshold): nothing.
	if reqs := (HierarchyConfig{}).ClusterRequests(d, subs, JobShape{Size: 4, Malleable: true, Weights: []float64{3, 3, 1.05, 1}}); len(reqs) != 0 {
		t.Fatalf("weights in place: %+v", reqs)
	}
	// A rigid job has no weights to change: its ranks move instead, 3 to a and 1 to b.
	if reqs := (HierarchyConfig{}).ClusterRequests(d, subs, JobShape{Size: 4}); len(reqs) != 1 || reqs[0].Kind != RequestMigrate ||
		reqs[0].To != "a" || len(reqs[0].Ranks) != 1 || reqs[0].Ranks[0] != 3 {
		t.Fatalf("rigid job: %+v", reqs)
	}
}

// §2.2.2.1: a node hosting ranks "became unavailable": its ranks must leave it, which
// weights cannot do; even a malleable job gets migrations.
func TestUnavailableNodeLosesItsRanksByMigrationEvenWhenMalleable(t *testing.T) {
	subs := []Subordinate{hsub("a", 2, 2, time.Second, 0, 1), hsub("b", 0, 2, time.Second, 2, 3)}
	reqs := HierarchyConfig{}.ClusterRequests(planCluster(t, subs), subs, JobShape{Size: 4, Malleable: true})
	if len(reqs) != 1 || reqs[0].Kind != RequestMigrate || reqs[0].To != "a" || len(reqs[0].Ranks) != 2 {
		t.Fatalf("requests %+v", reqs)
	}
}

// Iteration times within the divergence threshold: the manager asks for nothing.
func TestConvergedIterationTimesAskForNothing(t *testing.T) {
	subs := []Subordinate{hsub("a", 2, 2, time.Second, 0, 1), hsub("b", 2, 2, 1100*time.Millisecond, 2, 3)}
	if reqs := (HierarchyConfig{}).ClusterRequests(planCluster(t, subs), subs, JobShape{Size: 4, Malleable: true, FreeSlots: map[string]int{"a": 2}}); len(reqs) != 0 {
		t.Fatalf("requests %+v", reqs)
	}
}
