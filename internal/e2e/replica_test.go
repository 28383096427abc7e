package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// crashOnTwoNodes runs heat2d on n1 and n2 with synchronous checkpoints every 8 iterations
// until it crashes after iteration 21: checkpoints 1 (iteration 8) and 2 (iteration 16) are
// committed, each rank's piece on its own node and on its buddy.
func crashOnTwoNodes(t *testing.T, c *cluster, id string) {
	t.Helper()
	crashed := c.start(t, id, nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "8", "--ckpt-sync", prog("heat2d"), "-n", "41", "-iters", "40", "-crash-after", "21")
	if code := crashed.wait(60 * time.Second); code == 0 {
		t.Fatalf("the crashing run exited 0:\n%s", crashed.stderr.String())
	}
}

// restartOnN3N2 restarts job from (heat2d, as crashOnTwoNodes ran it) as job id on n3 and
// n2, and returns the finished job and its dump.
func restartOnN3N2(t *testing.T, c *cluster, id, from string) (*bgJob, string) {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, id, nil, "--hosts", "n3:2,n2:2", "--restart", from, prog("heat2d"), "-n", "41", "-iters", "40", "-dump", dump)
	if code := j.wait(60 * time.Second); code != 0 {
		t.Fatalf("restart: exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	return j, dump
}

// loseNode kills a node's pcmd (SIGKILL, as a crash) and wipes its disk.
func (c *cluster) loseNode(name string, cmd interface{ Signal(os.Signal) error }) {
	c.t.Helper()
	if err := cmd.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	if err := os.RemoveAll(c.stores[name]); err != nil {
		c.t.Fatal(err)
	}
}

// TestDoubleCheckpointLosingANodeLosesNoCommittedCheckpoint: Charm++'s double checkpointing
// keeps every piece on its node and on a buddy, so that a node lost with its disk loses no
// committed checkpoint. The job ran on n1 and n2; n1 is lost; the restart on n2 and n3
// resumes from the newest checkpoint, the pieces of n1's ranks read from their copies on n2.
func TestDoubleCheckpointLosingANodeLosesNoCommittedCheckpoint(t *testing.T) {
	args := []string{"heat2d", "-n", "41", "-iters", "40"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n2", "n3")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	crashOnTwoNodes(t, c, "dc1")
	for _, rank := range []string{"rank-0", "rank-1"} {
		if _, err := os.Stat(filepath.Join(c.stores["n2"], "dc1", "00000000000000000002", rank+".piece")); err != nil {
			t.Fatalf("n2 holds no copy of n1's %s: %v", rank, err)
		}
	}
	c.loseNode("n1", n1.Process)

	j, dump := restartOnN3N2(t, c, "dc2", "dc1")
	errs := j.stderr.String()
	if !strings.Contains(errs, "restarts from job dc1 checkpoint 2 (iteration 16)") {
		t.Errorf("restart should resume from checkpoint 2, iteration 16:\n%s", errs)
	}
	if !strings.Contains(errs, "checkpoint 2 from node n2") {
		t.Errorf("the pieces of n1's ranks should come from their copies on n2:\n%s", errs)
	}
	j.sameDump(dump, want)
}

// TestDoubleCheckpointLosingBothCopiesFallsBack: with a piece of the newest checkpoint lost
// on its node and on its buddy, the restart falls back to the checkpoint before, and says so.
func TestDoubleCheckpointLosingBothCopiesFallsBack(t *testing.T) {
	args := []string{"heat2d", "-n", "41", "-iters", "40"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n2", "n3")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	crashOnTwoNodes(t, c, "dc3")
	c.loseNode("n1", n1.Process)
	// n2's copy of rank 0's piece of checkpoint 2 is damaged too: both copies are gone.
	if err := os.Remove(filepath.Join(c.stores["n2"], "dc3", "00000000000000000002", "rank-0.piece")); err != nil {
		t.Fatal(err)
	}

	j, dump := restartOnN3N2(t, c, "dc4", "dc3")
	errs := j.stderr.String()
	if !strings.Contains(errs, "falling back to checkpoint 1") || !strings.Contains(errs, "restarts from job dc3 checkpoint 1 (iteration 8)") {
		t.Errorf("restart should say it falls back to checkpoint 1, iteration 8:\n%s", errs)
	}
	j.sameDump(dump, want)
}

// TestDoubleCheckpointInMemoryLosingANodeLosesNoCommittedCheckpoint is the node-loss test
// with the pieces in the nodes' memory (pcmd serve --ckpt-store mem): n1 dies with its
// memory, and the restart reads the copies of its ranks' pieces from n2's.
func TestDoubleCheckpointInMemoryLosingANodeLosesNoCommittedCheckpoint(t *testing.T) {
	args := []string{"heat2d", "-n", "41", "-iters", "40"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	mem := []string{"--allow", bin + "/*", "--ckpt-store", "mem", "--ckpt-mem-cap", "64"}
	n1 := c.startNode("n1", mem...)
	t.Cleanup(func() { removeMemStores(t, "n1") }) // killed, n1 cannot remove its own
	c.startNode("n2", mem...)
	c.startNode("n3", mem...)
	crashOnTwoNodes(t, c, "dm1")
	if err := n1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	j, dump := restartOnN3N2(t, c, "dm2", "dm1")
	errs := j.stderr.String()
	if !strings.Contains(errs, "restarts from job dm1 checkpoint 2 (iteration 16)") || !strings.Contains(errs, "checkpoint 2 from node n2") {
		t.Errorf("restart should resume from checkpoint 2 with n1's pieces from n2's memory:\n%s", errs)
	}
	j.sameDump(dump, want)
}

// TestMemoryStoreRefusesCheckpointsBeyondItsCap: a checkpoint that does not fit in the
// nodes' memory cap fails with a message that says so, and the job goes on.
func TestMemoryStoreRefusesCheckpointsBeyondItsCap(t *testing.T) {
	c := newCluster(t)
	mem := []string{"--allow", bin + "/*", "--ckpt-store", "mem", "--ckpt-mem-cap", "1"}
	c.startNode("n1", mem...)
	c.startNode("n2", mem...)
	j := c.start(t, "dmcap", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "5", prog("heat2d"), "-n", "1024", "-iters", "12")
	code := j.wait(60 * time.Second)
	if errs := j.stderr.String(); !strings.Contains(errs, "store full") || !strings.Contains(errs, "MiB cap") {
		t.Fatalf("exit %d; want the checkpoint refused for the memory cap:\n%s", code, errs)
	}
}

// removeMemStores removes the memory stores a killed pcmd named node left behind: only
// those whose owner lock can be taken, since other tests running at the same time may have
// live nodes of the same name.
func removeMemStores(t *testing.T, node string) {
	dirs, _ := filepath.Glob("/dev/shm/mpios-ckpt-" + node + "-*")
	for _, d := range dirs {
		owner, err := ckptstore.TryLock(filepath.Join(d, ".owner"))
		if err != nil {
			continue // a live pcmd's
		}
		os.RemoveAll(d)
		owner.Unlock()
	}
}

// TestDoubleCheckpointInMemoryKeepsSparseCopiesOfBackgroundCheckpoints: background
// checkpoints (the default) send their buddy copies as sparse streams, without the zero
// blocks of heat2d's grid that the heat has not reached; the copies are whole all the same:
// with n1 lost, a restart of the finished job from its last checkpoint reads n1's pieces
// from n2's memory and ends with the undisturbed result.
func TestDoubleCheckpointInMemoryKeepsSparseCopiesOfBackgroundCheckpoints(t *testing.T) {
	args := []string{"heat2d", "-n", "200", "-iters", "30"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	// The nodes receive the copies at a lower priority than their ranks.
	mem := []string{"--allow", bin + "/*", "--ckpt-store", "mem", "--ckpt-mem-cap", "64", "--copy-nice", "10"}
	n1 := c.startNode("n1", mem...)
	t.Cleanup(func() { removeMemStores(t, "n1") }) // killed, n1 cannot remove its own
	c.startNode("n2", mem...)
	c.startNode("n3", mem...)
	first := c.start(t, "ds1", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "10", prog("heat2d"), "-n", "200", "-iters", "30")
	if code := first.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, first.stderr.String())
	}
	if errs := first.stderr.String(); strings.Contains(errs, "no buddy copy") {
		t.Fatalf("a buddy copy failed:\n%s", errs)
	}
	if err := n1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "ds2", nil, "--hosts", "n3:2,n2:2", "--restart", "ds1", prog("heat2d"), "-n", "200", "-iters", "30", "-dump", dump)
	if code := j.wait(60 * time.Second); code != 0 {
		t.Fatalf("restart: exit %d\n%s", code, j.stderr.String())
	}
	if errs := j.stderr.String(); !strings.Contains(errs, "from node n2") {
		t.Errorf("the pieces of n1's ranks should come from their copies on n2:\n%s", errs)
	}
	j.sameDump(dump, want)
}

// TestUnusableNewestCheckpointFallsBackToThePreviousOne: a restart on nodes that hold none of
// the job's manifests asks the nodes for them. A NATS client without the job's key answers
// every such request first with a forged list naming a newer checkpoint 3, in clear and
// under another key: it is ignored. The genuine newest checkpoint (2) is unusable, one piece
// lost with its node and its copy: the restart falls back to checkpoint 1 and ends with the
// undisturbed result.
func TestUnusableNewestCheckpointFallsBackToThePreviousOne(t *testing.T) {
	args := []string{"heat2d", "-n", "41", "-iters", "40"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n2", "n3")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	crashOnTwoNodes(t, c, "fb1")
	c.loseNode("n1", n1.Process)
	if err := os.Remove(filepath.Join(c.stores["n2"], "fb1", "00000000000000000002", "rank-0.piece")); err != nil {
		t.Fatal(err)
	}
	forger := testbin.Connect(t, c.url)
	evil, err := ctlauth.NewJobChannel("fb2", bytes.Repeat([]byte{0xee}, 32), ctlauth.Sender{Role: ctlauth.RoleNode, Node: "n2"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var forged atomic.Int32
	sub, err := forger.Subscribe(job.ManifestsSubjects, func(m *nats.Msg) {
		b, _ := json.Marshal(ckptstore.Manifest{Job: "fb1", Seq: 3, Iteration: 24, Size: 4, Pieces: []ckptstore.PieceInfo{
			{Rank: 0, Node: "n2"}, {Rank: 1, Node: "n2"}, {Rank: 2, Node: "n2"}, {Rank: 3, Node: "n2"}}})
		list := job.ManifestsReply{Node: "n2", Manifests: [][]byte{b}}
		plain, _ := job.Encode(list)
		m.Respond(plain)
		other, _ := evil.Encode(m.Reply, list, time.Now())
		m.Respond(other)
		forged.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	forger.Flush()

	j, dump := restartOnN3N2(t, c, "fb2", "fb1")
	errs := j.stderr.String()
	if forged.Load() == 0 {
		t.Error("no manifest request reached the forger: the test tested nothing")
	}
	if !strings.Contains(errs, "ignoring a manifest list that is not authenticated") {
		t.Errorf("the forged lists should be reported as ignored:\n%s", errs)
	}
	if strings.Contains(errs, "checkpoint 3") {
		t.Errorf("the forged checkpoint 3 was tried:\n%s", errs)
	}
	if !strings.Contains(errs, "falling back to checkpoint 1") || !strings.Contains(errs, "restarts from job fb1 checkpoint 1 (iteration 8)") {
		t.Errorf("restart should fall back to checkpoint 1, iteration 8:\n%s", errs)
	}
	j.sameDump(dump, want)
}
