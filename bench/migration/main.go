// Command migration measures what live migration and checkpointing cost (package pcm) and
// prints markdown tables for docs/PERFORMANCE.md.
//
//	go run ./bench/migration                         # full run: overhead, then 16…1024 MiB
//	go run ./bench/migration --quick                 # smoke run: small sizes, one repetition
//	go run ./bench/migration --what migration --sizes 16,256 --reps 5
//	go run ./bench/migration --what disk --np 2 --overhead-reps 11
//	go run ./bench/migration --what drain,nodekill --sizes 16,64,256,1024 --reps 3
//	go run ./bench/migration --what resize                  # resize pause vs stop-and-restart
//	go run ./bench/migration --what resize --quick          # smoke run: 16 MiB, one repetition
//
// Part "overhead": heat2d -n 2048 -iters 200 on P = 2 and 4 local ranks (mpirun -np P), in
// variants run back to back and alternated: (a) -no-pcm, which never calls pcm.Reconfigure
// (the baseline); (b) the default, where pcm polls the launcher's reconfiguration log at
// adaptive agreement points; (c) mpirun --ckpt-every 50 --ckpt-dir DIR (background
// checkpoints); (d) the same with --ckpt-sync; (e) and (f): (a) and (c) with a dense state
// (heat2d's hidden -init 1: no zero blocks for the checkpoints to skip); (g) (c) with the
// store on a memory file system (/dev/shm, if it is tmpfs): what pcm costs apart from the
// disk. Reported: medians of heat2d's sec_per_iter and of mpirun's wall time, and their
// overheads over the baseline.
//
// Part "disk" (not run by default: --what disk): what the disk's work costs the machine,
// apart from pcm. Variants of heat2d -no-pcm run beside bench/migration/diskload, which
// writes --disk-mib MiB every --disk-every the way a checkpoint's writer does (direct I/O,
// fsync, rename, directory fsync): (b) as such, (c) without the fsyncs, (d) the fsyncs
// alone, (f) overwriting preallocated files in place with fdatasync (what is left without
// the file system's metadata); (e) is pcm's own --ckpt-every checkpoints, for comparison,
// and (g) pcm's checkpoints into a store in memory beside (b)'s writes: about what pcm would
// cost if its writer disturbed the ranks no more than a separate process does.
//
// Part "replicated" (--what replicated): heat2d on two pcmd nodes whose checkpoint stores are
// in memory (pcmd serve --ckpt-store mem), (a) -no-pcm against (b) --ckpt-every, every piece
// copied to the other node, alternated. Besides the whole-loop columns, both variants record
// every iteration's duration (heat2d -iter-times), and the overhead is also estimated from
// each iteration's minimum (and median) over the repetitions, which drops the noise that hits
// single repetitions and keeps the checkpoints' cost, which hits the same iterations in every
// one (checkpointCost), which locates the cost. The 5% target is checked on the paired
// whole-loop ratio (each repetition's variant over the baseline run next to it, median):
// the minima take each checkpoint at its cheapest and fall below what a run pays. Variant (c)
// is pcm without checkpoints; with --replicated-dense, (d) and (e) repeat (a) and (b) with a
// state that has no zero blocks (heat2d -init 1), which the checkpoints cannot skip.
//
// Part "migration": a nats-server (/usr/sbin/nats-server if installed, else an in-process one)
// and two pcmd nodes n1 and n2 on loopback (pcmd serve --node nI --nats URL --allow BIN/*
// --slots 8 --policy none --store DIR). The test application bench/migration/stateapp runs
// on 2 ranks (mpirun --nats URL --policy none --hosts n1:1,n2:1), each holding S MiB of
// registered state; rank 1 is moved from n2 to n1 and back with job.ControlRequest on
// job.ControlSubject, and the pause is mpirun's report ("migrated rank 1 from n2 to n1 at
// iteration I in PAUSE"). The job's result is checked (the application verifies its ballast
// and prints a checksum, which is compared with one computed here).
//
// Stop-and-restart with the same state is measured on the same nodes, per repetition:
//
//	plain:  stateapp -mib S -iters K                              wall time T_plain
//	ckpt:   mpirun --ckpt-every K ... stateapp -mib S -iters K     T_ckpt (one checkpoint, at K)
//	warm:   mpirun --restart ckpt ... stateapp -mib S -iters K     T_warm (nothing left to compute)
//	cold:   the same after posix_fadvise(DONTNEED) on the pieces   T_cold
//	empty:  stateapp -mib 0 -iters 0                               T_empty (start-up, tear-down)
//
// The checkpoint costs T_ckpt − T_plain. A restart with nothing to compute is a job start-up,
// reading the checkpoint and a tear-down, T_warm (of which T_warm − T_empty is reading the
// state; a restarted stateapp does not rebuild its ballast, it gets it from pcm.Load). So
// stop-and-restart = median(T_ckpt − T_plain) + median(T_warm); the table also gives it with
// T_cold. Both ranks write and read their S MiB concurrently, as a real job would.
//
// Parts "drain" and "nodekill" (not run by default) measure a node's leaving: the drain of a
// node with 2 ranks of --drain-mib MiB each, and the recovery of a job from the kill -9 of a
// node, per phase, for every size of --sizes; see resilience.go.
//
// Part "resize" (--what resize): split and merge against stop-and-restart at the new size,
// for a distributed array of 64 MiB … 1 GiB in all; see resize.go.
//
// Sizes are MiB per rank (part resize: --resize-sizes, MiB in all). Output: progress on
// stderr, the report (markdown) on stdout.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

