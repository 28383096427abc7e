//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// TestChaosKillDrainJoinNATSRestartAndHangKeepTheResult is issue 16's chaos test: heat2d on
// 4 ranks over 3 pcmd nodes, checkpointing (each piece on its node and on a buddy), while
// the test
//
//  1. kills node n1, its pcmd and its 2 ranks (SIGKILL), and wipes its disk: mpirun
//     recovers the job by itself onto the free slots of n2 and n3, n1's pieces read from
//     their buddy copies;
//  2. adds node n4, which joins the job with its free slots;
//  3. drains n2 (pcmd drain): its 2 ranks migrate to n4 and n2's pcmd exits;
//  4. restarts the NATS server after a 3 s outage: everyone reconnects;
//  5. SIGSTOPs rank 2: it is declared failed after --hang-timeout and the job recovers again.
//
// The job finishes with the checksum (the dump) of an undisturbed run, and mpirun's log
// accounts for every event. Each event waits for a checkpoint committed after the previous
// one, so that no recovery goes back further than it must.
func TestChaosKillDrainJoinNATSRestartAndHangKeepTheResult(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "10000"}
	want := referenceDump(t, args...)
	ns := newRestartableNATS(t)
	c := newClusterAt(t, ns.url())
	// Heartbeats every second (mpirun declares a node gone after three missed): the test's
	// usual 200 ms lets a loaded machine lose a healthy node, an event the test did not make.
	node := []string{"--allow", bin + "/*", "--heartbeat", "1s"}
	n1 := c.startNode("n1", node...)
	n2 := c.startNode("n2", node...)
	c.startNode("n3", node...)
	const id = "chaos"
	committed, err := c.nc.SubscribeSync(job.CommittedSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, id, nil, "-np", "4", "--hosts", "n1:2,n2:2,n3:2", "--ckpt-every", "20", "--hang-timeout", "4s",
		prog("heat2d"), "-n", "48", "-iters", "10000", "-pace", "5ms", "-dump", dump)
	c.waitRunning(t, id)
	// mpirun deals the ranks round robin: 0 and 3 on n1, 1 on n2, 2 on n3.
	info := c.jobInfo(id)
	if info.Size != 4 || info.Ranks[0].Node != "n1" || info.Ranks[1].Node != "n2" || info.Ranks[2].Node != "n3" || info.Ranks[3].Node != "n1" {
		t.Fatalf("placement %+v, want ranks 0 and 3 on n1, 1 on n2, 2 on n3", info.Ranks)
	}
	newCommit := func(after string) {
		t.Helper()
		for {
			if _, err := committed.NextMsg(0); err != nil {
				break // the reports of before the event are gone
			}
		}
		if _, err := committed.NextMsg(90 * time.Second); err != nil {
			t.Fatalf("no checkpoint committed after %s: %v\n%s", after, err, j.stderr.String())
		}
	}
	newCommit("the start")

	// 1. A node crashes with its ranks and its disk.
	ranks := childrenOf(n1.Process.Pid)
	if len(ranks) != 2 {
		t.Fatalf("n1 runs processes %v, want its 2 ranks", ranks)
	}
	c.loseNode("n1", n1.Process)
	for _, pid := range ranks {
		syscall.Kill(pid, syscall.SIGKILL) // gone with pcmd already, or now
	}
	j.waitLog(`recovering \(1 of 3\)`, 1, 60*time.Second)
	j.waitLog(`recovered from the failure of rank [03]: every rank restarted from checkpoint \d+`, 1, 90*time.Second)
	// n1's disk is gone: its ranks' pieces came from their buddy copies on n2 (read there by
	// a rank restarted on n2, fetched from n2 by one restarted on n3).
	j.waitLog(`pcm: rank [03]: reading its piece of checkpoint \d+ from node n2`, 1, time.Second)
	if log := j.stderr.String(); strings.Contains(log, "was unusable") || strings.Contains(log, "falling back") {
		t.Fatalf("the recovery lost the checkpoint it decided on:\n%s", log)
	}
	// Ranks 0 and 3 take the slots left on n2 and n3.
	for _, r := range c.jobInfo(id).Ranks {
		if r.Node != "n2" && r.Node != "n3" {
			t.Fatalf("after n1's loss: rank %d on %s, want every rank on n2 or n3", r.Rank, r.Node)
		}
	}
	newCommit("the recovery")

	// 2. A node is added.
	c.startNode("n4", node...)
	j.waitLog(`node n4 joined \(8 free slots\)`, 1, 30*time.Second)

	// 3. A node leaves gracefully. It places its ranks on the peers it heard: n4 first.
	testbin.WaitFor(t, 30*time.Second, "n2 to hear n4", func() bool {
		views, _ := nodeclient.DiscoverNodes(c.nc, 300*time.Millisecond, nil)
		for _, v := range views {
			if v.Self.Name == "n2" {
				return slices.ContainsFunc(v.Peers, func(p job.PeerInfo) bool { return p.Info.Name == "n4" })
			}
		}
		return false
	})
	rep, err := nodestatus.Drain(c.nc, "n2", job.DrainRequest{Reason: "chaos test"}, nil, 60*time.Second)
	if err != nil || rep.Error != "" {
		t.Fatalf("drain n2: %v %s\n%s", err, rep.Error, j.stderr.String())
	}
	j.waitLog(`mpirun: migrated rank \d from n2 to n4 at iteration`, 2, 60*time.Second)
	if !exited(n2, 30*time.Second) {
		t.Fatalf("pcmd n2 did not exit after its drain\n%s", j.stderr.String())
	}
	newCommit("the drain")

	// 4. The control plane goes away and comes back.
	ns.stop()
	time.Sleep(3 * time.Second) // the outage
	ns.start()
	j.waitLog(`reconnected to NATS`, 1, 60*time.Second)
	newCommit("the NATS restart")

	// 5. A rank freezes: rank 2, on n3 from the start.
	pid := rankPID(t, id, 2)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	j.waitLog(`rank 2 \(pid `+strconv.Itoa(pid)+` on n3\) sent no sign of life for 4(\.\d+)?s \(stopped or frozen\): declared failed; recovering \(2 of 3\)`, 1, 60*time.Second)

	if code := j.wait(300 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	// The log accounts for every event, in order.
	log := j.stderr.String()
	events := []string{
		"recovering (1 of 3)", "recovered from the failure of rank",
		"node n4 joined",
		"migrated rank", // n2's ranks to n4
		"lost connection to NATS", "reconnected to NATS",
		"declared failed; recovering (2 of 3)", "recovered from the failure of rank 2",
	}
	at := 0
	for _, e := range events {
		i := strings.Index(log[at:], e)
		if i < 0 {
			t.Fatalf("mpirun's log does not account for %q after byte %d:\n%s", e, at, log)
		}
		at += i + len(e)
	}
	if n := strings.Count(log, "recovering ("); n != 2 {
		t.Errorf("%d recoveries, want 2 (the lost node and the frozen rank):\n%s", n, log)
	}
	j.sameDump(dump, want)
}

