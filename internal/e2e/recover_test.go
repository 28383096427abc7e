//go:build linux

package e2e

// Automatic recovery through mpirun, with real processes: a checkpointing job whose rank is
// killed or stopped recovers by itself and ends with the result of an undisturbed run
// (heat2d is bitwise reproducible); each dead end ends in bounded time with a clear message.

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/nats-io/nats.go"
)

// startLocal starts mpirun in the background with ranks on this machine, in runtime
// directory rt.
func startLocal(t *testing.T, rt, id string, args ...string) *bgJob {
	t.Helper()
	j := &bgJob{t: t, id: id, done: make(chan error, 1)}
	j.cmd = exec.Command(prog("mpirun"), append([]string{"--job-id", id}, args...)...)
	j.cmd.Env = testbin.IsolatedEnv(rt)
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	t.Cleanup(func() { j.cmd.Process.Kill() })
	return j
}

// rankPID returns the pid of rank of job id on this machine, waiting for it to exist.
func rankPID(t *testing.T, id string, rank int) int {
	t.Helper()
	pid := 0
	testbin.WaitFor(t, 30*time.Second, "rank "+strconv.Itoa(rank)+" of job "+id, func() bool {
		var ok bool
		pid, ok = testbin.RankPID(id, rank)
		return ok
	})
	return pid
}

// waitCommitted waits until job id has committed and reported a checkpoint of its run: a
// checkpoint's manifest is on disk a little before the ranks agree it is committed and rank
// 0 reports it, and at most one is in flight, so the one of iteration 10 is reported once the
// one of iteration 20 is on disk.
func waitCommitted(t *testing.T, j *bgJob, store string) {
	t.Helper()
	testbin.WaitFor(t, 60*time.Second, "two committed checkpoints of job "+j.id, func() bool {
		select {
		case <-j.done:
			t.Fatalf("job %s ended before its first checkpoint:\n%s", j.id, j.stderr.String())
		default:
		}
		return newestCheckpoint(t, store, j.id) >= 20
	})
}

// heat2dRecovery is the job of the recovery tests: long enough (paced) to be hit after its
// first checkpoint.
var heat2dRecovery = []string{"heat2d", "-n", "48", "-iters", "240"}

func recoveryJob(t *testing.T, id string, extra ...string) (j *bgJob, store, dump string) {
	t.Helper()
	store, dump = t.TempDir(), filepath.Join(t.TempDir(), "out.bin")
	args := append([]string{"-np", "4", "--ckpt-every", "10", "--ckpt-dir", store}, extra...)
	args = append(append(args, prog(heat2dRecovery[0])), heat2dRecovery[1:]...)
	args = append(args, "-pace", "10ms", "-dump", dump)
	return startLocal(t, t.TempDir(), id, args...), store, dump
}

// "A rank that dies is recovered": kill -9 of a rank of a checkpointing job; every rank
// restarts from the newest committed checkpoint and the result is the undisturbed run's.
func TestKilledRankIsRecoveredWithTheUndisturbedResult(t *testing.T) {
	want := referenceDump(t, heat2dRecovery...)
	j, store, dump := recoveryJob(t, "rec-kill")
	waitCommitted(t, j, store)
	pid := rankPID(t, j.id, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`rank 1 \(pid `+strconv.Itoa(pid)+`\) was killed by signal killed; recovering \(1 of 3\): every rank restarts from checkpoint \d+ \(iteration \d+\)`, 1, time.Second)
	j.waitLog(`recovered from the failure of rank 1: every rank restarted from checkpoint \d+ \(iteration \d+\), \d+ iterations lost in .* \(detection .*, respawn .*, load .*\)`, 1, time.Second)
	j.sameDump(dump, want)
}

// "A rank that stops is declared failed after the timeout and recovered": SIGSTOP freezes
// a rank; its peers, blocked waiting for it, keep beating; it alone is declared failed.
func TestStoppedRankIsDeclaredFailedAndRecovered(t *testing.T) {
	want := referenceDump(t, heat2dRecovery...)
	j, store, dump := recoveryJob(t, "rec-stop", "--hang-timeout", "2s")
	waitCommitted(t, j, store)
	pid := rankPID(t, j.id, 2)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`rank 2 \(pid `+strconv.Itoa(pid)+`\) sent no sign of life for 2(\.\d+)?s \(stopped or frozen\): declared failed; recovering \(1 of 3\)`, 1, time.Second)
	j.waitLog(`recovered from the failure of rank 2`, 1, time.Second)
	if n := strings.Count(j.stderr.String(), "declared failed"); n != 1 {
		t.Errorf("%d ranks declared failed, want only the stopped one:\n%s", n, j.stderr.String())
	}
	j.sameDump(dump, want)
}

