package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/solverkit"
)

// PCM overhead on heat2d: variants of the same run, alternated.
type variant struct {
	key, name string
	mpirun    []string // options before the program
	app       []string // options after the program's own
	base      string   // the variant this one's overhead is relative to ("" for a baseline)
	limit     float64  // the target on the overhead, percent; 0: none
	// background is a command (program and arguments) that runs beside mpirun, started
	// before it and stopped (SIGTERM) after it; nil: none.
	background []string
	// iterTimes: heat2d records every iteration's duration (-iter-times), for the
	// per-iteration estimate of the checkpoints' cost (checkpointCost).
	iterTimes bool
}

type overheadResult struct {
	np       int
	variants []variant
	spi      map[string][]float64   // variant key -> sec_per_iter of each repetition
	wall     map[string][]float64   // variant key -> mpirun wall seconds
	cpu      map[string][]float64   // variant key -> CPU seconds of mpirun and its ranks
	iters    map[string][][]float64 // variant key -> per repetition, every iteration's seconds (variants with iterTimes)
	commands map[string]string
	failures []string
}

func (b *bench) overheadVariants(ckptDir, memDir string) []variant {
	everyIn := func(dir string) []string {
		return []string{"--ckpt-every", strconv.Itoa(b.ckptEvery), "--ckpt-dir", dir}
	}
	every := everyIn(ckptDir)
	// heat2d's grid starts at zero and heat spreads one row per iteration, so for its first
	// iterations most of the state is zeros, which background checkpoints skip (holes):
	// the dense variants start the interior at 1 so that every block must be written.
	dense := []string{"-" + solverkit.InitFlag, "1"}
	vs := []variant{
		{key: "a", name: "(a) -no-pcm (baseline)", app: []string{"-no-pcm"}},
		{key: "b", name: "(b) default, no checkpoint due", base: "a", limit: 1},
		{key: "c", name: fmt.Sprintf("(c) --ckpt-every %d", b.ckptEvery), mpirun: every, base: "a", limit: 5},
		{key: "d", name: fmt.Sprintf("(d) --ckpt-every %d --ckpt-sync", b.ckptEvery), mpirun: append(slices.Clone(every), "--ckpt-sync"), base: "a"},
		{key: "e", name: "(e) dense state: -no-pcm -init 1 (baseline)", app: append([]string{"-no-pcm"}, dense...)},
		{key: "f", name: fmt.Sprintf("(f) dense state: --ckpt-every %d -init 1", b.ckptEvery), mpirun: every, app: dense, base: "e", limit: 5},
	}
	if memDir != "" {
		// The same checkpoints into a store in memory: what pcm costs apart from the disk.
		vs = append(vs, variant{key: "g", name: fmt.Sprintf("(g) --ckpt-every %d, store in memory (tmpfs): (c) without the disk", b.ckptEvery),
			mpirun: everyIn(memDir), base: "a"})
	}
	return vs
}

// memoryDir returns a new directory on a memory file system (/dev/shm as tmpfs), or "" if
// there is none; the caller removes it.
func memoryDir() string {
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "/dev/shm" && f[2] == "tmpfs" {
			if dir, err := os.MkdirTemp("/dev/shm", "migbench-"); err == nil {
				return dir
			}
		}
	}
	return ""
}

// family names the variants whose results must agree: those with the same initial state.
func (v variant) family() string {
	if slices.Contains(v.app, "-"+solverkit.InitFlag) {
		return "dense"
	}
	return "zero"
}

// runOverhead runs the variants of part "overhead" on np local ranks.
func (b *bench) runOverhead(np int) overheadResult {
	ckptDir := filepath.Join(b.dir, "heat-ckpt")
	memDir := memoryDir()
	if memDir == "" {
		b.logf("no memory file system at /dev/shm: variant (g) left out")
	}
	return b.runVariants(np, b.overheadVariants(ckptDir, memDir), ckptDir, memDir)
}