// childrenOf returns the processes whose parent is pid (a pcmd's ranks), forked by any of
// its threads.
func childrenOf(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, f := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// TestRecoveryWithBothCopiesOfTheNewestCheckpointLostFallsBack: "losing both copies falls
// back to the previous checkpoint and says so", under automatic recovery. The job is frozen
// (every rank SIGSTOPped) right after a commit; the buddy copies (on n2) of n1's pieces of
// every checkpoint from n1's newest committed one on are deleted, then n1 is lost with its
// ranks and disk. mpirun recovers the job by itself: the restarted ranks find no copy of
// those pieces, fall back to the checkpoint before, say so, and the job ends with the
// undisturbed result.
func TestRecoveryWithBothCopiesOfTheNewestCheckpointLostFallsBack(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "1500"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	node := []string{"--allow", bin + "/*", "--heartbeat", "1s"}
	n1 := c.startNode("n1", node...)
	n2 := c.startNode("n2", node...)
	n3 := c.startNode("n3", node...)
	const id = "bothlost"
	committed, err := c.nc.SubscribeSync(job.CommittedSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	// Every checkpoint is kept, so that the one before the lost ones is still there.
	j := c.start(t, id, []string{job.EnvCkptKeep + "=1000"}, "-np", "4", "--hosts", "n1:2,n2:2,n3:2", "--ckpt-every", "10",
		"--hang-timeout", "60s", prog("heat2d"), "-n", "48", "-iters", "1500", "-pace", "5ms", "-dump", dump)
	for k := range 3 {
		if _, err := committed.NextMsg(90 * time.Second); err != nil {
			t.Fatalf("commit report %d: %v\n%s", k+1, err, j.stderr.String())
		}
	}
	// Freeze the job: no checkpoint commits or copies while the copies are deleted.
	lost := childrenOf(n1.Process.Pid)
	survivors := append(childrenOf(n2.Process.Pid), childrenOf(n3.Process.Pid)...)
	if len(lost) != 2 || len(survivors) != 2 {
		t.Fatalf("ranks %v on n1 and %v on n2 and n3, want 2 and 2", lost, survivors)
	}
	for _, pid := range append(slices.Clone(lost), survivors...) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	s1, err := ckptstore.Open(c.stores["n1"], nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s1.Checkpoints(id)
	if err != nil || len(ms) < 2 {
		t.Fatalf("n1's committed checkpoints: %d, %v; want at least 2", len(ms), err)
	}
	newest := uint64(0)
	for _, m := range ms {
		newest = max(newest, m.Seq)
	}
	// mpirun deals ranks round robin: 0 and 3 are n1's, and n2 (the next node) is their buddy.
	seqs, _ := os.ReadDir(filepath.Join(c.stores["n2"], id))
	deleted := 0
	for _, e := range seqs {
		if seq, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && seq >= newest {
			for _, r := range []string{"rank-0.piece", "rank-3.piece"} {
				if os.Remove(filepath.Join(c.stores["n2"], id, e.Name(), r)) == nil {
					deleted++
				}
			}
		}
	}
	if deleted < 2 {
		t.Fatalf("deleted %d copies of n1's pieces of checkpoint %d and later on n2, want both", deleted, newest)
	}
	c.loseNode("n1", n1.Process)
	for _, pid := range lost {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range survivors {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`recovering \(1 of 3\)`, 1, time.Second)
	j.waitLog(`falling back to checkpoint \d+`, 1, time.Second)
	j.waitLog(`recovered from the failure of rank \d: .*; checkpoint \d+ was unusable`, 1, time.Second)
	m := regexp.MustCompile(`recovered from the failure of rank \d: every rank restarted from checkpoint (\d+)`).FindStringSubmatch(j.stderr.String())
	if m == nil {
		t.Fatalf("no recovery logged:\n%s", j.stderr.String())
	}
	if used, _ := strconv.ParseUint(m[1], 10, 64); used >= newest {
		t.Errorf("recovered from checkpoint %d, want one before %d, whose copies were lost:\n%s", used, newest, j.stderr.String())
	}
	j.sameDump(dump, want)
}