// Dead ends: each ends the job in bounded time (the mpirun helper's limit) with a clear
// message and a failed status.
func TestRecoveryDeadEndsEndTheJobClearly(t *testing.T) {
	heat := func(extra ...string) []string {
		return append([]string{"-np", "3", "--ckpt-dir", t.TempDir(), "--ckpt-sync"}, append(extra, prog("heat2d"), "-n", "41", "-iters", "40")...)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no checkpoint yet", append(heat("--job-id", "de1", "--ckpt-every", "1000"), "-crash-after", "5"),
			[]string{"rank 1 (pid ", ") exited with status 1; cannot recover: no checkpoint of job de1 is committed yet"}},
		{"recoveries exhausted", append(heat("--job-id", "de2", "--ckpt-every", "5", "--max-recoveries", "2"), "-crash-after", "12"),
			[]string{"recovering (1 of 2)", "recovering (2 of 2)", "; cannot recover: 2 recoveries used (--max-recoveries 2)"}},
		{"no recovery asked", append(heat("--job-id", "de3", "--ckpt-every", "5", "--no-recover"), "-crash-after", "12"),
			[]string{"rank 1 (pid "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := mpirunEnv(t, 90*time.Second, testbin.IsolatedEnv(t.TempDir()), c.args...)
			if res.code != 1 {
				t.Errorf("exit %d, want 1", res.code)
			}
			for _, w := range c.want {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, res.stderr)
				}
			}
			if c.name == "no recovery asked" && strings.Contains(res.stderr, "recover") {
				t.Errorf("--no-recover job mentions recovery:\n%s", res.stderr)
			}
		})
	}
}