// diskVariants are part "disk": heat2d without pcm beside a process that writes like
// checkpoints do (bench/migration/diskload), with and without fsync, and overwriting
// preallocated files, against pcm's own checkpoints, and pcm's checkpoints into memory
// beside the same writes.
func (b *bench) diskVariants(ckptDir, memDir string) []variant {
	load := func(extra ...string) []string {
		return append([]string{filepath.Join(b.bin, "diskload"), "-dir", filepath.Join(b.dir, "diskload"),
			"-every", b.diskEvery.String()}, extra...)
	}
	mib := strconv.FormatFloat(b.diskMiB, 'g', -1, 64)
	vs := []variant{
		{key: "a", name: "(a) -no-pcm (baseline)", app: []string{"-no-pcm"}},
		{key: "b", name: fmt.Sprintf("(b) -no-pcm beside %s MiB written and fsynced every %v", mib, b.diskEvery), app: []string{"-no-pcm"}, base: "a",
			background: load("-mib", mib)},
		{key: "c", name: fmt.Sprintf("(c) -no-pcm beside %s MiB written every %v, no fsync", mib, b.diskEvery), app: []string{"-no-pcm"}, base: "a",
			background: load("-mib", mib, "-fsync=false")},
		{key: "d", name: fmt.Sprintf("(d) -no-pcm beside the fsyncs alone (0 MiB) every %v", b.diskEvery), app: []string{"-no-pcm"}, base: "a",
			background: load("-mib", "0")},
		{key: "e", name: fmt.Sprintf("(e) pcm: --ckpt-every %d", b.ckptEvery), mpirun: []string{"--ckpt-every", strconv.Itoa(b.ckptEvery), "--ckpt-dir", ckptDir}, base: "a"},
		{key: "f", name: fmt.Sprintf("(f) -no-pcm beside %s MiB overwritten in place and fdatasynced every %v (no allocation, no rename)", mib, b.diskEvery), app: []string{"-no-pcm"}, base: "a",
			background: load("-mib", mib, "-inplace")},
	}
	if memDir != "" {
		// pcm's checkpoints into memory while another process makes the bytes durable: what
		// a writer that disturbed the ranks no more than a separate process would cost.
		vs = append(vs, variant{key: "g", name: fmt.Sprintf("(g) pcm: --ckpt-every %d into a store in memory (tmpfs), beside %s MiB written and fsynced every %v", b.ckptEvery, mib, b.diskEvery),
			mpirun: []string{"--ckpt-every", strconv.Itoa(b.ckptEvery), "--ckpt-dir", memDir}, base: "a", background: load("-mib", mib)})
	}
	return vs
}

// runDisk runs the variants of part "disk" on np local ranks.
func (b *bench) runDisk(np int) overheadResult {
	ckptDir := filepath.Join(b.dir, "heat-ckpt")
	memDir := memoryDir()
	if memDir == "" {
		b.logf("no memory file system at /dev/shm: disk variant (g) left out")
	}
	return b.runVariants(np, b.diskVariants(ckptDir, memDir), ckptDir, memDir)
}

