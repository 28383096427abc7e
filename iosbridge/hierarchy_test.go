package iosbridge

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Thesis Table 2.4: 10 GB over a Sun (0.8 GHz, 3 actors), an AIX (1.7 GHz, 5 actors) and an
// Opteron (2.2 GHz, 8 actors) processor, b = 0, a = 2.
func TestTable24DataDistributionReproducedExactly(t *testing.T) {
	powers := []float64{
		ProcessingPower([]Processor{{GHz: 0.8, Available: 1}}),
		ProcessingPower([]Processor{{GHz: 1.7, Available: 1}}),
		ProcessingPower([]Processor{{GHz: 2.2, Available: 1}}),
	}
	actors := []int{3, 5, 8}
	norm, data, err := DistributeData(powers, 10, LinearCost{A: 2, B: 0})
	if err != nil {
		t.Fatal(err)
	}
	var gotNorm, gotData, gotPer []string
	for i := range powers {
		gotNorm = append(gotNorm, fmt.Sprintf("%.2f", norm[i]))
		gotData = append(gotData, fmt.Sprintf("%.1fGB", data[i]))
		gotPer = append(gotPer, fmt.Sprintf("%.2fGB", data[i]/float64(actors[i])))
	}
	for _, c := range []struct{ row, got, want string }{
		{"pa_i'", strings.Join(gotNorm, " "), "0.17 0.36 0.47"},
		{"Data Assignment", strings.Join(gotData, " "), "1.7GB 3.6GB 4.7GB"},
		{"Data per Actor", strings.Join(gotPer, " "), "0.57GB 0.72GB 0.59GB"},
	} {
		if c.got != c.want {
			t.Errorf("Table 2.4 row %q: got %s, want %s", c.row, c.got, c.want)
		}
	}
}

// Eq. 2.6: with a start-up cost every subordinate's f(d_i)/p'_i is the same, and eq. 2.7
// holds: the data adds up.
func TestEquation215EqualizesIterationTimeWithStartupCost(t *testing.T) {
	f := LinearCost{A: 3, B: 5}
	norm, data, err := DistributeData([]float64{1, 2, 4.5}, 100, f)
	if err != nil {
		t.Fatal(err)
	}
	y0 := (f.A*data[0] + f.B) / norm[0]
	sum := 0.0
	for i := range data {
		approx(t, fmt.Sprintf("f(d_%d)/p'_%d", i, i), (f.A*data[i]+f.B)/norm[i], y0)
		sum += data[i]
	}
	approx(t, "sum of d_i", sum, 100)
	// Eq. 2.8: a start-up cost too big for a slow subordinate is refused, not planned.
	if _, _, err := DistributeData([]float64{0.01, 10}, 1, LinearCost{A: 1, B: 10}); err == nil {
		t.Fatal("negative data share accepted")
	}
}

func TestGranularityFitsTheFastestCacheWithinMaxEntities(t *testing.T) {
	caches := []float64{64 << 10, 1 << 20} // L1 64 KB, L2 1 MB
	// 8 MB with M=2: L1 would need 64 entities (> 16), L2 needs 4: use L2.
	g, e, lvl := Granularity(8<<20, caches, 2, 16)
	if g != 2<<20 || e != 4 || lvl != 1 {
		t.Fatalf("g=%v e=%d level=%d", g, e, lvl)
	}
	// Too much data for any cache within 16 entities: d/max_e.
	if g, e, lvl = Granularity(1<<30, caches, 2, 16); g != (1<<30)/16 || e != 16 || lvl != 2 {
		t.Fatalf("g=%v e=%d level=%d", g, e, lvl)
	}
	// Eq. 2.10: never fewer than one entity.
	if _, e, _ = Granularity(1000, caches, 2, 16); e != 1 {
		t.Fatalf("e=%d", e)
	}
}

func hsub(name string, power, data float64, it time.Duration, ranks ...int) Subordinate {
	return Subordinate{Name: name, Power: power, Data: data, Ranks: ids("heat", ranks...), IterationTime: it}
}

