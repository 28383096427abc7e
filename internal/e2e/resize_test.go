package e2e

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/testbin"
)

// malleableArgs is the resize tests' program: long enough at -pace 3ms for three resizes.
var malleableArgs = []string{"malleable", "-rows", "64", "-cols", "16", "-iters", "1500"}

// resize asks job j for np ranks and waits for mpirun's n-th "resized" line.
func (c *cluster) resize(j *bgJob, np, n int, on ...job.NodeSlots) {
	c.t.Helper()
	rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: np, On: on, Reason: "test"})
	if !rep.OK {
		c.t.Fatalf("resize to %d refused: %s\nstderr:\n%s", np, rep.Error, j.stderr.String())
	}
	j.waitLog(`mpirun: resized \d+ -> \d+ ranks at iteration \d+ in \d+ ms`, n, 60*time.Second)
}

// TestResizeKeepsResultsBitwise: a job with a distributed array goes 4 -> 6 -> 3 -> 5 ranks
// (split, merge, split) through mpirun and a real nats-server, on this machine and on pcmd
// nodes (grow onto a node, shrink, grow onto it again), checkpointing meanwhile; the result
// is bitwise that of an undisturbed run.
func TestResizeKeepsResultsBitwise(t *testing.T) {
	want := referenceDump(t, malleableArgs...)
	for _, where := range []string{"local", "nodes"} {
		t.Run(where, func(t *testing.T) {
			var c *cluster
			run := []string{"--ckpt-every", "7"}
			var grow []job.NodeSlots
			if where == "nodes" {
				c = newCluster(t, "n1", "n2", "n3")
				run = append(run, "--hosts", "n1:2,n2:2")
				grow = []job.NodeSlots{{Node: "n3", Slots: 2}}
			} else {
				c = newCluster(t)
				run = append(run, "-np", "4")
			}
			dump := filepath.Join(t.TempDir(), "out.bin")
			run = append(append(run, prog(malleableArgs[0])), malleableArgs[1:]...)
			j := c.start(t, "rsz-"+where, nil, append(run, "-dump", dump, "-pace", "3ms")...)
			c.waitRunning(t, j.id)
			c.resize(j, 6, 1, grow...)
			c.resize(j, 3, 2)
			c.resize(j, 5, 3, grow...)
			info := c.jobInfo(j.id)
			if info.Size != 5 || len(info.Ranks) != 5 {
				t.Errorf("job info says %d ranks (%d listed), want 5", info.Size, len(info.Ranks))
			}
			if where == "nodes" && (info.Ranks[3].Node != "n3" || info.Ranks[4].Node != "n3") {
				t.Errorf("new ranks on %q and %q, want n3", info.Ranks[3].Node, info.Ranks[4].Node)
			}
			var resizes []reconf.Reconfiguration
			for _, e := range info.Reconfigurations {
				if e.Kind == reconf.Resize {
					resizes = append(resizes, e)
				}
			}
			if len(resizes) != 3 {
				t.Fatalf("%d resizes in the log, want 3: %+v", len(resizes), info.Reconfigurations)
			}
			for _, e := range resizes {
				if e.State != reconf.Committed || e.Bytes == 0 || e.Pause == 0 || e.Iteration == 0 {
					t.Errorf("resize entry %+v, want committed with pause, bytes and iteration", e)
				}
			}
			if code := j.wait(120 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			j.sameDump(dump, want)
		})
	}
}

// TestFailedResizesKeepTheOldSize covers the failure cases of a resize: each is refused or
// aborted with a reason, the job goes on at its old size and its result is unchanged.
func TestFailedResizesKeepTheOldSize(t *testing.T) {
	want := referenceDump(t, malleableArgs...)
	c := newCluster(t, "n1", "n2")
	// n3 runs nothing of ours: its --allow does not cover the program.
	c.startNode("n3", "--allow", "/nonexistent/*")
	cases := []struct {
		name    string
		np      int
		on      []job.NodeSlots
		refused string // the request is refused with this
		aborted string // or mpirun logs the resize aborted with this
	}{
		{name: "zero-ranks", np: 0, refused: "0 ranks, want at least 1"},
		{name: "unknown-node", np: 5, on: []job.NodeSlots{{Node: "nowhere"}}, refused: "no pcmd serves it"},
		{name: "too-few-slots", np: 7, on: []job.NodeSlots{{Node: "n1", Slots: 1}}, refused: "3 new ranks but only 1 slots named"},
		// Without --on a grow takes the job's free slots (--hosts n1:2,n2:2: none), refused at once.
		{name: "no-free-slots", np: 5, refused: "1 new ranks but the job's nodes have 0 free slots (n1:0,n2:0); name nodes with --on"},
		{name: "target-refuses", np: 5, on: []job.NodeSlots{{Node: "n3"}}, aborted: "not allowed by --allow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dump := filepath.Join(t.TempDir(), "out.bin")
			run := append(append([]string{"--hosts", "n1:2,n2:2", prog(malleableArgs[0])}, malleableArgs[1:]...), "-dump", dump, "-pace", "2ms")
			j := c.start(t, "rszfail-"+tc.name, nil, run...)
			c.waitRunning(t, j.id)
			rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: tc.np, On: tc.on, Reason: "test"})
			if tc.refused != "" {
				if rep.OK || !strings.Contains(rep.Error, tc.refused) {
					t.Fatalf("reply %+v, want a refusal containing %q", rep, tc.refused)
				}
			} else {
				if !rep.OK {
					t.Fatalf("request refused: %s", rep.Error)
				}
				j.waitLog(`resize 4 -> 5 .*aborted.*`+regexp.QuoteMeta(tc.aborted), 1, 60*time.Second)
				info := c.jobInfo(j.id)
				if info.Size != 4 || len(info.Reconfigurations) != 1 || info.Reconfigurations[0].State != reconf.Aborted || info.Reconfigurations[0].Error == "" {
					t.Fatalf("job info %+v, want 4 ranks and one aborted resize with a reason", info)
				}
			}
			if code := j.wait(120 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			j.sameDump(dump, want)
		})
	}
}

