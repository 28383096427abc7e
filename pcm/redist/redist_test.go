package redist

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// owners expands ranges into the owner of every row.
func owners(rs []Range, total int) []int {
	own := make([]int, total)
	for i := range own {
		own[i] = -1
	}
	for w, r := range rs {
		for k := r.Lo; k < r.Hi; k++ {
			own[k] = w
		}
	}
	return own
}

func randomWeights(rng *rand.Rand, n int) []float64 {
	if rng.IntN(4) == 0 {
		return nil
	}
	w := make([]float64, n)
	for i := range w {
		w[i] = 0.1 + 10*rng.Float64()
	}
	return w
}

// randomRanges gives n workers a block distribution of total rows by random weights, and
// leaves some workers empty (joining or leaving ones).
func randomRanges(t *testing.T, rng *rand.Rand, total, n int) []Range {
	t.Helper()
	active := 1 + rng.IntN(n)
	blocks, err := Blocks(total, randomWeights(rng, active), active)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Range, n)
	// The active workers keep their order among all workers (a grow appends, a shrink
	// removes some): choose which, in increasing order.
	perm := rng.Perm(n)[:active]
	sortInts(perm)
	for k, w := range perm {
		out[w] = blocks[k]
	}
	return out
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestSharesByWeightEq2_5To2_8: the shares sum to the total (eq. 2.7), are positive when
// there are enough rows (eq. 2.8), and are within one row of the weight's quota (eq. 2.6).
func TestSharesByWeightEq2_5To2_8(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(12)
		total := rng.IntN(300)
		w := randomWeights(rng, n)
		s, err := Shares(total, w, n)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Shares(total, w, n)
		sum, wsum := 0, 0.0
		for i := range s {
			if s[i] != again[i] {
				t.Fatalf("not deterministic: %v then %v", s, again)
			}
			sum += s[i]
			if w != nil {
				wsum += w[i]
			}
			if total >= n && s[i] < 1 {
				t.Fatalf("Shares(%d, %v) = %v: worker %d has no row", total, w, s, i)
			}
		}
		if sum != total {
			t.Fatalf("Shares(%d, %v) = %v sums to %d", total, w, s, sum)
		}
		for i := range s {
			q := float64(total) / float64(n)
			if w != nil {
				q = float64(total) * w[i] / wsum
			}
			// Eq. 2.8's minimum of one row can push a share further from its quota.
			if d := float64(s[i]) - q; (d >= 1 || d <= -1) && !(total >= n && s[i] == 1) && !(d < 0 && d > -float64(n)) {
				t.Fatalf("Shares(%d, %v) = %v: share %d is %d, quota %.2f", total, w, s, i, s[i], q)
			}
		}
	}
	if s, _ := Shares(10, nil, 4); fmt.Sprint(s) != "[3 3 2 2]" {
		t.Errorf("equal shares of 10 over 4 = %v, want the block distribution [3 3 2 2]", s)
	}
	if s, _ := Shares(10, []float64{1, 3}, 2); fmt.Sprint(s) != "[3 7]" {
		t.Errorf("Shares(10, 1:3) = %v, want [3 7]", s)
	}
	for _, bad := range [][]float64{{1, 0}, {1, -1}, {1}} {
		if _, err := Shares(10, bad, 2); !errors.Is(err, ErrInvalid) {
			t.Errorf("Shares(10, %v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestAlgorithm2To4SpatiallyDependentRedistribution: for random old and new block
// distributions (grows, shrinks, re-weightings), PlanRanges moves exactly the rows that change
// owner, each straight to its new owner; every worker exchanges only with workers whose
// ranges overlap its own (its neighbours in row order); there are at most n+m-1 transfers;
// and applying the plan gives the desired distribution.
func TestAlgorithm2To4SpatiallyDependentRedistribution(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 3000 {
		n := 1 + rng.IntN(10)
		total := n + rng.IntN(200)
		from, to := randomRanges(t, rng, total, n), randomRanges(t, rng, total, n)
		p, err := PlanRanges(from, to)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		oldOwn, newOwn := owners(from, total), owners(to, total)
		// Apply the plan to the old owners.
		got := append([]int(nil), oldOwn...)
		for _, tr := range p.Transfers {
			if tr.From == tr.To || tr.Rows.Len() != tr.Count || tr.Count == 0 {
				t.Fatalf("trial %d: bad transfer %+v", trial, tr)
			}
			// Only overlapping ranges exchange.
			if from[tr.From].Intersect(to[tr.To]) != tr.Rows {
				t.Fatalf("trial %d: transfer %+v is not the overlap of %v and %v", trial, tr, from[tr.From], to[tr.To])
			}
			for k := tr.Rows.Lo; k < tr.Rows.Hi; k++ {
				if got[k] != tr.From {
					t.Fatalf("trial %d: row %d sent by %d, held by %d", trial, k, tr.From, got[k])
				}
				got[k] = tr.To
			}
		}
		minimum, active := 0, 0
		for k := range total {
			if oldOwn[k] != newOwn[k] {
				minimum++
			}
			if got[k] != newOwn[k] {
				t.Fatalf("trial %d: row %d ends at %d, want %d", trial, k, got[k], newOwn[k])
			}
		}
		if p.Moved != minimum {
			t.Fatalf("trial %d: moved %d rows, %d change owner", trial, p.Moved, minimum)
		}
		for w := range n {
			if !from[w].Empty() {
				active++
			}
			if !to[w].Empty() {
				active++
			}
		}
		if len(p.Transfers) > active-1 && len(p.Transfers) > 0 {
			t.Fatalf("trial %d: %d transfers for %d non-empty ranges", trial, len(p.Transfers), active)
		}
	}
}

// TestAlgorithm2ShiftsBetweenNeighbours: the thesis's heat example, a grow of 4 workers to 6
// and a shrink of 6 to 3: each worker hands rows only to the workers next to it in row order.
func TestAlgorithm2ShiftsBetweenNeighbours(t *testing.T) {
	four, _ := Blocks(120, nil, 4)
	six, _ := Blocks(120, nil, 6)
	grow, err := PlanRanges(append(four, Range{}, Range{}), six)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{0 1 [20,30) 10} {1 2 [40,60) 20} {2 3 [60,80) 20} {2 4 [80,90) 10} {3 4 [90,100) 10} {3 5 [100,120) 20}]"
	if got := fmt.Sprint(grow.Transfers); got != want {
		t.Errorf("4 -> 6: %s\nwant %s", got, want)
	}
	three, _ := Blocks(120, nil, 3)
	shrink, err := PlanRanges(six, append(three, Range{}, Range{}, Range{}))
	if err != nil {
		t.Fatal(err)
	}
	// Worker 0 keeps [0,20) of its new [0,40); workers 1 and 2 keep nothing: 100 rows move.
	if shrink.Moved != 100 || len(shrink.Transfers) != 5 {
		t.Errorf("6 -> 3: %d rows in %d transfers, want 100 in 5: %v", shrink.Moved, len(shrink.Transfers), shrink.Transfers)
	}
}

// TestAlgorithm1SpatiallyIndependentRedistribution: for random current and desired amounts,
// only workers above their desired amount send and only those below receive, the plan moves
// the minimum (the total surplus) in at most shrinkers+expanders-1 messages, and every
// worker ends with its desired amount.
func TestAlgorithm1SpatiallyIndependentRedistribution(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 3000 {
		n := 1 + rng.IntN(10)
		total := rng.IntN(500)
		have, _ := Shares(total, randomWeights(rng, n), n)
		want, _ := Shares(total, randomWeights(rng, n), n)
		if rng.IntN(3) == 0 {
			// A merge: some workers leave.
			k := rng.IntN(n)
			w2, _ := Shares(total, nil, n-k)
			want = append(w2, make([]int, k)...)
		}
		p, err := PlanCounts(have, want)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		got := append([]int(nil), have...)
		shrinkers, expanders, surplus := 0, 0, 0
		for w := range n {
			if have[w] > want[w] {
				shrinkers++
				surplus += have[w] - want[w]
			}
			if have[w] < want[w] {
				expanders++
			}
		}
		for _, tr := range p.Transfers {
			if have[tr.From] <= want[tr.From] || have[tr.To] >= want[tr.To] || tr.Count <= 0 {
				t.Fatalf("trial %d: transfer %+v (have %v, want %v)", trial, tr, have, want)
			}
			got[tr.From] -= tr.Count
			got[tr.To] += tr.Count
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("trial %d: ends with %v, want %v", trial, got, want)
		}
		if p.Moved != surplus {
			t.Fatalf("trial %d: moved %d, surplus %d", trial, p.Moved, surplus)
		}
		if len(p.Transfers) > 0 && len(p.Transfers) > shrinkers+expanders-1 {
			t.Fatalf("trial %d: %d transfers for %d shrinkers and %d expanders", trial, len(p.Transfers), shrinkers, expanders)
		}
	}
}

func TestPlanRangesRejectsBadInput(t *testing.T) {
	for _, c := range []struct{ from, to []Range }{
		{[]Range{{0, 5}}, []Range{{0, 4}}},                 // different totals
		{[]Range{{0, 5}, {4, 9}}, []Range{{0, 9}, {}}},     // overlap
		{[]Range{{0, 5}, {6, 9}}, []Range{{0, 9}, {}}},     // gap
		{[]Range{{0, 5}}, []Range{{0, 5}, {}}},             // lengths differ
		{[]Range{{5, 0}, {0, 5}}, []Range{{0, 5}, {5, 5}}}, // reversed
	} {
		if _, err := PlanRanges(c.from, c.to); !errors.Is(err, ErrInvalid) {
			t.Errorf("PlanRanges(%v, %v) = %v, want ErrInvalid", c.from, c.to, err)
		}
	}
	if _, err := PlanCounts([]int{3, 1}, []int{2, 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("PlanCounts with different totals: %v", err)
	}
}

func ExamplePlanRanges() {
	four, _ := Blocks(12, nil, 4)
	six, _ := Blocks(12, nil, 6)
	// A grow from 4 workers to 6: workers 4 and 5 join with nothing.
	p, _ := PlanRanges(append(four, Range{}, Range{}), six)
	for _, t := range p.Transfers {
		fmt.Printf("%d -> %d rows %v\n", t.From, t.To, t.Rows)
	}
	fmt.Println("moved", p.Moved, "of 12 rows")
	// Output:
	// 0 -> 1 rows [2,3)
	// 1 -> 2 rows [4,6)
	// 2 -> 3 rows [6,8)
	// 2 -> 4 rows [8,9)
	// 3 -> 4 rows [9,10)
	// 3 -> 5 rows [10,12)
	// moved 9 of 12 rows
}
