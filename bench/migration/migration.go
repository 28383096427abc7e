package main

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mpios/mpios/bench/migration/internal/fill"
	"github.com/mpios/mpios/internal/job"
)

var (
	migratedRe = regexp.MustCompile(`mpirun: migrated rank (\d+) from (\S+) to (\S+) at iteration (\d+) in (\S+), (.+?) of state`)
	abortedRe  = regexp.MustCompile(`mpirun: migration of rank \d+ to \S+ aborted.*`)
	restartRe  = regexp.MustCompile(`restarts from job (\S+) checkpoint (\d+) \(iteration (\d+)\)`)
)

// sizeResult collects every measurement of one state size.
type sizeResult struct {
	mib        float64
	stateBytes string    // as mpirun reports it
	pauses     []float64 // mpirun's migration pause, seconds, both directions, every repetition
	stalls     []float64 // extra time of rank 0's iteration spanning the migration
	// 16-byte half round trip between ranks 0 and 1 (µs, the median of a trial's iterations)
	// before the first move (rank 1 on n2: TCP), while rank 1 is on n1 with rank 0 (shared
	// memory), and after it moved back to n2 (TCP).
	latBefore, latOn, latBack []float64
	reaction                  []float64 // from the control request to the start of the migration
	retries                   []string  // migration requests refused with "try again" before being accepted
	plain                     []float64 // job to K iterations without checkpoint, wall seconds
	ckpt                      []float64 // the same with a checkpoint at K
	ckptCost                  []float64 // ckpt - plain, per repetition
	warm                      []float64 // restart from that checkpoint, nothing left to compute, page cache warm
	cold                      []float64 // the same after dropping the pieces from the page cache
	empty                     []float64 // a job with no state and no iterations: start-up and tear-down
	checks                    []string  // correctness checks passed
	failures                  []string
	commands                  []string // one of each kind of command, for the report
}

func sizeTag(mib float64) string {
	return strings.ReplaceAll(strconv.FormatFloat(mib, 'f', -1, 64), ".", "p")
}

func (r *sizeResult) command(s string) {
	for _, c := range r.commands {
		if c == s {
			return
		}
	}
	r.commands = append(r.commands, s)
}

// fail records a failure with everything needed to reproduce and diagnose it.
func (b *bench) fail(c *cluster, r *sizeResult, j *bgJob, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if j != nil {
		msg += fmt.Sprintf("\n$ %s\n--- stdout:\n%s\n--- stderr:\n%s", j.commandLine(b.bin), tail(j.stdout.String(), 40), tail(j.stderr.String(), 60))
	}
	for _, n := range []string{"n1", "n2"} {
		if data, err := os.ReadFile(c.logs[n]); err == nil {
			msg += fmt.Sprintf("\n--- pcmd %s log (tail):\n%s", n, tail(string(data), 20))
		}
	}
	r.failures = append(r.failures, msg)
	b.logf("FAILURE (%g MiB): %s", r.mib, msg)
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = append([]string{fmt.Sprintf("[... %d lines ...]", len(ls)-lines)}, ls[len(ls)-lines:]...)
	}
	return strings.Join(ls, "\n")
}

func (b *bench) app() string { return filepath.Join(b.bin, "stateapp") }

func mibArg(mib float64) string { return strconv.FormatFloat(mib, 'f', -1, 64) }

