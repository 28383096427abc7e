package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/testbin"
)

// exited waits up to limit for a pcmd to exit and reports whether it did.
func exited(cmd *exec.Cmd, limit time.Duration) bool {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// startThenTerm starts heat2d as job id with args (mpirun's, then the program's) and sends
// SIGTERM to node's pcmd once it runs.
func startThenTerm(t *testing.T, c *cluster, node *exec.Cmd, id string, args ...string) *bgJob {
	t.Helper()
	j := c.start(t, id, nil, args...)
	c.waitRunning(t, id)
	termWhenHeard(t, c, node)
	return j
}

// termWhenHeard sends SIGTERM to node's pcmd once it has heard every other node of c.
func termWhenHeard(t *testing.T, c *cluster, node *exec.Cmd) {
	t.Helper()
	// A node places its ranks on the peers it has heard: wait until it heard them all, as
	// a node that has run for a while has.
	name := ""
	for i, a := range node.Args {
		if a == "--node" && i+1 < len(node.Args) {
			name = node.Args[i+1]
		}
	}
	testbin.WaitFor(t, 30*time.Second, name+" to hear its peers", func() bool {
		views, _ := nodeclient.DiscoverNodes(c.nc, 300*time.Millisecond, nil)
		for _, v := range views {
			if v.Self.Name == name {
				return len(v.Peers) >= len(c.stores)-1 // every node the test started
			}
		}
		return false
	})
	if err := node.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMDrainsTheNodeBeforePcmdExits: "SIGTERM to pcmd serve: the node takes no new
// ranks, its ranks migrate to nodes with free slots, then pcmd exits. The job sees a pause,
// nothing more" (issue 16).
func TestSIGTERMDrainsTheNodeBeforePcmdExits(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "1500"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n2", "n3")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := startThenTerm(t, c, n1, "leave1", "--hosts", "n1:2,n2:2", prog("heat2d"), "-n", "48", "-iters", "1500", "-dump", dump, "-pace", "2ms")
	j.waitLog(`mpirun: migrated rank \d+ from n1 to \S+ at iteration`, 2, 60*time.Second)
	if !exited(n1, 30*time.Second) {
		t.Fatalf("pcmd n1 did not exit after its ranks left\nstderr:\n%s", j.stderr.String())
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d after n1 left\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}

// TestSIGTERMShrinksAMalleableJobWhenNoPeerHasRoom: "its ranks migrate to nodes with free
// slots (or the job shrinks, when it is malleable and no slot is free), then pcmd exits"
// (issue 16). n2 is full, so heat2d (its 1-D grid a pcm block) goes on with 2 ranks, n1's
// leaving; pcmd n1 exits and the result is the undisturbed run's. The ranks that stay are
// renumbered (n1 ran ranks 0 and 2): their liveness beats follow, and no rank is declared
// hung with a hang timeout far shorter than what the job runs after the shrink.
func TestSIGTERMShrinksAMalleableJobWhenNoPeerHasRoom(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "3000"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	c.startNode("n2", "--allow", bin+"/*", "--slots", "2")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := startThenTerm(t, c, n1, "leave3", "--hosts", "n1:2,n2:2", "--hang-timeout", "2s", prog("heat2d"), "-n", "48", "-iters", "3000", "-dump", dump, "-pace", "2ms")
	j.waitLog(`mpirun: resized 4 -> 2 ranks at iteration \d+ in \d+ ms, .* moved \(pcmd drain of node n1: SIGTERM to pcmd serve\)`, 1, 60*time.Second)
	if !exited(n1, 30*time.Second) {
		t.Fatalf("pcmd n1 did not exit after its ranks left\nstderr:\n%s", j.stderr.String())
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d after n1 left\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	if strings.Contains(j.stderr.String(), "sent no sign of life") {
		t.Errorf("a rank renumbered by the shrink was declared hung:\n%s", j.stderr.String())
	}
	j.sameDump(dump, want)
}

// TestSIGTERMThatCannotPlaceTheRanksKeepsServing: "a drain that cannot place the ranks says
// why and keeps serving; a second SIGTERM ends as today" (issue 16). n1 has no peer: the job
// runs on undisturbed, and the second SIGTERM stops pcmd.
func TestSIGTERMThatCannotPlaceTheRanksKeepsServing(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "600"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	n1 := c.startNode("n1", "--allow", bin+"/*")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := startThenTerm(t, c, n1, "leave2", "--hosts", "n1:4", prog("heat2d"), "-n", "48", "-iters", "600", "-dump", dump, "-pace", "2ms")
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d: a refused leave must not disturb the job\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
	m, err := c.nc.Request(job.NodeInfoSubject("n1"), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("n1 stopped serving after a leave it could not carry out: %v", err)
	}
	info, err := ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{})
	if err != nil || info.Draining {
		t.Fatalf("n1 after a refused leave: %+v, %v; want it open to new ranks", info, err)
	}
	if err := n1.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !exited(n1, 15*time.Second) {
		t.Fatal("pcmd n1 did not exit on the second SIGTERM")
	}
}

// A rank of a draining node stops (SIGSTOP) before it can move: the drain cannot carry out
// its migration, the hang timeout declares the rank failed, and the recovery restarts every
// rank on the nodes that take ranks, none on the draining one (mpirun used to restart rank 0
// there, and n1's refusal, "takes no new ranks", ended the job). n1 then has no rank left and
// exits; the result is the undisturbed run's.
func TestRankStoppedOnADrainingNodeIsRecoveredOffIt(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "800"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n2", "n3")
	n1 := c.startNode("n1", "--allow", bin+"/*")
	committed, err := c.nc.SubscribeSync(job.CommittedSubject("leave-stop"))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "leave-stop", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "10", "--hang-timeout", "2s",
		prog("heat2d"), "-n", "48", "-iters", "800", "-dump", dump, "-pace", "10ms")
	if _, err := committed.NextMsg(60 * time.Second); err != nil {
		t.Fatalf("no committed checkpoint reported: %v\n%s", err, j.stderr.String())
	}
	pid := rankPID(t, j.id, 0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	termWhenHeard(t, c, n1)
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`rank 0 \(pid `+strconv.Itoa(pid)+` on n1\) sent no sign of life for 2(\.\d+)?s \(stopped or frozen\): declared failed; recovering \(1 of 3\)`, 1, time.Second)
	j.waitLog(`recovered from the failure of rank 0`, 1, time.Second)
	if strings.Contains(j.stderr.String(), "cannot start rank") {
		t.Errorf("a restart went to the draining node:\n%s", j.stderr.String())
	}
	if !exited(n1, 30*time.Second) {
		t.Errorf("pcmd n1 did not exit once its ranks were gone\nstderr:\n%s", j.stderr.String())
	}
	j.sameDump(dump, want)
}

// Two nodes leave at once (SIGTERM to both pcmds): each plans its drain before it hears that
// the other drains, so some of the moves their job accepts are aborted (the target drains,
// or the other node's ranks took its slots). A draining node that still runs ranks plans
// again: here the malleable job shrinks onto what is left. Both nodes leave while the job
// runs on, and its result is the undisturbed run's.
func TestTwoNodesLeavingAtOnceBothLeaveWhileTheJobRuns(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "12000"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	var nodes []*exec.Cmd
	for _, n := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, c.startNode(n, "--allow", bin+"/*", "--slots", "2"))
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "leave-two", nil, "--hosts", "n1:2,n2:2", prog("heat2d"), "-n", "48", "-iters", "12000", "-dump", dump, "-pace", "2ms")
	c.waitRunning(t, j.id)
	termWhenHeard(t, c, nodes[0])
	termWhenHeard(t, c, nodes[1])
	for i, n := range nodes[:2] {
		if !exited(n, 45*time.Second) {
			t.Fatalf("pcmd n%d did not leave\nstderr:\n%s", i+1, j.stderr.String())
		}
	}
	select {
	case <-j.done:
		t.Fatalf("the job ended before both nodes left: they waited for it\nstderr:\n%s", j.stderr.String())
	default:
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}