type bench struct {
	dir, bin string
	env      []string

	what         map[string]bool
	sizes        []float64
	reps         int
	overheadReps int
	heatN        int
	heatIters    int
	ckptEvery    int
	ckptWindow   int
	nps          []int
	pace         time.Duration
	settle       time.Duration
	restartIters int
	migrateLimit time.Duration
	moves        int
	latTrips     int
	diskMiB      float64
	drainMiB     float64
	diskEvery    time.Duration
	stopRestart  bool
	// replicatedDense adds to part replicated the same pair with heat2d's interior started
	// at 1, so that no block of the state is zeros.
	replicatedDense bool
	// replicatedSync adds to part replicated (b), and (e) with -replicated-dense, with
	// mpirun --ckpt-sync: each checkpoint written and copied at the boundary, every rank at once.
	replicatedSync bool
	keep           bool
	pcmdArgs       []string // part replicated: further options of the nodes' pcmd serve
	resizeSizes    []float64
	changes        []resizeChange
}

func (b *bench) logf(format string, args ...any) {
	log.Printf(format, args...)
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("migration: ")
	b := &bench{}
	var sizes, what, nps, resizeSizes, changes string
	var quick bool
	flag.StringVar(&sizes, "sizes", "16,64,256,1024", "state sizes per rank, MiB, comma-separated")
	flag.IntVar(&b.reps, "reps", 3, "repetitions of each migration and stop-and-restart measurement (each migration trial moves a rank twice)")
	flag.BoolVar(&quick, "quick", false, "smoke run: sizes 16,64 (unless --sizes is given), 1 repetition, heat2d -n 512")
	flag.StringVar(&what, "what", "overhead,migration", "parts to run: overhead, migration, disk, replicated, drain, nodekill, resize")
	flag.Float64Var(&b.drainMiB, "drain-mib", 256, "part drain: state per rank, MiB, of the 2 ranks on the drained node")
	flag.StringVar(&resizeSizes, "resize-sizes", "64,256,1024", "part resize: sizes of the distributed array in all, MiB, comma-separated")
	flag.StringVar(&changes, "resizes", "2-4,4-2,4-6,6-3", "part resize: changes of the number of ranks, A-B, comma-separated")
	flag.IntVar(&b.overheadReps, "overhead-reps", 7, "repetitions of each heat2d variant")
	flag.IntVar(&b.heatN, "heat-n", 2048, "heat2d -n")
	flag.IntVar(&b.heatIters, "heat-iters", 200, "heat2d -iters")
	flag.IntVar(&b.ckptEvery, "ckpt-every", 50, "heat2d variants (c), (d), (f): mpirun --ckpt-every")
	flag.IntVar(&b.ckptWindow, "ckpt-window", 10, "part replicated: a checkpoint's iteration and the next ckpt-window-1 count as its cost in the per-iteration estimate")
	flag.StringVar(&nps, "np", "2,4", "heat2d rank counts")
	flag.DurationVar(&b.pace, "pace", 2*time.Millisecond, "stateapp -pace during migration trials")
	flag.DurationVar(&b.settle, "settle", 500*time.Millisecond, "wait before, between and after the migrations of a trial")
	flag.IntVar(&b.restartIters, "restart-iters", 10, "K: iterations of the stop-and-restart runs, checkpointed at K")
	flag.DurationVar(&b.migrateLimit, "migrate-timeout", 3*time.Minute, "give up on a migration not reported within this")
	flag.IntVar(&b.moves, "moves", 2, "migrations per trial, alternately to n1 and n2")
	flag.IntVar(&b.latTrips, "lat-trips", 50, "16-byte round trips between ranks 0 and 1 per iteration of a migration trial, for the latency before and after each move (0: none)")
	flag.Float64Var(&b.diskMiB, "disk-mib", 2, "part disk: MiB the background writer writes per round (heat2d's checkpoints average about 2 MiB of non-zero data at P=2)")
	flag.DurationVar(&b.diskEvery, "disk-every", 100*time.Millisecond, "part disk: one round of the background writer every this (heat2d's checkpoint interval at --ckpt-every 50)")
	flag.BoolVar(&b.stopRestart, "stop-restart", true, "also measure stop-and-restart (part migration)")
	flag.BoolVar(&b.replicatedDense, "replicated-dense", false, "part replicated: also (d) and (e), the baseline and --ckpt-every with a state that has no zero blocks (heat2d -init 1)")
	flag.BoolVar(&b.replicatedSync, "replicated-sync", false, "part replicated: also (f), (b) with mpirun --ckpt-sync, and with -replicated-dense (g), (e) with --ckpt-sync")
	flag.BoolVar(&b.keep, "keep", false, "keep the temporary directory (binaries, logs, stores)")
	flag.Func("pcmd-arg", "part replicated: give the nodes' pcmd serve this further `OPTION` (repeat for more; e.g. --pcmd-arg=--copy-nice=10)", func(v string) error {
		b.pcmdArgs = append(b.pcmdArgs, v)
		return nil
	})
	flag.Parse()
	if flag.NArg() != 0 {
		log.Fatalf("unexpected arguments %q", flag.Args())
	}
	sizesSet, resizeSizesSet := false, false
	flag.Visit(func(f *flag.Flag) {
		sizesSet = sizesSet || f.Name == "sizes"
		resizeSizesSet = resizeSizesSet || f.Name == "resize-sizes"
	})
	if quick {
		if !sizesSet {
			sizes = "16,64"
		}
		if !resizeSizesSet {
			resizeSizes = "16"
		}
		b.reps, b.overheadReps, b.heatN = 1, 1, 512
	}
	var err error
	if b.sizes, err = parseFloats(sizes); err != nil {
		log.Fatalf("--sizes: %v", err)
	}
	if b.resizeSizes, err = parseFloats(resizeSizes); err != nil {
		log.Fatalf("--resize-sizes: %v", err)
	}
	if b.changes, err = parseChanges(changes); err != nil {
		log.Fatalf("--resizes: %v", err)
	}
	np, err := parseFloats(nps)
	if err != nil {
		log.Fatalf("--np: %v", err)
	}
	for _, x := range np {
		b.nps = append(b.nps, int(x))
	}
	b.what = map[string]bool{}
	for _, w := range strings.Split(what, ",") {
		if !slices.Contains([]string{"overhead", "migration", "disk", "replicated", "drain", "nodekill", "resize"}, w) {
			log.Fatalf("--what: unknown part %q", w)
		}
		b.what[w] = true
	}
	if b.reps < 1 || b.overheadReps < 1 || b.restartIters < 1 || b.moves < 1 || b.ckptWindow < 1 {
		log.Fatal("--reps, --overhead-reps, --restart-iters, --moves and --ckpt-window must be >= 1")
	}
	os.Exit(b.run())
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x < 0 {
			return nil, fmt.Errorf("%q: want non-negative numbers", f)
		}
		out = append(out, x)
	}
	return out, nil
}