// migrationTrial runs stateapp on n1 and n2 (rank 0 on n1, rank 1 on n2), moves rank 1 to n1
// and back (--moves times in all), stops the job and checks its result.
func (b *bench) migrationTrial(c *cluster, r *sizeResult, rep int) {
	id := fmt.Sprintf("mig-%s-%d", sizeTag(r.mib), rep)
	stop := filepath.Join(b.dir, id+".stop")
	timeline := filepath.Join(b.dir, id+".timeline")
	os.Remove(stop)
	j, err := c.startJob(id, "--hosts", "n1:1,n2:1", b.app(), "-mib", mibArg(r.mib), "-iters", "1000000000",
		"-pace", b.pace.String(), "-stop-file", stop, "-timeline", timeline, "-lat", strconv.Itoa(b.latTrips))
	if err != nil {
		b.fail(c, r, nil, "start job %s: %v", id, err)
		return
	}
	defer j.kill()
	if rep == 0 {
		r.command(j.commandLine(b.bin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.waitRunning(ctx, id); err != nil {
		b.fail(c, r, j, "%v", err)
		return
	}
	if _, err := j.waitMatch(j.stdout.String, regexp.MustCompile(`(?m)^running$`), 1, 120*time.Second); err != nil {
		b.fail(c, r, j, "waiting for the loop to start: %v", err)
		return
	}
	time.Sleep(b.settle)
	var iters []int
	for k := range b.moves {
		to := []string{"n1", "n2"}[k%2]
		t0 := time.Now()
		// mpirun refuses to move a rank again until its previous process has exited
		// ("... has not exited yet; try again"): retry that, and count the wait.
		var retried time.Duration
		for {
			reply, err := c.control(id, job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: to, Reason: "bench/migration"})
			if err == nil && !reply.OK && strings.Contains(reply.Error, "try again") && retried < 30*time.Second {
				time.Sleep(50 * time.Millisecond)
				retried = time.Since(t0)
				continue
			}
			if err != nil || !reply.OK {
				b.fail(c, r, j, "migrate rank 1 to %s: refused: %v %s", to, err, reply.Error)
				return
			}
			break
		}
		if retried > 0 {
			r.retries = append(r.retries, fmt.Sprintf("move %d of %s: refused (previous process not exited) for %v", k+1, id, retried.Round(time.Millisecond)))
		}
		t0 = time.Now()
		var m []string
		deadline := time.Now().Add(b.migrateLimit)
		for m == nil {
			errText := j.stderr.String()
			if a := abortedRe.FindString(errText); a != "" {
				b.fail(c, r, j, "migration %d (rank 1 to %s) aborted: %s", k+1, to, a)
				return
			}
			if all := migratedRe.FindAllStringSubmatch(errText, -1); len(all) > k {
				m = all[k]
				break
			}
			select {
			case <-j.done:
				b.fail(c, r, j, "job ended during migration %d (rank 1 to %s)", k+1, to)
				return
			default:
			}
			if time.Now().After(deadline) {
				b.fail(c, r, j, "migration %d (rank 1 to %s) not reported within %v (HANG?)", k+1, to, b.migrateLimit)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		pause, err := time.ParseDuration(m[5])
		if err != nil {
			b.fail(c, r, j, "cannot parse the pause in %q: %v", m[0], err)
			return
		}
		it, _ := strconv.Atoi(m[4])
		iters = append(iters, it)
		r.pauses = append(r.pauses, pause.Seconds())
		r.reaction = append(r.reaction, time.Since(t0).Seconds()-pause.Seconds())
		r.stateBytes = m[6]
		b.logf("%g MiB rep %d: %s (request to report %v)", r.mib, rep, m[0], time.Since(t0).Round(time.Millisecond))
		time.Sleep(b.settle)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		b.fail(c, r, j, "%v", err)
		return
	}
	code, err := j.wait(180 * time.Second)
	if err != nil || code != 0 {
		b.fail(c, r, j, "job exit %d: %v", code, err)
		return
	}
	out := j.stdout.String()
	n, _ := strconv.Atoi(outputValue(out, "iters"))
	if !strings.Contains(out, "verify ok") {
		b.fail(c, r, j, "the job's own check of the ballast failed")
		return
	}
	want := expectedChecksum(r.mib, 2, n)
	if got := outputValue(out, "checksum"); got != want {
		b.fail(c, r, j, "checksum %s after %d iterations, want %s", got, n, want)
		return
	}
	r.checks = append(r.checks, fmt.Sprintf("%s: %d migrations, %d iterations, verify ok, checksum %s = expected", id, b.moves, n, want))
	stalls, lats, err := readStalls(timeline, iters)
	if err != nil {
		b.fail(c, r, j, "timeline: %v", err)
		return
	}
	r.stalls = append(r.stalls, stalls...)
	if b.latTrips > 0 {
		for seg, xs := range latSegments(lats, iters) {
			if len(xs) == 0 {
				continue
			}
			switch {
			case seg == 0:
				r.latBefore = append(r.latBefore, median(xs))
			case seg%2 == 1:
				r.latOn = append(r.latOn, median(xs))
			default:
				r.latBack = append(r.latBack, median(xs))
			}
		}
	}
	os.Remove(timeline)
	os.Remove(stop)
}

// readStalls returns, for each migration iteration I, how much longer than the median the
// interval from rank 0 entering Reconfigure(I) to entering Reconfigure(I+1) was: that
// interval holds the migration (the other ranks wait in it for the commit) and the next
// iteration's Allreduce, which waits for the successor to run. It also returns the
// timeline's latencies (stateapp -lat) by iteration.
func readStalls(path string, iters []int) ([]float64, map[int]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	at := map[int]float64{}
	lats := map[int]float64{}
	var order []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var i int
		var t, lat float64
		n, err := fmt.Sscanf(sc.Text(), "%d %f %f", &i, &t, &lat)
		if n < 2 {
			return nil, nil, fmt.Errorf("line %q: %v", sc.Text(), err)
		}
		at[i] = t
		if n == 3 {
			lats[i] = lat
		}
		order = append(order, i)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	var gaps []float64
	for k := 1; k < len(order); k++ {
		gaps = append(gaps, at[order[k]]-at[order[k-1]])
	}
	normal := median(gaps)
	var out []float64
	for _, i := range iters {
		t0, ok0 := at[i]
		t1, ok1 := at[i+1]
		if !ok0 || !ok1 {
			return nil, nil, fmt.Errorf("no timeline entries for iterations %d and %d", i, i+1)
		}
		out = append(out, t1-t0-normal)
	}
	return out, lats, nil
}

// latSettle is how many iterations after a migration are left out of the latency segments:
// the first messages to the successor set up its connections.
const latSettle = 3

// latSegments splits the latencies by iteration into the segments between migrations (at
// iterations iters): segment 0 before the first, segment k after the k-th.
func latSegments(lats map[int]float64, iters []int) [][]float64 {
	segs := make([][]float64, len(iters)+1)
	for i, lat := range lats {
		seg := 0
		for k, m := range iters {
			if i > m {
				seg = k + 1
			}
		}
		if seg > 0 && i <= iters[seg-1]+latSettle {
			continue
		}
		if seg < len(iters) && i >= iters[seg] {
			continue // the migration's own iteration
		}
		segs[seg] = append(segs[seg], lat)
	}
	return segs
}

// runTimed runs a job to completion and returns its wall time, or records a failure.
func (b *bench) runTimed(c *cluster, r *sizeResult, rep int, id string, args ...string) (*bgJob, float64, bool) {
	j, err := c.startJob(id, args...)
	if err != nil {
		b.fail(c, r, nil, "start job %s: %v", id, err)
		return nil, 0, false
	}
	if rep == 0 {
		r.command(j.commandLine(b.bin))
	}
	code, err := j.wait(600 * time.Second)
	if err != nil || code != 0 {
		b.fail(c, r, j, "job exit %d: %v", code, err)
		return j, 0, false
	}
	if strings.Contains(j.stderr.String(), "warning") {
		b.fail(c, r, j, "warnings in the job's output")
		return j, 0, false
	}
	return j, j.elapsed().Seconds(), true
}

// restartTrial measures stop-and-restart with the same state: a checkpoint at the last
// iteration, then a restart with nothing left to compute.
func (b *bench) restartTrial(c *cluster, r *sizeResult, rep int) {
	tag := fmt.Sprintf("%s-%d", sizeTag(r.mib), rep)
	K := strconv.Itoa(b.restartIters)
	hosts := []string{"--hosts", "n1:1,n2:1"}
	appArgs := func(mib float64, iters string, verify bool) []string {
		return []string{b.app(), "-mib", mibArg(mib), "-iters", iters, "-verify=" + strconv.FormatBool(verify)}
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	ckptID := "ckpt-" + tag
	ids := []string{ckptID}
	defer func() {
		for _, id := range ids {
			for _, store := range c.nodes {
				os.RemoveAll(filepath.Join(store, id))
			}
		}
	}()

	_, tPlain, ok := b.runTimed(c, r, rep, "plain-"+tag, cat(hosts, appArgs(r.mib, K, false))...)
	if !ok {
		return
	}
	_, tCkpt, ok := b.runTimed(c, r, rep, ckptID, cat([]string{"--ckpt-every", K}, hosts, appArgs(r.mib, K, false))...)
	if !ok {
		return
	}
	restart := func(id string) (float64, bool) {
		ids = append(ids, id)
		j, t, ok := b.runTimed(c, r, rep, id, cat([]string{"--restart", ckptID}, hosts, appArgs(r.mib, K, false))...)
		if !ok {
			return 0, false
		}
		m := restartRe.FindStringSubmatch(j.stderr.String() + j.stdout.String())
		if m == nil || m[1] != ckptID || m[3] != K {
			b.fail(c, r, j, "restart did not report resuming %s at iteration %s", ckptID, K)
			return 0, false
		}
		return t, true
	}
	tWarm, ok := restart("rstw-" + tag)
	if !ok {
		return
	}
	dropped, err := dropCache(c, ckptID)
	if err != nil {
		b.fail(c, r, nil, "dropping the checkpoint from the page cache: %v", err)
		return
	}
	tCold, ok := restart("rstc-" + tag)
	if !ok {
		return
	}
	_, tEmpty, ok := b.runTimed(c, r, rep, "empty-"+tag, cat(hosts, appArgs(0, "0", false))...)
	if !ok {
		return
	}
	if rep == 0 {
		// Correctness of the restarted state (untimed).
		id := "rstv-" + tag
		ids = append(ids, id)
		j, _, ok := b.runTimed(c, r, rep, id, cat([]string{"--restart", ckptID}, hosts, appArgs(r.mib, K, true))...)
		if !ok {
			return
		}
		want := expectedChecksum(r.mib, 2, b.restartIters)
		out := j.stdout.String()
		if got := outputValue(out, "checksum"); got != want || !strings.Contains(out, "verify ok") {
			b.fail(c, r, j, "restarted state: checksum %s, want %s", got, want)
			return
		}
		r.checks = append(r.checks, fmt.Sprintf("%s: restart from %s, verify ok, checksum %s = expected", id, ckptID, want))
	}
	r.plain = append(r.plain, tPlain)
	r.ckpt = append(r.ckpt, tCkpt)
	r.ckptCost = append(r.ckptCost, tCkpt-tPlain)
	r.warm = append(r.warm, tWarm)
	r.cold = append(r.cold, tCold)
	r.empty = append(r.empty, tEmpty)
	b.logf("%g MiB rep %d: plain %.3fs, with checkpoint %.3fs, restart warm %.3fs, cold %.3fs (%d files dropped), empty job %.3fs",
		r.mib, rep, tPlain, tCkpt, tWarm, tCold, dropped, tEmpty)
}

// dropCache asks the kernel to drop the job's checkpoint files from the page cache (they are
// fsynced, so clean): the next restart reads them from the disk. Only these files are
// affected.
func dropCache(c *cluster, id string) (int, error) {
	n := 0
	for _, store := range c.nodes {
		root := filepath.Join(store, id)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			n++
			return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// expectedChecksum is the checksum stateapp prints for size ranks, the ranks' hashes
// computed concurrently.
func expectedChecksum(mib float64, size, iters int) string {
	hs := make([]uint64, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { hs[r] = fill.ExpectedHash(mib, r, iters) })
	}
	wg.Wait()
	return fmt.Sprintf("%016x", fill.Combine(hs))
}