// Dead end: every copy of the checkpoint is lost. The ranks are frozen (no checkpoint is
// written meanwhile), the job's store is wiped, and a rank is killed: the restarted ranks find
// nothing to load, rank 0 says so, and mpirun ends the job with that reason instead of
// recovering again into the same loss.
func TestEveryCopyOfTheCheckpointLostEndsTheJobClearly(t *testing.T) {
	j, store, _ := recoveryJob(t, "rec-lost")
	waitCommitted(t, j, store)
	var pids []int
	for r := range 4 {
		pids = append(pids, rankPID(t, j.id, r))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(store, j.id)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(120 * time.Second); code != 1 {
		t.Errorf("exit %d, want 1\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`recovering \(1 of 3\)`, 1, time.Second)
	j.waitLog(`; cannot recover: no copy of checkpoint \d+ or an older one can be restored \(every copy of a piece is lost\): pcm: restart from job rec-lost: no valid checkpoint`, 1, time.Second)
	if strings.Contains(j.stderr.String(), "recovering (2 of 3)") {
		t.Errorf("recovered again after every copy was lost:\n%s", j.stderr.String())
	}
}

// Dead end on nodes: the node of a rank is lost, no surviving node has a free slot of the
// job's, and the job cannot shrink (heat2d's 2-D decomposition is a plain grid, no
// pcm.NewBlock): the job ends, naming the rank, the missing slot and why it cannot shrink (a
// malleable job shrinks instead: TestLostNodeShrinksTheJobAndItsReturnJoinsIt).
func TestLostNodeWithoutRoomEndsTheJobNamingTheMissingSlots(t *testing.T) {
	c := newCluster(t, "n1")
	n2 := c.startNode("n2", "--allow", bin+"/*")
	// Rank 0 reports each committed checkpoint to mpirun; the test listens too.
	committed, err := c.nc.SubscribeSync(job.CommittedSubject("de-node"))
	if err != nil {
		t.Fatal(err)
	}
	j := c.start(t, "de-node", nil, "--hosts", "n1:1,n2:1", "--ckpt-every", "5", "--ckpt-sync",
		prog("heat2d"), "-n", "41", "-decomp", "2d", "-iters", "100000", "-pace", "5ms")
	if _, err := committed.NextMsg(60 * time.Second); err != nil {
		t.Fatalf("no committed checkpoint reported: %v\n%s", err, j.stderr.String())
	}
	if err := n2.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(60 * time.Second); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	j.waitLog(`rank 1 .*; cannot recover: no surviving node has room for rank 1 \(1 slot\(s\) missing; lost: n2; surviving: n1\); the job cannot shrink: its ranks registered no distributed data \(pcm.NewBlock\)`, 1, time.Second)
}

// "mpirun --restart JOB remembers the program, its arguments and the rank count": a job
// stopped by its timeout after a checkpoint is resumed by naming it alone.
func TestRestartRemembersProgramArgumentsAndRanks(t *testing.T) {
	want := referenceDump(t, heat2dRecovery...)
	rt, store := t.TempDir(), t.TempDir()
	dump := filepath.Join(t.TempDir(), "out.bin")
	env := testbin.IsolatedEnv(rt)
	args := append([]string{"-np", "4", "--job-id", "rem1", "--ckpt-every", "10", "--ckpt-dir", store, "--timeout", "2s",
		prog(heat2dRecovery[0])}, heat2dRecovery[1:]...)
	first := mpirunEnv(t, 60*time.Second, env, append(args, "-pace", "20ms", "-dump", dump)...)
	if first.code != 124 || newestCheckpoint(t, store, "rem1") <= 0 {
		t.Fatalf("first run: exit %d (want 124 after a checkpoint)\n%s", first.code, first.stderr)
	}
	res := mpirunEnv(t, 120*time.Second, env, "--restart", "rem1", "--job-id", "rem2")
	if res.code != 0 {
		t.Fatalf("restart: exit %d\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "restarts from job rem1 checkpoint") {
		t.Errorf("no restart reported:\n%s", res.stderr)
	}
	got, err := os.ReadFile(dump)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restarted result differs from the undisturbed run (%v)\n%s", err, res.stderr)
	}
	// Without a record of the job, the command line must say what to run.
	res = mpirunEnv(t, 30*time.Second, env, "--restart", "nosuchjob")
	if res.code != 2 || !strings.Contains(res.stderr, "--restart nosuchjob: missing PROGRAM, and mpirun has no record of how job nosuchjob was started") {
		t.Errorf("unknown job: exit %d\n%s", res.code, res.stderr)
	}
}

// On pcmd nodes: a killed rank's job restarts every rank on its node (each node keeps its
// ranks' pieces) through the nodes' spawners, and ends with the undisturbed result.
func TestKilledRankOnNodesIsRecoveredInPlace(t *testing.T) {
	j := killRankOnNodesAndRecover(t, newCluster(t, "n1", "n2"), "rec-nodes")
	j.waitLog(`rank 1 \(pid \d+ on n2\) was killed by signal killed; recovering \(1 of 3\)`, 1, time.Second)
}

// killRankOnNodesAndRecover runs heat2dRecovery as job id on c's nodes n1 and n2 (2 ranks
// each, a checkpoint every 10 iterations), kills rank 1 once a checkpoint is committed, and
// checks that the job recovers and ends with the undisturbed result.
func killRankOnNodesAndRecover(t *testing.T, c *cluster, id string) *bgJob {
	t.Helper()
	want := referenceDump(t, heat2dRecovery...)
	committed, err := c.nc.SubscribeSync(job.CommittedSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	args := append([]string{"--hosts", "n1:2,n2:2", "--ckpt-every", "10", prog(heat2dRecovery[0])}, heat2dRecovery[1:]...)
	j := c.start(t, id, nil, append(args, "-pace", "10ms", "-dump", dump)...)
	if _, err := committed.NextMsg(60 * time.Second); err != nil {
		t.Fatalf("no committed checkpoint reported: %v\n%s", err, j.stderr.String())
	}
	if err := syscall.Kill(rankPID(t, j.id, 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`recovered from the failure of rank 1`, 1, time.Second)
	j.sameDump(dump, want)
	return j
}

// A NATS outage silences every rank's beats at once: while mpirun's own connection is down
// no rank is declared hung, and after it every rank gets a whole timeout to be heard again.
func TestNATSOutageIsNotTakenForHungRanks(t *testing.T) {
	if _, err := os.Stat(debianNATS); err != nil {
		t.Skip(debianNATS + " not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	url := "nats://127.0.0.1:" + port
	server := func() *exec.Cmd {
		cmd := exec.Command(debianNATS, "-a", "127.0.0.1", "-p", port)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	srv := server()
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	testbin.WaitFor(t, 10*time.Second, "nats-server", func() bool {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	j := startLocal(t, t.TempDir(), "outage", "--nats", url, "-np", "3", "--hang-timeout", "1s",
		prog("heat2d"), "-n", "48", "-iters", "400", "-pace", "10ms")
	rankPID(t, j.id, 2) // running
	time.Sleep(500 * time.Millisecond)
	srv.Process.Kill()
	srv.Wait()
	j.waitLog(`lost connection to NATS`, 1, 10*time.Second)
	time.Sleep(3 * time.Second) // the outage: three hang timeouts
	srv = server()
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	if strings.Contains(j.stderr.String(), "declared failed") {
		t.Errorf("a rank was declared hung during the outage:\n%s", j.stderr.String())
	}
}