func (b *bench) run() int {
	root, err := testbin.ModuleRoot()
	if err != nil {
		log.Print(err)
		return 1
	}
	if b.dir, err = os.MkdirTemp("", "migbench-"); err != nil {
		log.Print(err)
		return 1
	}
	if b.keep {
		b.logf("keeping %s", b.dir)
	} else {
		defer os.RemoveAll(b.dir)
	}
	b.bin = filepath.Join(b.dir, "bin")
	b.env = isolatedEnv(b.dir)
	b.logf("building into %s", b.bin)
	build := exec.Command("go", "build", "-o", b.bin+"/", "./cmd/pcmd", "./cmd/mpirun", "./heat2d", "./bench/migration/stateapp", "./bench/migration/blockapp", "./bench/migration/diskload")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		log.Printf("go build: %v\n%s", err, out)
		return 1
	}
	src := root + " (not a git checkout)"
	if rev, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		src = "git " + strings.TrimSpace(string(rev))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			src += " with uncommitted changes"
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("## bench/migration — %s\n\n", time.Now().Format("2006-01-02 15:04"))
	fmt.Printf("Machine %s: %d CPUs, %s; source %s; load average at start %s.\n",
		host, runtime.NumCPU(), runtime.Version(), src, testbin.LoadAvg())
	fmt.Printf("Command: `go run ./bench/migration %s`\n", shellJoin(os.Args[1:]))

	failed := false
	if b.what["overhead"] && !b.runVariantPart("overhead", "PCM overhead", b.runOverhead) {
		failed = true
	}
	if b.what["replicated"] && !b.runVariantPart("replicated", "PCM overhead with replicated checkpoints in memory (two pcmd nodes)", b.runReplicated) {
		failed = true
	}
	if b.what["disk"] && !b.runVariantPart("disk", "What the disk costs: heat2d without pcm beside a process writing like checkpoints", b.runDisk) {
		failed = true
	}
	if b.what["migration"] {
		if !b.runMigration() {
			failed = true
		}
	}
	if b.what["drain"] && !b.runDrain() {
		failed = true
	}
	if b.what["nodekill"] && !b.runNodeKill() {
		failed = true
	}
	if b.what["resize"] && !b.runResize() {
		failed = true
	}
	fmt.Printf("\nLoad average at the end: %s.\n", testbin.LoadAvg())
	if failed {
		return 1
	}
	return 0
}

