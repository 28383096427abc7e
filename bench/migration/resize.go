package main

// Part "resize" (--what resize): what a split or merge of a running job costs against
// stopping it and starting it again at the new size. bench/migration/blockapp holds one
// distributed array (pcm.NewBlock) of S MiB in all (--resize-sizes, global, not per rank);
// it runs on pcmd node n1 (mpirun --hosts n1:8 -np A), and per change A → B (--resizes):
//
//	resize:  the running job is asked for B ranks (pcmd resize's request, no --on: the new
//	         ranks go to the job's free slots on n1); the pause and the bytes moved are the
//	         ranks' report in the job's log (mpirun: "resized A -> B ranks ... in T ms");
//	         the job then stops and checks its array.
//	restart: plain  -np A blockapp -iters K            T_plain
//	         ckpt   --ckpt-every K -np A ... -iters K  T_ckpt (one checkpoint, at K)
//	         load   --restart ckpt -np B ... -iters K  T_restart (start-up at the new size,
//	                                                   loading, nothing left to compute)
//	         stop-and-restart = median(T_ckpt − T_plain) + median(T_restart)
//
// "minimum" is the data whose owner changes between the even layouts over A and B ranks,
// computed here from pcm/redist (old ranks keep their numbers; the highest leave).
//
// The Reconfigure fast path (no resize, no checkpoint due) is measured by
// BenchmarkReconfigureNoCheckpoint of package pcm, run with go test.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/bench/migration/internal/fill"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/redist"
)

// blockRow is blockapp's row length (its -row default): 8 KiB rows.
const blockRow = 1024

var resizedRe = regexp.MustCompile(`mpirun: resized (\d+) -> (\d+) ranks at iteration (\d+) in (\d+) ms`)

// resizeChange is one change of size, A → B.
type resizeChange struct{ from, to int }

func (c resizeChange) String() string { return fmt.Sprintf("%d → %d", c.from, c.to) }

// parseChanges parses "2-4,4-2,...".
func parseChanges(s string) ([]resizeChange, error) {
	var out []resizeChange
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "-")
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || from < 1 || to < 1 || from == to || max(from, to) > 8 {
			return nil, fmt.Errorf("%q: want A-B with 1 <= A, B <= 8 and A != B", f)
		}
		out = append(out, resizeChange{from, to})
	}
	return out, nil
}

// resizeResult collects the measurements of one size and change.
type resizeResult struct {
	mib      float64
	change   resizeChange
	pauses   []float64 // seconds, the ranks' report
	moved    int64     // bytes, the ranks' report (the same every time)
	ckptCost []float64 // T_ckpt − T_plain
	restart  []float64 // T_restart, the checkpoint in the page cache
	cold     []float64 // T_restart after its files were dropped from the page cache
	checks   []string
	failures []string
	commands []string
}

func (r *resizeResult) command(s string) {
	for _, c := range r.commands {
		if c == s {
			return
		}
	}
	r.commands = append(r.commands, s)
}

func (b *bench) resizeFail(c *cluster, r *resizeResult, j *bgJob, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if j != nil {
		msg += fmt.Sprintf("\n$ %s\n--- stdout:\n%s\n--- stderr:\n%s", j.commandLine(b.bin), tail(j.stdout.String(), 40), tail(j.stderr.String(), 60))
	}
	if data, err := os.ReadFile(c.logs["n1"]); err == nil {
		msg += fmt.Sprintf("\n--- pcmd n1 log (tail):\n%s", tail(string(data), 20))
	}
	r.failures = append(r.failures, msg)
	b.logf("FAILURE (%g MiB, %v): %s", r.mib, r.change, msg)
}

func (b *bench) blockApp() string { return filepath.Join(b.bin, "blockapp") }

// minMoved is the data whose owner changes from an even split of the array of mib MiB over
// from ranks to one over to ranks, in bytes.
func minMoved(mib float64, from, to int) (int64, error) {
	rows := fill.Elems(mib) / blockRow
	old, err := redist.Blocks(rows, nil, from)
	if err != nil {
		return 0, err
	}
	next, err := redist.Blocks(rows, nil, to)
	if err != nil {
		return 0, err
	}
	moved := 0
	for r, rg := range next {
		kept := 0
		if r < from {
			kept = rg.Intersect(old[r]).Len()
		}
		moved += rg.Len() - kept
	}
	return int64(moved) * blockRow * 8, nil
}