// TestJoinerDeathBeforeTheCommitAbortsTheResize: the processes a grow starts exit before
// taking their data, while the old ranks send it; the resize is aborted, the old ranks get
// their data back, a shrink that follows succeeds, and the result is the undisturbed one.
func TestJoinerDeathBeforeTheCommitAbortsTheResize(t *testing.T) {
	want := referenceDump(t, malleableArgs...)
	c := newCluster(t)
	dump := filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"-np", "4", prog(malleableArgs[0])}, malleableArgs[1:]...), "-dump", dump, "-pace", "2ms", "-joiner-exits")
	j := c.start(t, "rsz-joiner-dies", nil, run...)
	c.waitRunning(t, j.id)
	if rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: 6, Reason: "test"}); !rep.OK {
		t.Fatalf("refused: %s", rep.Error)
	}
	j.waitLog(`resize 4 -> 6 .*aborted.*exited with status 3`, 1, 60*time.Second)
	// The old world goes on as before: a shrink after the aborted grow succeeds.
	c.resize(j, 3, 1)
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.sameDump(dump, want)
}

// TestResizeOfAJobWithoutDistributedDataIsAborted: heat2d's 2-D decomposition keeps its
// grid in plain registered values, which a resize cannot redistribute; the resize is
// aborted with the reason and the job finishes unchanged.
func TestResizeOfAJobWithoutDistributedDataIsAborted(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "800", "-decomp", "2d"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "rsz-nodata", nil, append(append([]string{"-np", "4", prog(args[0])}, args[1:]...), "-dump", dump, "-pace", "2ms")...)
	c.waitRunning(t, j.id)
	// Refused once rank 0 told mpirun (in Load); aborted by the ranks if asked earlier.
	if rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: 2}); rep.OK {
		j.waitLog(`resize 4 -> 2 ranks aborted at iteration \d+: the job has no distributed data`, 1, 60*time.Second)
	} else if !strings.Contains(rep.Error, "has no distributed data to redistribute") {
		t.Fatalf("reply %+v, want a refusal for lack of distributed data", rep)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.sameDump(dump, want)
}