// runVariantPart runs a part made of heat2d variants (run) for every rank count and prints
// its table; it reports whether every run succeeded.
func (b *bench) runVariantPart(part, title string, run func(np int) overheadResult) bool {
	var results []overheadResult
	for _, np := range b.nps {
		results = append(results, run(np))
	}
	b.printOverhead(title, results)
	ok := true
	for _, r := range results {
		for _, f := range r.failures {
			ok = false
			fmt.Printf("\n**Failure (%s):**\n\n```\n%s\n```\n", part, f)
		}
	}
	return ok
}

func (b *bench) runMigration() bool {
	c, err := startCluster(b.dir, b.bin, b.env, "n1", "n2")
	if err != nil {
		log.Printf("cluster: %v", err)
		fmt.Printf("\n**Failure:** starting the cluster: %v\n", err)
		return false
	}
	defer c.stop()
	b.logf("NATS %s (%s), nodes n1 n2", c.url, c.natsDesc)
	results := make([]*sizeResult, len(b.sizes))
	for i, s := range b.sizes {
		results[i] = &sizeResult{mib: s}
	}
	// Repetitions outermost, so slow phases of the machine hit every size.
	for rep := range b.reps {
		for _, r := range results {
			b.migrationTrial(c, r, rep)
			if b.stopRestart {
				b.restartTrial(c, r, rep)
			}
		}
	}
	b.printMigration(c, results)
	ok := true
	for _, r := range results {
		for _, f := range r.failures {
			ok = false
			fmt.Printf("\n**Failure (%g MiB):**\n\n```\n%s\n```\n", r.mib, f)
		}
	}
	return ok
}