func TestManagerActsOnlyWhenIterationTimesDiverge(t *testing.T) {
	c := HierarchyConfig{MaxEntities: 4}
	even := []Subordinate{hsub("a", 2, 50, time.Second, 0, 1), hsub("b", 2, 50, 1100*time.Millisecond, 2, 3)}
	d, err := c.Plan("heat", LevelNode, even, false)
	if err != nil || !d.Empty() {
		t.Fatalf("within threshold: %+v %v", d, err)
	}
	// b lost half its CPU: its iterations take twice as long; a gets 2/3 of the data.
	slow := []Subordinate{hsub("a", 2, 50, time.Second, 0, 1), hsub("b", 1, 50, 2*time.Second, 2, 3)}
	d, err = c.Plan("heat", LevelNode, slow, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Rebalance == nil {
		t.Fatalf("want a rebalance: %+v", d)
	}
	// Without cache sizes the memory hierarchy does not matter (M = ∞): one rank per node
	// (eq. 2.9–2.10), so the job also shrinks from 4 ranks to 2.
	if d.Resize == nil || d.Resize.Ranks != 2 {
		t.Fatalf("want a resize to 2 ranks: %+v", d.Resize)
	}
	approx(t, "a's fraction", d.Rebalance.Fractions["a"], 2.0/3)
	if d.Manager != "a" {
		t.Fatalf("manager %s, want the most powerful", d.Manager)
	}
}

func TestIdleJoinerGetsRanksByResizeAndUnavailableNodeLosesThem(t *testing.T) {
	c := HierarchyConfig{MaxEntities: 2}
	subs := []Subordinate{hsub("a", 1, 60, time.Second, 0, 1), hsub("b", 1, 40, time.Second, 2, 3), hsub("new", 1, 0, 0)}
	d, err := c.Plan("heat", LevelNode, subs, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Resize == nil || d.Resize.Ranks != 3 || d.Resize.PerNode["new"] != 1 {
		t.Fatalf("joiner: %+v", d)
	}
	// Same rank count, one node gone: its ranks migrate, no resize.
	c.MaxEntities = 1
	subs = []Subordinate{hsub("a", 1, 50, time.Second, 0), hsub("b", 0, 25, time.Second, 1), hsub("c", 1, 25, time.Second)}
	subs[2].Ranks = nil
	d, err = c.Plan("heat", LevelNode, subs, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Resize == nil && (len(d.Migrations) != 1 || d.Migrations[0].To != "c") {
		t.Fatalf("unavailable node: %+v", d)
	}
}

func TestMinimumDataAndCacheRestrictions(t *testing.T) {
	subs := []Subordinate{hsub("a", 1, 10, time.Second, 0), hsub("b", 3, 10, 3*time.Second, 1)}
	d, err := HierarchyConfig{MaxEntities: 8, MinEntityData: 6, CacheMultiple: 1}.Plan("heat", LevelNode, append(subs[:0:0], subs...), false)
	if err == nil && !d.Empty() {
		for _, s := range d.Shares {
			if s.DataPerRank < 6 {
				t.Fatalf("plan below minimum data: %+v", d)
			}
		}
	}
	// A newcomer with a much smaller cache would run its ranks from a slower level.
	big := []float64{1 << 20, 8 << 20}
	subs = []Subordinate{
		{Name: "a", Power: 1, Data: 4 << 20, Ranks: ids("heat", 0, 1, 2, 3), IterationTime: time.Second, CacheBytes: big},
		{Name: "tiny", Power: 1, CacheBytes: []float64{1 << 10}},
	}
	d, err = HierarchyConfig{MaxEntities: 4, CacheMultiple: 1}.Plan("heat", LevelNode, subs, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Reason, "splitting to tiny disabled") || d.Shares[1].Ranks != 0 {
		t.Fatalf("cache restriction: %+v", d)
	}
}

func TestGridManagerSeesClustersAsIndividuals(t *testing.T) {
	c1 := []Subordinate{hsub("c1n0", 2, 25, time.Second, 0), hsub("c1n1", 2, 25, time.Second, 1)}
	c2 := []Subordinate{hsub("c2n0", 1, 25, 2*time.Second, 2), hsub("c2n1", 1, 25, 2*time.Second, 3)}
	grid := []Subordinate{Aggregate("c1", c1), Aggregate("c2", c2)}
	d, err := HierarchyConfig{}.Plan("heat", LevelGrid, grid, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Rebalance == nil {
		t.Fatalf("grid: %+v", d)
	}
	approx(t, "c1's fraction", d.Rebalance.Fractions["c1"], 4.0/6)
	if d.Shares[0].Ranks+d.Shares[1].Ranks != 4 {
		t.Fatalf("grid level keeps the rank count: %+v", d.Shares)
	}
}

// Above the node level the rank count is kept: three equal clusters share 10 ranks 4/3/3,
// so the grid manager asks for migrations and a rebalance, never a resize.
func TestGridLevelKeepsTheRankCount(t *testing.T) {
	grid := []Subordinate{
		hsub("c1", 1, 70, 3*time.Second, 0, 1, 2, 3, 4, 5, 6),
		hsub("c2", 1, 20, time.Second, 7, 8),
		hsub("c3", 1, 10, time.Second, 9),
	}
	d, err := HierarchyConfig{}.Plan("heat", LevelGrid, grid, false)
	if err != nil {
		t.Fatal(err)
	}
	got := []int{d.Shares[0].Ranks, d.Shares[1].Ranks, d.Shares[2].Ranks}
	if d.Resize != nil || fmt.Sprint(got) != "[4 3 3]" || len(d.Migrations) != 3 || d.Rebalance == nil {
		t.Fatalf("ranks %v, decision %+v", got, d)
	}
	for _, m := range d.Migrations {
		if m.Rank.Rank < 4 || m.To == "c1" {
			t.Fatalf("migration %+v: the highest ranks of c1 should leave it", m)
		}
	}
}