// runVariants runs heat2d -n N -iters T on np local ranks, reps times per variant, rotating
// which variant goes first. The checkpoint directories ckptDirs ("" for none) are emptied
// before each run and removed at the end.
func (b *bench) runVariants(np int, variants []variant, ckptDirs ...string) overheadResult {
	res := overheadResult{np: np, variants: variants,
		spi: map[string][]float64{}, wall: map[string][]float64{}, cpu: map[string][]float64{}, iters: map[string][][]float64{}, commands: map[string]string{}}
	checksum := map[string]string{}
	for rep := range b.overheadReps {
		for k := range res.variants {
			v := res.variants[(rep+k)%len(res.variants)]
			args := append([]string{"-np", strconv.Itoa(np)}, v.mpirun...)
			args = append(args, filepath.Join(b.bin, "heat2d"), "-n", strconv.Itoa(b.heatN), "-iters", strconv.Itoa(b.heatIters))
			args = append(args, v.app...)
			timesFile := ""
			if v.iterTimes {
				// One file per run: with --keep they all stay for a closer look.
				timesFile = filepath.Join(b.dir, fmt.Sprintf("iter-times-P%d-%s-rep%d", np, v.key, rep+1))
				args = append(args, "-iter-times", timesFile)
			}
			res.commands[v.key] = shellJoin(append([]string{filepath.Join(b.bin, "mpirun")}, args...))
			removeAll(ckptDirs)
			var bg *exec.Cmd
			if v.background != nil {
				bg = exec.Command(v.background[0], v.background[1:]...)
				bg.Stderr = os.Stderr
				if err := bg.Start(); err != nil {
					res.failures = append(res.failures, fmt.Sprintf("P=%d %s: %v", np, v.name, err))
					continue
				}
				res.commands[v.key+" beside"] = shellJoin(v.background)
			}
			cmd := exec.Command(filepath.Join(b.bin, "mpirun"), args...)
			cmd.Env = b.env
			var out, errb buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			t0 := time.Now()
			err := cmd.Run()
			wall := time.Since(t0).Seconds()
			if bg != nil {
				bg.Process.Signal(syscall.SIGTERM)
				if berr := bg.Wait(); berr != nil {
					res.failures = append(res.failures, fmt.Sprintf("P=%d %s rep %d: %s: %v", np, v.name, rep+1, shellJoin(v.background), berr))
				}
			}
			spi, perr := outputFloat(out.String(), "sec_per_iter")
			sum := outputValue(out.String(), "checksum")
			if err != nil || perr != nil || sum == "" {
				res.failures = append(res.failures, fmt.Sprintf("P=%d %s rep %d: %v %v\n$ %s\nstdout:\n%s\nstderr:\n%s",
					np, v.name, rep+1, err, perr, res.commands[v.key], out.String(), errb.String()))
				continue
			}
			if checksum[v.family()] == "" {
				checksum[v.family()] = sum
			} else if sum != checksum[v.family()] {
				res.failures = append(res.failures, fmt.Sprintf("P=%d %s rep %d: checksum %s, other runs %s", np, v.name, rep+1, sum, checksum[v.family()]))
			}
			if strings.Contains(errb.String(), "warning") {
				res.failures = append(res.failures, fmt.Sprintf("P=%d %s rep %d: warnings:\n%s", np, v.name, rep+1, errb.String()))
			}
			if timesFile != "" {
				times, terr := readIterTimes(timesFile, b.heatIters)
				if terr != nil {
					res.failures = append(res.failures, fmt.Sprintf("P=%d %s rep %d: %v", np, v.name, rep+1, terr))
					continue
				}
				res.iters[v.key] = append(res.iters[v.key], times)
			}
			res.spi[v.key] = append(res.spi[v.key], spi)
			res.wall[v.key] = append(res.wall[v.key], wall)
			// wait4's usage of mpirun includes the ranks it waited for.
			cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
			res.cpu[v.key] = append(res.cpu[v.key], cpu)
			b.logf("heat2d P=%d %s rep %d: sec_per_iter %.6e, wall %.2fs, cpu %.2fs", np, v.key, rep+1, spi, wall, cpu)
		}
	}
	removeAll(ckptDirs)
	return res
}

// removeAll removes the directories dirs ("" for none) with what they hold.
func removeAll(dirs []string) {
	for _, d := range dirs {
		if d != "" {
			os.RemoveAll(d)
		}
	}
}

func (b *bench) printOverhead(title string, results []overheadResult) {
	fmt.Printf("\n### %s: heat2d N=%d, %d iterations, local mpirun (%d alternated repetitions)\n\n", title, b.heatN, b.heatIters, b.overheadReps)
	fmt.Println("sec_per_iter is heat2d's own timing of its loop; wall is mpirun's whole run, start-up and the commit of the last checkpoint included.")
	fmt.Println()
	perIter := false
	for _, r := range results {
		perIter = perIter || len(r.iters) > 0
	}
	// The target is checked on the paired whole-loop ratio: it takes all of a run, as a user
	// would time it, and cancels the machine's slow drifts. The per-iteration estimates below
	// locate the cost; the one on minima takes each checkpoint at its cheapest and falls below
	// the whole-loop figures (P=4, 61 repetitions: +2.4% of a run against +5.2% paired).
	targetOn := "on the paired ratio"
	fmt.Printf("| P | variant | sec_per_iter median | min – max | overhead vs baseline, medians | paired per repetition (median) | minima | wall s, median (overhead) | CPU s (mpirun + ranks), median | target (%s) |\n", targetOn)
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range results {
		for _, v := range r.variants {
			xs := r.spi[v.key]
			if len(xs) == 0 {
				fmt.Printf("| %d | %s | failed | | | | | | | |\n", r.np, v.name)
				continue
			}
			over, pairs, mins, wall, target := "—", "—", "—", fmt.Sprintf("%.2f", median(r.wall[v.key])), ""
			if a := r.spi[v.base]; v.base != "" && len(a) > 0 {
				over = fmt.Sprintf("%+.2f%%", 100*(median(xs)/median(a)-1))
				// Each repetition runs the variants back to back: the per-repetition ratio
				// cancels slow drifts of the machine's load.
				var rs []float64
				for i := range min(len(xs), len(a)) {
					rs = append(rs, xs[i]/a[i]-1)
				}
				pairs = fmt.Sprintf("%+.2f%%", 100*median(rs))
				mins = fmt.Sprintf("%+.2f%%", 100*(minOf(xs)/minOf(a)-1))
				wall = fmt.Sprintf("%.2f (%+.1f%%)", median(r.wall[v.key]), 100*(median(r.wall[v.key])/median(r.wall[v.base])-1))
				if v.limit > 0 {
					target = targetCheck(100*median(rs), v.limit)
				}
			}
			fmt.Printf("| %d | %s | %.4e | %.4e – %.4e | %s | %s | %s | %s | %.2f | %s |\n", r.np, v.name, median(xs), minOf(xs), maxOf(xs),
				over, pairs, mins, wall, median(r.cpu[v.key]), target)
		}
	}
	if perIter {
		b.printIterCost(results)
	}
	fmt.Println()
	fmt.Println("Commands (one repetition; the checkpoint directory is emptied before each run):")
	fmt.Println()
	for _, r := range results {
		for _, v := range r.variants {
			fmt.Printf("    %s\n", r.commands[v.key])
			if c := r.commands[v.key+" beside"]; c != "" {
				fmt.Printf("      beside: %s\n", c)
			}
		}
	}
	for _, r := range results {
		fmt.Printf("\nAll sec_per_iter (and CPU seconds), P=%d, in repetition order:\n\n", r.np)
		for _, v := range r.variants {
			fmt.Printf("    %s: %s\n", v.key, floats(r.spi[v.key], "%.4e"))
			fmt.Printf("    %s cpu: %s\n", v.key, floats(r.cpu[v.key], "%.2f"))
		}
	}
}