func (b *bench) printMigration(c *cluster, results []*sizeResult) {
	fmt.Printf("\n### Migration pause versus state size (2 ranks on pcmd nodes n1, n2 on one machine; %d repetitions)\n\n", b.reps)
	fmt.Println("| state MiB (per rank) | migration pause (median) | stop-and-restart | ratio |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	for _, r := range results {
		pause, sr, ratio := "failed", "failed", "—"
		if len(r.pauses) > 0 {
			pause = secs(median(r.pauses))
		}
		if len(r.ckptCost) > 0 {
			total := median(r.ckptCost) + median(r.warm)
			sr = secs(total)
			if len(r.pauses) > 0 {
				ratio = fmt.Sprintf("%.1f×", total/median(r.pauses))
			}
		}
		fmt.Printf("| %g | %s | %s | %s |\n", r.mib, pause, sr, ratio)
	}
	fmt.Println()
	fmt.Println("ratio = stop-and-restart ÷ migration pause. Migration pause: mpirun's `migrated rank 1 ... in PAUSE`, the")
	fmt.Println("migrating rank's time from entering the migration to handing over (successor start, state transfer, commit,")
	fmt.Println("rewiring); median of all moves (n2→n1, n1→n2, ...) of every repetition. Stop-and-restart: median(T_ckpt −")
	fmt.Println("T_plain) + median(T_warm), see below.")
	for _, r := range results {
		if r.mib == 256 && len(r.pauses) > 0 {
			met := "met"
			if median(r.pauses) >= 1.5 {
				met = "**missed**"
			}
			fmt.Printf("\nTarget: 256 MiB pause below 1.5 s — %s (median %s).\n", met, secs(median(r.pauses)))
		}
	}

	fmt.Println("\nBreakdown (medians; wall times of whole mpirun runs):")
	fmt.Println()
	fmt.Println("| state MiB | state moved | pause min – max | stall seen by rank 0 | request → migration start | checkpoint write (T_ckpt − T_plain) | restart, warm cache (T_warm) | restart, cold cache (T_cold) | empty job (T_empty) | stop-and-restart, cold |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		cell := func(xs []float64) string {
			if len(xs) == 0 {
				return "—"
			}
			return secs(median(xs))
		}
		rng := "—"
		if len(r.pauses) > 0 {
			rng = secs(minOf(r.pauses)) + " – " + secs(maxOf(r.pauses))
		}
		cold := "—"
		if len(r.ckptCost) > 0 {
			cold = secs(median(r.ckptCost) + median(r.cold))
		}
		fmt.Printf("| %g | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.mib, r.stateBytes, rng, cell(r.stalls), cell(r.reaction),
			cell(r.ckptCost), cell(r.warm), cell(r.cold), cell(r.empty), cold)
	}
	fmt.Println()
	fmt.Println("Stall seen by rank 0: rank 0 (not moving) logs when it enters each Reconfigure; the interval spanning the")
	fmt.Println("migration iteration (the migration itself, then the next Allreduce, which waits for the successor to load")
	fmt.Println("the state and run) minus the median interval. Request → migration start: from sending the control request")
	fmt.Println("to mpirun's report, minus the pause: the wait for the ranks' next agreement point (the job computes meanwhile).")

	if b.latTrips > 0 {
		fmt.Println("\nLatency between rank 0 (on n1) and rank 1 across its moves: 16-byte half round trip, µs (median over")
		fmt.Println("the iterations of each phase, then over the trials; the first iterations after a move are left out).")
		fmt.Println("On n1 both ranks share a node and talk through shared memory; on n2 through TCP (loopback here).")
		fmt.Println()
		fmt.Println("| state MiB | rank 1 on n2 (TCP), before | moved onto n1 (shared memory) | moved back to n2 (TCP) |")
		fmt.Println("| ---: | ---: | ---: | ---: |")
		for _, r := range results {
			cell := func(xs []float64) string {
				if len(xs) == 0 {
					return "—"
				}
				return fmt.Sprintf("%.2f", median(xs))
			}
			fmt.Printf("| %g | %s | %s | %s |\n", r.mib, cell(r.latBefore), cell(r.latOn), cell(r.latBack))
		}
	}

	fmt.Println("\nRaw samples (seconds):")
	fmt.Println()
	for _, r := range results {
		fmt.Printf("    %g MiB: pause %s\n", r.mib, floats(r.pauses, "%.3f"))
		fmt.Printf("    %g MiB: stall %s\n", r.mib, floats(r.stalls, "%.3f"))
		fmt.Printf("    %g MiB: request → start %s\n", r.mib, floats(r.reaction, "%.3f"))
		fmt.Printf("    %g MiB: plain %s | ckpt %s | warm %s | cold %s | empty %s\n", r.mib,
			floats(r.plain, "%.3f"), floats(r.ckpt, "%.3f"), floats(r.warm, "%.3f"), floats(r.cold, "%.3f"), floats(r.empty, "%.3f"))
	}

	var retries []string
	for _, r := range results {
		retries = append(retries, r.retries...)
	}
	if len(retries) > 0 {
		fmt.Println("\nMigration requests refused with \"previous process ... has not exited yet; try again\" and retried every 50ms:")
		fmt.Println()
		for _, s := range retries {
			fmt.Printf("    %s\n", s)
		}
	}

	fmt.Println("\nCorrectness checks passed:")
	fmt.Println()
	for _, r := range results {
		for _, ch := range r.checks {
			fmt.Printf("    %s\n", ch)
		}
	}

	fmt.Println("\nSetup and commands (BIN and the stores are in a temporary directory):")
	fmt.Println()
	if c.natsDesc == debianNATS {
		fmt.Printf("    %s -a 127.0.0.1 -p PORT\n", debianNATS)
	} else {
		fmt.Printf("    (%s on %s)\n", c.natsDesc, c.url)
	}
	for _, n := range []string{"n1", "n2"} {
		fmt.Printf("    %s\n", shellJoin(append([]string{filepath.Join(b.bin, "pcmd")}, c.nodeArgs(n)...)))
	}
	if len(results) > 0 {
		for _, cmd := range results[0].commands {
			fmt.Printf("    %s\n", cmd)
		}
	}
	fmt.Println("    # migrations: job.ControlRequest{Kind: migrate, Rank: 1, To: n1}, then To: n2, on mpios.job.<id>.ctl")
	fmt.Println("    # (the same as: pcmd migrate --nats URL --job ID --rank 1 --to n1)")
}
