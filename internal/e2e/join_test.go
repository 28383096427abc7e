package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// TestLostNodeShrinksTheJobAndItsReturnJoinsIt: a malleable job runs on n1 and n2, 2 ranks
// each, checkpointing (each piece on its node and on its buddy). n2 is lost with its disk
// (pcmd SIGKILLed, store wiped): no node has room for its ranks, so mpirun recovers the job
// shrunk 4 -> 2 onto n1, restarted from the checkpoint whose n2 pieces survive as copies on
// n1. n2's pcmd comes back (a fresh key, an empty disk) and joins the job; a resize that
// names no node grows the job back onto it; the result is bitwise that of an undisturbed
// run. All through mpirun, pcmd and a real nats-server.
func TestLostNodeShrinksTheJobAndItsReturnJoinsIt(t *testing.T) {
	args := []string{"malleable", "-rows", "64", "-cols", "16", "-iters", "3000"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1")
	n2 := c.startNode("n2", "--allow", bin+"/*")
	const id = "lostjoin"
	committed, err := c.nc.SubscribeSync(job.CommittedSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"--hosts", "n1:2,n2:2", "--ckpt-every", "7", prog(args[0])}, args[1:]...), "-dump", dump, "-pace", "3ms")
	j := c.start(t, id, nil, run...)
	c.waitRunning(t, id)
	if _, err := committed.NextMsg(60 * time.Second); err != nil {
		t.Fatalf("no committed checkpoint reported: %v\n%s", err, j.stderr.String())
	}

	c.loseNode("n2", n2.Process)
	j.waitLog(`recovering \(1 of 3\): the job shrinks from 4 to 2 ranks \(2 slot\(s\) missing\) and every rank restarts from checkpoint \d+`, 1, 60*time.Second)
	j.waitLog(`recovered from the failure of rank \d: every rank restarted from checkpoint \d+ .*; the job shrank from 4 to 2 ranks`, 1, 60*time.Second)
	if info := c.jobInfo(id); info.Size != 2 || info.Ranks[0].Node != "n1" || info.Ranks[1].Node != "n1" {
		t.Fatalf("job info after the shrink %+v, want 2 ranks on n1", info)
	}

	c.startNode("n2", "--allow", bin+"/*")
	j.waitLog(`node n2 joined \(8 free slots\): pcmd on node n2 came back \(pid \d+, a new key\)`, 1, 30*time.Second)
	c.resize(j, 4, 1) // no node named: the job's free slots, n2's
	info := c.jobInfo(id)
	if info.Size != 4 || info.Ranks[2].Node != "n2" || info.Ranks[3].Node != "n2" {
		t.Errorf("job info after the grow %+v, want ranks 2 and 3 on n2", info)
	}
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}
