package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Checkpoint cost from the duration of single iterations (heat2d -iter-times): a few
// milliseconds per checkpoint are about 4% of a loop whose whole-loop time swings by 10% from
// run to run on a shared machine. Sporadic noise (another process taking a core) hits
// different iterations in different repetitions; a checkpoint's cost hits the same iterations
// (its boundary and the next few) in every repetition. Reducing each iteration's times over
// the repetitions with the minimum (or the median) removes the first and keeps the second.
//
// What it removes also shrinks the loop: the sum of per-iteration minima is a run that never
// happened, faster than every real one (at P=4 on 2 cores, 391 ms against a median run of
// 1038 ms over 11 repetitions, about 200 ms over 21), and it shrinks as repetitions are added.
// The cost found is therefore also given as a share of a real run: the excess over the
// baseline's median loop (ckptCost.ofRun), which does not depend on the number of repetitions.
// With minima it is still a lower bound: each checkpoint is taken at its cheapest repetition.

// ckptCost is what the checkpoints of variant b cost over variant a, estimated from the
// per-iteration times of repeated runs of both.
type ckptCost struct {
	// overhead is sum_i stat_b(i) / sum_i stat_a(i) - 1, where stat_x(i) is iteration i's
	// time reduced over the repetitions of x.
	overhead float64
	// perCkpt is the excess, seconds, of a checkpoint's window (its iteration and the next
	// window-1) over the same iterations of a, averaged over the checkpoints whose window
	// lies inside the loop.
	perCkpt float64
	// profile[o] is the excess, seconds, of the o-th iteration of the window, averaged like
	// perCkpt.
	profile []float64
	// ckpts is the number of checkpoints averaged (whole windows inside the loop).
	ckpts int
	// windows is the excess of all windows' iterations (the last one's too, if cut off by
	// the end of the loop) as a fraction of the baseline's loop: the part of overhead that
	// the checkpoints' iterations account for.
	windows float64
	// outside is the excess, seconds, of all iterations in no window, summed: what the
	// variant costs away from its checkpoints (0 if the windows hold all of the cost).
	outside float64
	// excess is sum_i stat_b(i) - sum_i stat_a(i), seconds: what the variant costs a run.
	excess float64
	// ofRun is excess over the median, over a's repetitions, of a's whole loop (the sum of a
	// repetition's iterations): the cost as a share of a run as it actually goes.
	ofRun float64
	// baseLoop is that median of a's whole loop, seconds.
	baseLoop float64
}

// iterStat reduces every iteration's times over the repetitions: runs[r][i] is iteration
// i+1 of repetition r; the result's i-th element is stat of the runs' i-th elements.
func iterStat(runs [][]float64, stat func([]float64) float64) ([]float64, error) {
	if len(runs) == 0 {
		return nil, errors.New("no repetition")
	}
	n := len(runs[0])
	out := make([]float64, n)
	col := make([]float64, len(runs))
	for i := range n {
		for r, run := range runs {
			if len(run) != n {
				return nil, fmt.Errorf("repetition %d has %d iterations, repetition 1 has %d", r+1, len(run), n)
			}
			col[r] = run[i]
		}
		out[i] = stat(col)
	}
	return out, nil
}

// checkpointCost estimates what checkpoints every `every` iterations (at iterations every,
// 2*every, …) cost runs b over runs a (runs[r][i]: iteration i+1 of repetition r, seconds),
// each iteration's times reduced over the repetitions with stat. window (at most every)
// iterations from each checkpoint's on are counted as that checkpoint's cost.
func checkpointCost(a, b [][]float64, every, window int, stat func([]float64) float64) (ckptCost, error) {
	if every < 1 || window < 1 {
		return ckptCost{}, fmt.Errorf("checkpoint every %d iterations, window %d: both must be >= 1", every, window)
	}
	window = min(window, every)
	sa, err := iterStat(a, stat)
	if err != nil {
		return ckptCost{}, fmt.Errorf("baseline: %w", err)
	}
	sb, err := iterStat(b, stat)
	if err != nil {
		return ckptCost{}, fmt.Errorf("with checkpoints: %w", err)
	}
	if len(sa) != len(sb) || len(sa) == 0 {
		return ckptCost{}, fmt.Errorf("%d iterations with checkpoints, %d in the baseline", len(sb), len(sa))
	}
	n := len(sa)
	c := ckptCost{profile: make([]float64, window)}
	var sumA, sumB float64
	for i := range n {
		sumA += sa[i]
		sumB += sb[i]
	}
	c.overhead = sumB/sumA - 1
	c.excess = sumB - sumA
	loops := make([]float64, len(a))
	for r, run := range a {
		for _, d := range run {
			loops[r] += d
		}
	}
	c.baseLoop = median(loops)
	c.ofRun = c.excess / c.baseLoop
	inWindow := make([]bool, n)
	for k := every; k <= n; k += every {
		full := k+window-1 <= n
		if full {
			c.ckpts++
		}
		for o := 0; o < window && k+o <= n; o++ {
			i := k + o - 1 // iteration k+o
			inWindow[i] = true
			if full {
				c.profile[o] += sb[i] - sa[i]
			}
		}
	}
	for o := range c.profile {
		if c.ckpts > 0 {
			c.profile[o] /= float64(c.ckpts)
		}
		c.perCkpt += c.profile[o]
	}
	for i := range n {
		if inWindow[i] {
			c.windows += sb[i] - sa[i]
		} else {
			c.outside += sb[i] - sa[i]
		}
	}
	c.windows /= sumA
	return c, nil
}

// readIterTimes reads a heat2d -iter-times file of a run of iterations 1 … iters: the
// duration of iteration i+1 in seconds is the result's i-th element.
func readIterTimes(path string, iters int) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]float64, 0, iters)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		it, sec, ok := strings.Cut(line, " ")
		i, ierr := strconv.Atoi(it)
		d, derr := strconv.ParseFloat(sec, 64)
		if !ok || ierr != nil || derr != nil || d < 0 {
			return nil, fmt.Errorf("%s line %d: %q is not \"ITERATION SECONDS\"", path, len(out)+1, line)
		}
		if i != len(out)+1 {
			return nil, fmt.Errorf("%s line %d: iteration %d, want %d", path, len(out)+1, i, len(out)+1)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) != iters {
		return nil, fmt.Errorf("%s: %d iterations, want %d", path, len(out), iters)
	}
	return out, nil
}