// outputValue returns the value of the line "key value" in out, or "".
func outputValue(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func outputFloat(out, key string) (float64, error) {
	v := outputValue(out, key)
	if v == "" {
		return 0, fmt.Errorf("no %q line", key)
	}
	return strconv.ParseFloat(v, 64)
}

// runReplicated is part "replicated": heat2d on two pcmd nodes on this machine (np/2 ranks
// each) whose checkpoints stay in memory (pcmd serve --ckpt-store mem), every piece copied
// to the other node (double checkpointing), against the same run without pcm, and pcm
// without checkpoints beside them.
func (b *bench) runReplicated(np int) overheadResult {
	dir := filepath.Join(b.dir, "replicated")
	err := os.MkdirAll(dir, 0o700)
	var c *cluster
	if err == nil {
		c, err = startClusterOpts(dir, b.bin, b.env, true, b.pcmdArgs, "n1", "n2")
	}
	if err != nil {
		return overheadResult{np: np, failures: []string{fmt.Sprintf("P=%d: start the pcmd nodes: %v", np, err)}}
	}
	defer c.stop()
	on := []string{"--nats", c.url, "--hosts", fmt.Sprintf("n1:%d,n2:%d", np-np/2, np/2)}
	vs := []variant{
		{key: "a", name: "(a) -no-pcm on two pcmd nodes (baseline)", mpirun: on, app: []string{"-no-pcm"}},
		{key: "b", name: fmt.Sprintf("(b) --ckpt-every %d, pieces and buddy copies in the nodes' memory", b.ckptEvery),
			mpirun: append(slices.Clone(on), "--ckpt-every", strconv.Itoa(b.ckptEvery)), base: "a", limit: 5},
		// pcm without checkpoints: what (b) costs beyond (c) is the checkpoints' own share;
		// what (c) costs over (a) is pcm's agreement points and profiling, paid by every job
		// that can migrate, checkpointing or not.
		{key: "c", name: "(c) pcm without checkpoints", mpirun: on, base: "a"},
	}
	if b.replicatedDense {
		// The heat front leaves most of (b)'s state zeros for its first few hundred
		// iterations, which the checkpoints skip; a solver's state is rarely so sparse.
		dense := []string{"-" + solverkit.InitFlag, "1"}
		vs = append(vs,
			variant{key: "d", name: "(d) dense state: -no-pcm -init 1 on two pcmd nodes (baseline)", mpirun: on, app: append([]string{"-no-pcm"}, dense...)},
			variant{key: "e", name: "(e) dense state: (b) with -init 1", mpirun: vs[1].mpirun, app: dense, base: "d", limit: 5})
	}
	if b.replicatedSync {
		sync := append(slices.Clone(vs[1].mpirun), "--ckpt-sync")
		vs = append(vs, variant{key: "f", name: "(f) (b) with --ckpt-sync", mpirun: sync, base: "a", limit: 5})
		if b.replicatedDense {
			vs = append(vs, variant{key: "g", name: "(g) (e) with --ckpt-sync", mpirun: sync, app: []string{"-" + solverkit.InitFlag, "1"}, base: "d", limit: 5})
		}
	}
	for i := range vs {
		vs[i].iterTimes = true
	}
	return b.runVariants(np, vs)
}

// targetCheck says whether an overhead, percent, is below the limit.
func targetCheck(over, limit float64) string {
	met := "met"
	if over >= limit {
		met = "**missed**"
	}
	return fmt.Sprintf("< %g%% — %s", limit, met)
}

// iterCost is checkpointCost of variant v over its baseline in r, each iteration's times
// reduced over the repetitions with stat.
func (b *bench) iterCost(r overheadResult, v variant, stat func([]float64) float64) (ckptCost, error) {
	a, x := r.iters[v.base], r.iters[v.key]
	if v.base == "" || len(a) == 0 || len(x) == 0 {
		return ckptCost{}, errors.New("no per-iteration times")
	}
	return checkpointCost(a, x, b.ckptEvery, b.ckptWindow, stat)
}

// printIterCost prints the per-iteration estimate of the checkpoints' cost for the variants
// of results that recorded their iterations.
func (b *bench) printIterCost(results []overheadResult) {
	w := min(b.ckptWindow, b.ckptEvery)
	fmt.Println()
	fmt.Printf("Per-iteration estimate (heat2d -iter-times on rank 0): each iteration's duration is reduced over the repetitions of a variant "+
		"(minimum, or median); overhead = Σ_i red_variant(i) / Σ_i red_baseline(i) − 1. Noise from other processes hits different iterations in different "+
		"repetitions and drops out; a checkpoint's cost hits its iteration and the next ones in every repetition and stays. "+
		"Per checkpoint: the excess over the baseline of its iteration and the next %d (checkpoints at every %d-th iteration whose %d iterations lie in the loop), "+
		"ms; by iteration of that window, ms (minima); in the windows: the excess of all checkpoints' windows, percent of the baseline's loop (minima); "+
		"outside: the excess of all other iterations together, ms per run (what is left is noise, or cost spread beyond the window). "+
		"The sum of per-iteration minima is a loop faster than any real one, and the faster the more repetitions there are, which inflates the first column; "+
		"of a run: the excess of the minima (windows and outside together, ms) over the baseline's median whole loop; it takes each checkpoint at its cheapest, "+
		"so it is a lower bound of what the checkpoints cost a real run (the target is checked on the paired whole-loop ratio above).\n\n", w-1, b.ckptEvery, w)
	fmt.Println("| P | variant | repetitions | overhead, per-iteration minima | per-iteration medians | per checkpoint, ms (minima / medians; n checkpoints averaged) | by iteration of the window, ms (minima) | in the windows (minima) | outside the windows, ms (minima / medians) | excess per run, ms (minima) | baseline loop, ms (median of runs) | of a run (minima, a lower bound) |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		for _, v := range r.variants {
			if v.base == "" || !v.iterTimes {
				continue
			}
			lo, err := b.iterCost(r, v, minOf)
			if err != nil {
				fmt.Printf("| %d | %s | %d / %d | %v | | | | | | | | |\n", r.np, v.name, len(r.iters[v.key]), len(r.iters[v.base]), err)
				continue
			}
			mid, err := b.iterCost(r, v, median)
			if err != nil {
				fmt.Printf("| %d | %s | %d / %d | %v | | | | | | | | |\n", r.np, v.name, len(r.iters[v.key]), len(r.iters[v.base]), err)
				continue
			}
			ms := make([]float64, len(lo.profile))
			for o, x := range lo.profile {
				ms[o] = 1e3 * x
			}
			fmt.Printf("| %d | %s | %d / %d | %+.2f%% | %+.2f%% | %.1f / %.1f (n = %d) | %s | %+.2f%% | %.1f / %.1f | %.1f | %.0f | %+.2f%% |\n",
				r.np, v.name, len(r.iters[v.key]), len(r.iters[v.base]), 100*lo.overhead, 100*mid.overhead,
				1e3*lo.perCkpt, 1e3*mid.perCkpt, lo.ckpts, floats(ms, "%+.1f"), 100*lo.windows, 1e3*lo.outside, 1e3*mid.outside,
				1e3*lo.excess, 1e3*lo.baseLoop, 100*lo.ofRun)
		}
	}
}
