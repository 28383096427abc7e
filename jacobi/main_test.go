package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/internal/testbin"
)

// seqJacobi is the plain sequential reference on the full matrix, with the
// same summation orders as the distributed solver. It returns the final x,
// the iteration count and the last max change.
func seqJacobi(n, maxIters int, tol float64) (x []float64, iters int, change float64) {
	a := make([][]float64, n)
	b := make([]float64, n)
	for i := range n {
		a[i] = make([]float64, n)
		s := 0.0
		for j := range n {
			if j != i {
				a[i][j] = 1.0 / float64(1+max(i-j, j-i))
				s += a[i][j]
			}
		}
		a[i][i] = 1 + s
		b[i] = float64(1 + i%7)
	}
	x = make([]float64, n)
	next := make([]float64, n)
	for iters < maxIters {
		change = 0
		for i := range n {
			s := 0.0
			for j := range n {
				if j != i {
					s += a[i][j] * x[j]
				}
			}
			next[i] = (b[i] - s) / a[i][i]
			change = math.Max(change, math.Abs(next[i]-x[i]))
		}
		x, next = next, x
		iters++
		if change < tol {
			break
		}
	}
	return x, iters, change
}

// TestSweepDecomposed runs the row-block update in-process for several
// block counts and checks it is bitwise identical to the reference.
func TestSweepDecomposed(t *testing.T) {
	const n, iters = 37, 25
	want, _, _ := seqJacobi(n, iters, 0)
	for p := 1; p <= 5; p++ {
		x := make([]float64, n)
		next := make([]float64, n)
		for range iters {
			for r := range p {
				start, count := solverkit.BlockRange(n, p, r)
				a, b := buildRows(start, count, n)
				sweep(next[start:start+count], a, b, x, start)
			}
			x, next = next, x
		}
		for i := range want {
			if math.Float64bits(x[i]) != math.Float64bits(want[i]) {
				t.Fatalf("p=%d: x[%d] = %v, want %v", p, i, x[i], want[i])
			}
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-n", "9", "-maxiters", "3", "-tol", "0.5", "-dump", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg != (config{n: 9, maxIters: 3, tol: 0.5, dump: "x"}) {
		t.Fatalf("got %+v", cfg)
	}
	for _, bad := range [][]string{{"-n", "0"}, {"-maxiters", "-1"}, {"-tol", "NaN"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// TestMPIRun runs the real binary through mpirun on 1..4 ranks and checks
// the dumped x is bitwise identical for every rank count and to the
// sequential reference, and that the printed lines agree.
func TestMPIRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and launches mpirun")
	}
	// n odd so n%p != 0; tol chosen so the run stops on tolerance before
	// maxiters, exercising the convergence test.
	const n, maxIters, tol = 101, 200, 1e-9
	dir := t.TempDir()
	mpirun := filepath.Join(dir, "mpirun")
	bin := filepath.Join(dir, "jacobi")
	testbin.Build(t, mpirun, "./cmd/mpirun")
	testbin.Build(t, bin, "./jacobi")

	want, wantIters, wantChange := seqJacobi(n, maxIters, tol)
	if wantIters >= maxIters {
		t.Fatalf("reference did not converge in %d iterations; adjust the test", maxIters)
	}
	sum := 0.0
	for _, v := range want {
		sum += v
	}
	wantLines := map[string]string{
		"iterations": fmt.Sprint(wantIters),
		"maxchange":  fmt.Sprintf("%.3e", wantChange),
		"checksum":   fmt.Sprintf("%.10e", sum),
	}

	for p := 1; p <= 4; p++ {
		t.Run(fmt.Sprintf("np%d", p), func(t *testing.T) {
			dump := filepath.Join(dir, fmt.Sprintf("x%d.bin", p))
			// --timeout lets mpirun tear the ranks down itself before it is killed.
			out, stderr, err := testbin.Run(2*time.Minute, nil, mpirun, "-np", fmt.Sprint(p), "--timeout", "90s", bin,
				"-n", fmt.Sprint(n), "-maxiters", fmt.Sprint(maxIters), "-tol", fmt.Sprint(tol), "-dump", dump)
			if err != nil {
				t.Fatalf("mpirun -np %d: %v\nstdout:\n%s\nstderr:\n%s", p, err, out, stderr)
			}
			for key, w := range wantLines {
				if got := testbin.OutputValue(t, out, key); got != w {
					t.Errorf("%s %s, want %s", key, got, w)
				}
			}
			testbin.OutputValue(t, out, "sec_per_iter")
			testbin.CheckBitwise(t, testbin.ReadFloats(t, dump), want, func(i int) string { return fmt.Sprintf("x[%d]", i) })
		})
	}
}

func BenchmarkSweep(b *testing.B) {
	const n = 2048
	a, rhs := buildRows(0, n, n)
	x := make([]float64, n)
	xloc := make([]float64, n)
	for b.Loop() {
		sweep(xloc, a, rhs, x, 0)
	}
}

// TestCheckpointRestartMPIRun runs jacobi on 4 ranks with checkpoints every 5
// iterations and a rank dying a few iterations before convergence, restarts
// it from that job's checkpoint (mpirun --restart) under a new job id on 4, 3
// and 6 ranks (pcm
// splits x's checkpointed rows over the new number), and checks that every
// restarted job converges at the same iteration to a bitwise identical x.
func TestCheckpointRestartMPIRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and launches mpirun")
	}
	const n, maxIters, tol = 101, 200, 1e-9
	want, wantIters, wantChange := seqJacobi(n, maxIters, tol)
	crashAfter := wantIters - 3
	lastCkpt := crashAfter / 5 * 5
	if wantIters >= maxIters || lastCkpt < 5 {
		t.Fatalf("reference converged after %d iterations; adjust the test", wantIters)
	}
	dir := t.TempDir()
	mpirun := filepath.Join(dir, "mpirun")
	bin := filepath.Join(dir, "jacobi")
	testbin.Build(t, mpirun, "./cmd/mpirun")
	testbin.Build(t, bin, "./jacobi")
	ckpt := filepath.Join(dir, "ckpt")
	// Synchronous checkpoints, so that the newest is surely committed before the crash.
	env := []string{"MPIOS_CKPT_EVERY=5", "MPIOS_CKPT_SYNC=1", "MPIOS_CKPT_DIR=" + ckpt}
	rt := filepath.Join(dir, "run")

	job := func(np int, env []string, id string, args ...string) (stdout, stderr string, err error) {
		all := []string{"-np", fmt.Sprint(np), "--timeout", "50s", "--job-id", id, "--no-recover"}
		if id != "first" {
			all = append(all, "--restart", "first")
		}
		all = append(all, bin,
			"-n", fmt.Sprint(n), "-maxiters", fmt.Sprint(maxIters), "-tol", fmt.Sprint(tol))
		return testbin.Run(time.Minute, env, mpirun, append(all, args...)...)
	}
	out, stderr, err := job(4, testbin.IsolatedEnv(rt, env...), "first", "-crash-after", fmt.Sprint(crashAfter))
	if ms := testbin.Crashed(t, err, out, stderr, ckpt, "first"); len(ms) == 0 || ms[0].Iteration != int64(lastCkpt) {
		t.Fatalf("checkpoints of the crashed job: %+v, want the newest at iteration %d\n%s%s", ms, lastCkpt, out, stderr)
	}
	for _, np := range []int{4, 3, 6} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			dump := filepath.Join(dir, fmt.Sprintf("x%d.bin", np))
			id := fmt.Sprint("np", np)
			out, stderr, err := job(np, testbin.IsolatedEnv(rt, env...), id, "-dump", dump)
			if err != nil {
				t.Fatalf("restarted run: %v\n%s%s", err, out, stderr)
			}
			if msg := fmt.Sprintf("restarts from job first checkpoint %d (iteration %d)", lastCkpt/5, lastCkpt); !strings.Contains(stderr, msg) {
				t.Errorf("stderr does not say %q:\n%s", msg, stderr)
			}
			if got := testbin.OutputValue(t, out, "iterations"); got != fmt.Sprint(wantIters) {
				t.Errorf("iterations %s, want %d", got, wantIters)
			}
			if got := testbin.OutputValue(t, out, "maxchange"); got != fmt.Sprintf("%.3e", wantChange) {
				t.Errorf("maxchange %s, want %.3e", got, wantChange)
			}
			testbin.CheckBitwise(t, testbin.ReadFloats(t, dump), want, func(i int) string { return fmt.Sprintf("x[%d]", i) })
		})
	}
}