// TestSolversSplitAndMergeOnTwoNodesKeepResultsBitwise is the resize test of record for the
// real solvers: heat2d and jacobi, on two pcmd nodes and a real nats-server, checkpointing
// meanwhile, go 4 -> 6 ranks (grow onto n2), 6 -> 3 (shrink off n2 and one rank of n1),
// 3 -> 5 with uneven weights (grow onto n2 again, its ranks holding twice the rows), and
// rebalance their 5 ranks in place with other weights; every result is bitwise that of an
// undisturbed run on 4 ranks.
func TestSolversSplitAndMergeOnTwoNodesKeepResultsBitwise(t *testing.T) {
	apps := map[string][]string{
		"heat2d": {"heat2d", "-n", "96", "-iters", "3000"},
		"jacobi": {"jacobi", "-n", "256", "-maxiters", "3000", "-tol", "0"},
	}
	for name, args := range apps {
		t.Run(name, func(t *testing.T) {
			want := referenceDump(t, args...)
			c := newCluster(t, "n1", "n2")
			dump := filepath.Join(t.TempDir(), "out.bin")
			run := append([]string{"--hosts", "n1:4", "--ckpt-every", "7", prog(args[0])}, args[1:]...)
			j := c.start(t, "rsz-"+name, nil, append(run, "-dump", dump, "-pace", "3ms")...)
			c.waitRunning(t, j.id)
			c.resize(j, 6, 1, job.NodeSlots{Node: "n2", Slots: 2})
			c.resize(j, 3, 2, job.NodeSlots{Node: "n2"}, job.NodeSlots{Node: "n1", Slots: 1})
			grow := []float64{1, 1, 1, 2, 2}
			if rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: 5, Weights: grow,
				On: []job.NodeSlots{{Node: "n2", Slots: 2}}, Reason: "test"}); !rep.OK {
				t.Fatalf("weighted grow refused: %s", rep.Error)
			}
			j.waitLog(`mpirun: resized 3 -> 5 ranks at iteration \d+ in \d+ ms`, 1, 60*time.Second)
			again := []float64{3, 1, 1, 1, 2}
			if rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: 5, Weights: again, Reason: "test"}); !rep.OK {
				t.Fatalf("rebalance refused: %s", rep.Error)
			}
			j.waitLog(`mpirun: rebalanced 5 ranks at iteration \d+ in \d+ ms, \S+ \S+ moved`, 1, 60*time.Second)
			info := c.jobInfo(j.id)
			if info.Size != 5 || len(info.Ranks) != 5 || info.Ranks[3].Node != "n2" || info.Ranks[4].Node != "n2" || info.Ranks[2].Node != "n1" {
				t.Errorf("job info %+v, want ranks 0-2 on n1 and 3-4 on n2", info)
			}
			var resizes []reconf.Reconfiguration
			for _, e := range info.Reconfigurations {
				if e.Kind == reconf.Resize {
					resizes = append(resizes, e)
				}
			}
			if len(resizes) != 4 || !slices.Equal(resizes[2].Weights, grow) || !slices.Equal(resizes[3].Weights, again) {
				t.Fatalf("resizes in the log %+v, want 4 with the weights asked for", resizes)
			}
			for _, e := range resizes {
				if e.State != reconf.Committed || e.Bytes == 0 || e.Iteration == 0 {
					t.Errorf("resize entry %+v, want committed with bytes and iteration", e)
				}
			}
			if code := j.wait(180 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			j.sameDump(dump, want)
		})
	}
}

// TestOldRankDeathBeforeTheCommitAbortsTheResizeAndTheJobRecovers: an old rank is killed
// while the resize moves the data (the joiners stall before taking theirs, holding the old
// ranks inside the resize); mpirun aborts the resize naming the rank, then the job's failure
// path follows: it recovers from its checkpoint at the old size and ends with the undisturbed
// result.
func TestOldRankDeathBeforeTheCommitAbortsTheResizeAndTheJobRecovers(t *testing.T) {
	want := referenceDump(t, malleableArgs...)
	c := newCluster(t)
	store, dump := t.TempDir(), filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"-np", "4", "--ckpt-every", "7", "--ckpt-dir", store, prog(malleableArgs[0])}, malleableArgs[1:]...),
		"-dump", dump, "-pace", "2ms", "-joiner-stalls", "30s")
	j := c.start(t, "rsz-old-dies", nil, run...)
	c.waitRunning(t, j.id)
	testbin.WaitFor(t, 60*time.Second, "a committed checkpoint of job "+j.id, func() bool {
		return newestCheckpoint(t, store, j.id) >= 14
	})
	if rep := c.control(j.id, job.ControlRequest{Kind: job.ControlResize, NP: 6, Reason: "test"}); !rep.OK {
		t.Fatalf("refused: %s", rep.Error)
	}
	testbin.WaitFor(t, 60*time.Second, "the new world's table", func() bool {
		for _, e := range c.jobInfo(j.id).Reconfigurations {
			if e.Kind == reconf.Resize && e.State == reconf.Prepared {
				return true
			}
		}
		return false
	})
	pid := c.jobInfo(j.id).Ranks[2].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.waitLog(`resize 4 -> 6 ranks aborted: rank 2 \(pid `+strconv.Itoa(pid)+`\) ended: was killed by signal killed`, 1, 30*time.Second)
	j.waitLog(`rank 2 \(pid `+strconv.Itoa(pid)+`\) was killed by signal killed; recovering \(1 of \d+\)`, 1, 30*time.Second)
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.sameDump(dump, want)
}