func (b *bench) runResize() bool {
	c, err := startCluster(b.dir, b.bin, b.env, "n1")
	if err != nil {
		fmt.Printf("\n**Failure:** starting the cluster: %v\n", err)
		return false
	}
	defer c.stop()
	b.logf("NATS %s (%s), node n1", c.url, c.natsDesc)
	var results []*resizeResult
	for _, s := range b.resizeSizes {
		for _, ch := range b.changes {
			results = append(results, &resizeResult{mib: s, change: ch})
		}
	}
	// Repetitions outermost, so slow phases of the machine hit every case.
	for rep := range b.reps {
		for _, r := range results {
			b.resizeTrial(c, r, rep)
			if b.stopRestart {
				b.resizeRestartTrial(c, r, rep)
			}
		}
	}
	fast := b.fastPath()
	b.printResize(results, fast)
	ok := true
	for _, r := range results {
		for _, f := range r.failures {
			ok = false
			fmt.Printf("\n**Failure (%g MiB, %v):**\n\n```\n%s\n```\n", r.mib, r.change, f)
		}
	}
	return ok
}

// resizeTrial runs blockapp on A ranks, resizes it to B, stops it and checks its array.
func (b *bench) resizeTrial(c *cluster, r *resizeResult, rep int) {
	id := fmt.Sprintf("rsz-%s-%d-%d-%d", sizeTag(r.mib), r.change.from, r.change.to, rep)
	stop := filepath.Join(b.dir, id+".stop")
	os.Remove(stop)
	defer os.Remove(stop)
	j, err := c.startJob(id, "--hosts", "n1:8", "-np", strconv.Itoa(r.change.from), b.blockApp(), "-mib", mibArg(r.mib),
		"-iters", "1000000000", "-pace", b.pace.String(), "-stop-file", stop)
	if err != nil {
		b.resizeFail(c, r, nil, "start job %s: %v", id, err)
		return
	}
	defer j.kill()
	if rep == 0 {
		r.command(j.commandLine(b.bin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := c.waitRunning(ctx, id); err != nil {
		b.resizeFail(c, r, j, "%v", err)
		return
	}
	if _, err := j.waitMatch(j.stdout.String, regexp.MustCompile(`(?m)^running$`), 1, 300*time.Second); err != nil {
		b.resizeFail(c, r, j, "waiting for the loop to start: %v", err)
		return
	}
	time.Sleep(b.settle)
	rep1, err := c.control(id, job.ControlRequest{Kind: job.ControlResize, NP: r.change.to, Reason: "bench/migration"})
	if err != nil || !rep1.OK {
		b.resizeFail(c, r, j, "resize to %d: refused: %v %s", r.change.to, err, rep1.Error)
		return
	}
	if _, err := j.waitMatch(j.stderr.String, resizedRe, 1, b.migrateLimit); err != nil {
		b.resizeFail(c, r, j, "resize not reported: %v", err)
		return
	}
	e, err := lastResize(c, id)
	if err != nil {
		b.resizeFail(c, r, j, "%v", err)
		return
	}
	b.logf("%g MiB %v rep %d: pause %v, %d bytes moved", r.mib, r.change, rep, e.Pause, e.Bytes)
	time.Sleep(b.settle)
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		b.resizeFail(c, r, j, "%v", err)
		return
	}
	code, err := j.wait(300 * time.Second)
	out := j.stdout.String()
	switch {
	case err != nil || code != 0:
		b.resizeFail(c, r, j, "job exit %d: %v", code, err)
		return
	case !strings.Contains(out, "verify ok") || outputValue(out, "ranks") != strconv.Itoa(r.change.to):
		b.resizeFail(c, r, j, "the job did not end on %d ranks with its array verified", r.change.to)
		return
	}
	r.pauses = append(r.pauses, e.Pause.Seconds())
	r.moved = e.Bytes
	r.checks = append(r.checks, fmt.Sprintf("%s: resized at iteration %d, %s iterations, ended on %d ranks, verify ok", id, e.Iteration, outputValue(out, "iters"), r.change.to))
}

// lastResize returns the job's committed resize from its log.
func lastResize(c *cluster, id string) (reconf.Reconfiguration, error) {
	m, err := c.nc.Request(job.JobInfoSubject(id), nil, 10*time.Second)
	if err != nil {
		return reconf.Reconfiguration{}, fmt.Errorf("job info: %w", err)
	}
	// mpirun answers under the job key: verify it as the job's owner, with its record.
	rec, err := c.record(id)
	if err != nil {
		return reconf.Reconfiguration{}, err
	}
	key, err := rec.Key()
	if err != nil {
		return reconf.Reconfiguration{}, err
	}
	info, err := key.DecodeJobInfo(m.Subject, m.Data, time.Now())
	if err != nil {
		return reconf.Reconfiguration{}, fmt.Errorf("job info: %w", err)
	}
	for i := len(info.Reconfigurations) - 1; i >= 0; i-- {
		if e := info.Reconfigurations[i]; e.Kind == reconf.Resize && e.State == reconf.Committed {
			return e, nil
		}
	}
	return reconf.Reconfiguration{}, fmt.Errorf("no committed resize in the log of job %s", id)
}

// resizeRestartTrial measures stop-and-restart into the new size: a checkpoint at the last
// iteration on A ranks, then a restart on B ranks with nothing left to compute.
func (b *bench) resizeRestartTrial(c *cluster, r *resizeResult, rep int) {
	tag := fmt.Sprintf("%s-%d-%d-%d", sizeTag(r.mib), r.change.from, r.change.to, rep)
	K := strconv.Itoa(b.restartIters)
	args := func(np int, verify bool) []string {
		return []string{"--hosts", "n1:8", "-np", strconv.Itoa(np), b.blockApp(), "-mib", mibArg(r.mib), "-iters", K, "-verify=" + strconv.FormatBool(verify)}
	}
	ckptID := "rckpt-" + tag
	ids := []string{ckptID}
	defer func() {
		for _, id := range ids {
			for _, store := range c.nodes {
				os.RemoveAll(filepath.Join(store, id))
			}
		}
	}()
	timed := func(id string, args ...string) (*bgJob, float64, bool) {
		j, err := c.startJob(id, args...)
		if err != nil {
			b.resizeFail(c, r, nil, "start job %s: %v", id, err)
			return nil, 0, false
		}
		if rep == 0 {
			r.command(j.commandLine(b.bin))
		}
		if code, err := j.wait(600 * time.Second); err != nil || code != 0 {
			b.resizeFail(c, r, j, "job exit %d: %v", code, err)
			return j, 0, false
		}
		return j, j.elapsed().Seconds(), true
	}
	_, tPlain, ok := timed("rplain-"+tag, args(r.change.from, false)...)
	if !ok {
		return
	}
	_, tCkpt, ok := timed(ckptID, append([]string{"--ckpt-every", K}, args(r.change.from, false)...)...)
	if !ok {
		return
	}
	ids = append(ids, "rrst-"+tag)
	j, tRestart, ok := timed("rrst-"+tag, append([]string{"--restart", ckptID}, args(r.change.to, false)...)...)
	if !ok {
		return
	}
	if m := restartRe.FindStringSubmatch(j.stderr.String() + j.stdout.String()); m == nil || m[1] != ckptID || m[3] != K {
		b.resizeFail(c, r, j, "restart did not report resuming %s at iteration %s", ckptID, K)
		return
	}
	if rep == 0 {
		// The restarted array is checked once (untimed).
		id := "rrsv-" + tag
		ids = append(ids, id)
		j, _, ok := timed(id, append([]string{"--restart", ckptID}, args(r.change.to, true)...)...)
		if !ok {
			return
		}
		if !strings.Contains(j.stdout.String(), "verify ok") {
			b.resizeFail(c, r, j, "the restarted array did not verify")
			return
		}
		r.checks = append(r.checks, fmt.Sprintf("%s: restart of %s on %d ranks, verify ok", id, ckptID, r.change.to))
	}
	// The same restart reading the checkpoint from the disk, as a job restarted after a
	// while or on a cluster's nodes would (dropCache, as the migration part's T_cold).
	dropped, err := dropCache(c, ckptID)
	if err != nil {
		b.resizeFail(c, r, nil, "drop %s from the page cache: %v", ckptID, err)
		return
	}
	ids = append(ids, "rcold-"+tag)
	_, tCold, ok := timed("rcold-"+tag, append([]string{"--restart", ckptID}, args(r.change.to, false)...)...)
	if !ok {
		return
	}
	r.ckptCost = append(r.ckptCost, tCkpt-tPlain)
	r.restart = append(r.restart, tRestart)
	r.cold = append(r.cold, tCold)
	b.logf("%g MiB %v rep %d: plain %.3fs, with checkpoint %.3fs, restart at %d ranks %.3fs warm, %.3fs cold (%d files dropped)",
		r.mib, r.change, rep, tPlain, tCkpt, r.change.to, tRestart, tCold, dropped)
}

// fastPath runs BenchmarkReconfigureNoCheckpoint of package pcm and returns its lines.
func (b *bench) fastPath() []string {
	root, err := testbin.ModuleRoot()
	if err != nil {
		return []string{"failed: " + err.Error()}
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "ReconfigureNoCheckpoint/(off|every|ondemand-adaptive)/np1", "-benchtime", "2000000x", "-count", "3", "./pcm")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return []string{fmt.Sprintf("failed: %v: %s", err, tail(string(out), 10))}
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	return lines
}

func (b *bench) printResize(results []*resizeResult, fast []string) {
	fmt.Printf("\n### Resize pause versus stop-and-restart (blockapp on pcmd node n1; %d repetitions)\n\n", b.reps)
	fmt.Println("| S (in all) | change | resize pause (median; min–max) | stop-and-restart, warm | ratio | stop-and-restart, cold | ratio | moved | minimum |")
	fmt.Println("| ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		pause, warm, warmRatio, cold, coldRatio, moved := "failed", "failed", "—", "failed", "—", "—"
		if len(r.pauses) > 0 {
			pause = fmt.Sprintf("%s; %s–%s", secs(median(r.pauses)), secs(minOf(r.pauses)), secs(maxOf(r.pauses)))
			moved = mib(r.moved)
		}
		if len(r.ckptCost) > 0 {
			w, c := median(r.ckptCost)+median(r.restart), median(r.ckptCost)+median(r.cold)
			warm, cold = secs(w), secs(c)
			if len(r.pauses) > 0 {
				warmRatio = fmt.Sprintf("%.1f×", w/median(r.pauses))
				coldRatio = fmt.Sprintf("%.1f×", c/median(r.pauses))
			}
		}
		minimum := "—"
		if m, err := minMoved(r.mib, r.change.from, r.change.to); err == nil {
			minimum = mib(m)
		}
		fmt.Printf("| %g MiB | %v | %s | %s | %s | %s | %s | %s | %s |\n", r.mib, r.change, pause, warm, warmRatio, cold, coldRatio, moved, minimum)
	}
	fmt.Println()
	fmt.Println("ratio = stop-and-restart ÷ resize pause. Resize pause: the ranks' report in the job's log (rank 0's")
	fmt.Println("time from entering the resize at the boundary to the commit: hellos, joiners started, new world")
	fmt.Println("connected, data moved, world switched). Stop-and-restart: median(T_ckpt − T_plain) + median(T_restart),")
	fmt.Println("T_restart being a restart at the new size with nothing left to compute: warm, its checkpoint still in")
	fmt.Println("the page cache; cold, its files dropped from it first (read from the disk, as on a cluster). moved:")
	fmt.Println("bytes the ranks sent; minimum: the rows whose owner changes.")
	for _, r := range results {
		if r.mib == 256 && (r.change == resizeChange{4, 6} || r.change == resizeChange{6, 3}) && len(r.pauses) > 0 && len(r.ckptCost) > 0 {
			p := median(r.pauses)
			w := (median(r.ckptCost) + median(r.restart)) / p
			c := (median(r.ckptCost) + median(r.cold)) / p
			fmt.Printf("\nTarget at 256 MiB, %v: pause below 1 s (%s: %s) and at least 10× faster than stop-and-restart (warm %.1f×: %s; cold %.1f×: %s).\n",
				r.change, secs(p), metText(p < 1), w, metText(w >= 10), c, metText(c >= 10))
		}
	}
	fmt.Println("\nReconfigure fast path (no resize, no checkpoint due), `go test -run '^$' -bench 'ReconfigureNoCheckpoint/(off|every|ondemand-adaptive)/np1' -benchtime 2000000x -count 3 ./pcm`:")
	fmt.Println()
	fmt.Println("```")
	for _, l := range fast {
		fmt.Println(l)
	}
	fmt.Println("```")
	fmt.Println("\nChecks passed:")
	for _, r := range results {
		for _, c := range r.checks {
			fmt.Printf("- %s\n", c)
		}
	}
	fmt.Println("\nCommands (one of each kind):")
	for _, r := range results {
		for _, c := range r.commands {
			fmt.Printf("\n    %s\n", c)
		}
	}
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func mib(bytes int64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }
