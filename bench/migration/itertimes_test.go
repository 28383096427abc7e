package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// synthRuns makes reps repetitions of n iterations: iteration i takes base(i) plus cost(i),
// plus a spike of 20 ms in the repetitions spike(r, i) says.
func synthRuns(reps, n int, base, cost func(i int) float64, spike func(r, i int) bool) [][]float64 {
	runs := make([][]float64, reps)
	for r := range runs {
		runs[r] = make([]float64, n)
		for i := 1; i <= n; i++ {
			runs[r][i-1] = base(i) + cost(i)
			if spike(r, i) {
				runs[r][i-1] += 20e-3
			}
		}
	}
	return runs
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// A constant cost at the iterations after each checkpoint is recovered exactly (per
// checkpoint, per iteration of its window, and as the loop's overhead) by the per-iteration
// minima, although random spikes hit every iteration in all repetitions but one; and by the
// per-iteration medians when spikes hit fewer than half of the repetitions of an iteration.
// Nothing is counted outside the windows.
func TestCheckpointCostRecoversConstantCostDespiteSpikes(t *testing.T) {
	const n, every, window, reps = 200, 50, 10, 5
	base := func(i int) float64 { return 3e-3 + 2e-4*math.Sin(float64(i)) }
	profile := []float64{4e-3, 3e-3, 2e-3, 0.5e-3} // iterations k, k+1, k+2, k+3 of a checkpoint at k
	cost := func(i int) float64 {
		if i >= every && i%every < len(profile) {
			return profile[i%every]
		}
		return 0
	}
	none := func(int) float64 { return 0 }
	var perCkpt, sumBase, sumCost float64
	for _, p := range profile {
		perCkpt += p
	}
	for i := 1; i <= n; i++ {
		sumBase += base(i)
		sumCost += cost(i)
	}
	// Checkpoints at 50, 100, 150 cost the whole profile; the one at 200 only its first
	// iteration, the last of the loop.
	if want := 3*perCkpt + profile[0]; !near(sumCost, want) {
		t.Fatalf("synthetic data: cost %g, want %g", sumCost, want)
	}
	wantOverhead := sumCost / sumBase

	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name  string
		stat  func([]float64) float64
		spike func(r, i int) bool
	}{
		// Each iteration is clean in one repetition only (chosen per iteration), spiked at
		// random in the others.
		{"minima", minOf, func(r, i int) bool { return r != i%reps && rng.IntN(3) > 0 }},
		// At most two of the five repetitions of an iteration are spiked.
		{"medians", median, func(r, i int) bool { return (r == i%reps || r == (i+2)%reps) && rng.IntN(2) == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := synthRuns(reps, n, base, none, tc.spike)
			b := synthRuns(reps, n, base, cost, tc.spike)
			c, err := checkpointCost(a, b, every, window, tc.stat)
			if err != nil {
				t.Fatal(err)
			}
			if !near(c.overhead, wantOverhead) {
				t.Errorf("overhead %g, want %g", c.overhead, wantOverhead)
			}
			if c.ckpts != 3 || !near(c.perCkpt, perCkpt) {
				t.Errorf("%d checkpoints of %g s each, want 3 of %g s", c.ckpts, c.perCkpt, perCkpt)
			}
			for o, got := range c.profile {
				want := 0.0
				if o < len(profile) {
					want = profile[o]
				}
				if !near(got, want) {
					t.Errorf("iteration %d of the window: %g s, want %g", o, got, want)
				}
			}
			if !near(c.windows, wantOverhead) {
				t.Errorf("windows' share %g, want all of the overhead, %g", c.windows, wantOverhead)
			}
			if math.Abs(c.outside) > 1e-12 {
				t.Errorf("outside the windows: %g s, want 0", c.outside)
			}
		})
	}

	// The whole-loop figures of the same data are off by the spikes: what the estimator is for.
	rng = rand.New(rand.NewPCG(1, 2))
	a := synthRuns(reps, n, base, none, cases[0].spike)
	b := synthRuns(reps, n, base, cost, cases[0].spike)
	loop := func(runs [][]float64) []float64 {
		var out []float64
		for _, r := range runs {
			s := 0.0
			for _, x := range r {
				s += x
			}
			out = append(out, s)
		}
		return out
	}
	if got := median(loop(b))/median(loop(a)) - 1; near(got, wantOverhead) {
		t.Errorf("whole-loop medians recover the overhead (%g) too: the spikes are not spikes", got)
	}
	// The same cost as a share of a real run: the baseline's median loop carries its spikes,
	// so the share is smaller than the overhead on the loop of minima.
	c, err := checkpointCost(a, b, every, window, minOf)
	if err != nil {
		t.Fatal(err)
	}
	if want := sumCost / median(loop(a)); !near(c.excess, sumCost) || !near(c.ofRun, want) || c.ofRun >= c.overhead {
		t.Errorf("excess %g s, of a run %g: want %g s and %g, below the overhead on minima %g", c.excess, c.ofRun, sumCost, want, c.overhead)
	}
}

// A cost spread beyond the window is reported outside it, not lost; a wider window than the
// interval is cut to the interval.
func TestCheckpointCostOutsideAndWindowCap(t *testing.T) {
	a := [][]float64{{1, 1, 1, 1, 1, 1, 1, 1}}
	b := [][]float64{{1, 1, 1, 3, 2, 1, 1, 1.5}}
	// Checkpoints at 4 and 8; a window of 1 counts iteration 4 (and 8, cut off at the end).
	c, err := checkpointCost(a, b, 4, 1, minOf)
	if err != nil {
		t.Fatal(err)
	}
	if c.ckpts != 2 || !near(c.perCkpt, 1.25) || !near(c.outside, 1) || !near(c.overhead, 3.5/8) || !near(c.windows, 2.5/8) {
		t.Errorf("got %+v, want 2 checkpoints of 1.25, 1 outside, overhead 3.5/8 of which 2.5/8 in the windows", c)
	}
	c, err = checkpointCost(a, b, 4, 9, minOf)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.profile) != 4 || c.ckpts != 1 || !near(c.perCkpt, 3) || !near(c.outside, 0) {
		t.Errorf("window 9 with checkpoints every 4: got %+v, want the window cut to 4, 1 checkpoint of 3", c)
	}
}

func TestCheckpointCostRejectsMismatchedRuns(t *testing.T) {
	for name, ab := range map[string][2][][]float64{
		"no baseline":          {nil, {{1}}},
		"ragged repetitions":   {{{1, 2}, {1}}, {{1, 2}}},
		"different iterations": {{{1, 2}}, {{1, 2, 3}}},
	} {
		if _, err := checkpointCost(ab[0], ab[1], 1, 1, minOf); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := checkpointCost([][]float64{{1}}, [][]float64{{1}}, 0, 1, minOf); err == nil {
		t.Error("every 0: no error")
	}
}

func TestReadIterTimes(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "t")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := readIterTimes(write("1 0.003000000\n2 0.004500000\n"), 2)
	if err != nil || len(got) != 2 || got[0] != 0.003 || got[1] != 0.0045 {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"1 0.1\n", "1 0.1\n3 0.1\n", "1 0.1\n2 x\n", "1 0.1\n2 0.1\n3 0.1\n", "junk\n"} {
		if _, err := readIterTimes(write(bad), 2); err == nil {
			t.Errorf("%q: no error", strings.TrimSpace(bad))
		}
	}
}
