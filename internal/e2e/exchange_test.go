package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// exchangeNode are the pcmd flags of the exchange test: two slots, both used by the job;
// the agents sample every 250 ms, and a moved rank stays for the rest of the test.
var exchangeNode = []string{"--slots", "2", "--ios-period", "250ms", "--ios-cooldown", "10m"}

// fullNodes starts the exchange tests' nodes n1 and n2 (exchangeNode) and returns them with
// the dump of an undisturbed run of args.
func fullNodes(t *testing.T, args []string) (*cluster, []byte) {
	t.Helper()
	want := referenceDump(t, args...)
	c := newCluster(t)
	for _, n := range []string{"n1", "n2"} {
		c.startNode(n, append([]string{"--allow", bin + "/*"}, exchangeNode...)...)
	}
	return c, want
}

// TestFullNodesSwapRanksAsOneJointMove is ATS-RAS's exchange between busy nodes (thesis
// §2.2.1.2) on real pcmd nodes whose slots are all in use: heat2d's 4-slice chain placed
// round robin (n1: 0, 2; n2: 1, 3), every halo crossing nodes. No rank can move alone (no
// free slot anywhere), so only a swap regroups the slices: the agents agree on one, each
// node sends its part, and the job moves both ranks as one joint migration at one
// iteration boundary, each successor admitted in the slot of the rank leaving its node.
// The chain ends with one crossing halo instead of three, and the result is bitwise that
// of an undisturbed run. Before joint moves, pcmd refused the first arrival ("no free
// slot") and the agents did not even try. Through mpirun, pcmd and a real nats-server.
func TestFullNodesSwapRanksAsOneJointMove(t *testing.T) {
	args := []string{"heat2d", "-n", "96", "-iters", "4000"}
	c, want := fullNodes(t, args)
	const id = "fullswap"
	dump := filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"--policy", "atsras", "--hosts", "n1:2,n2:2", prog(args[0])}, args[1:]...), "-dump", dump, "-pace", "2ms")
	j := c.start(t, id, []string{"MPIOS_PROFILE_EVERY=250ms"}, run...)
	j.waitLog(`mpirun: exchange n\d/\d+ requested as one joint migration \(request \d+\): rank \d to n\d, rank \d to n\d`, 1, 90*time.Second)
	j.waitLog(`mpirun: migrated rank \d from n\d to n\d at iteration`, 2, 60*time.Second)
	info := c.jobInfo(id)
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)

	var joint []reconf.Reconfiguration
	for _, e := range info.Reconfigurations {
		if e.Kind == reconf.Migrate {
			if !e.Joint || len(e.Ranks) != 2 || e.State != reconf.Committed {
				t.Errorf("migration entry %+v, want only committed joint swaps", e)
			}
			joint = append(joint, e)
		}
	}
	if len(joint) != 1 || !strings.HasPrefix(joint[0].Reason, "exchange n") || !strings.Contains(joint[0].Reason, "ios atsras") {
		t.Fatalf("reconfigurations %+v, want one joint swap", info.Reconfigurations)
	}
	e := joint[0]
	if e.Iteration == 0 || e.TargetOf(0) == e.TargetOf(1) {
		t.Errorf("swap %+v, want both ranks moved at one boundary, each to the other's node", e)
	}
	nodes := make([]string, len(info.Ranks))
	for i, r := range info.Ranks {
		nodes[i] = r.Node
	}
	cut := 0
	for r := 1; r < len(nodes); r++ {
		if nodes[r] != nodes[r-1] {
			cut++
		}
	}
	if cut != 1 || slices.Index(nodes, "n1") < 0 || slices.Index(nodes, "n2") < 0 || strings.Count(strings.Join(nodes, " "), "n1") != 2 {
		t.Errorf("ranks on %v after the swap, want two per node and one halo crossing", nodes)
	}
}

// TestAJointMoveWithAFailingHalfLeavesBothRanksWhereTheyWere: the same swap between full
// nodes, but rank 1's successor exits before reaching its predecessor (testdata/failsucc).
// Rank 2's successor was ready on n2, in rank 1's slot; the joint move is all or none, so
// rank 2 stays too, its successor is stopped, and both nodes are back to two ranks in two
// slots: nothing over-subscribed, no half exchange, and the result is bitwise that of an
// undisturbed run.
func TestAJointMoveWithAFailingHalfLeavesBothRanksWhereTheyWere(t *testing.T) {
	args := []string{"heat2d", "-n", "96", "-iters", "4000"}
	c, want := fullNodes(t, args)
	const id = "fullswap-fail"
	dump := filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"--policy", "atsras", "--hosts", "n1:2,n2:2", prog("failsucc"), "exit-at-start-rank=1", prog(args[0])}, args[1:]...),
		"-dump", dump, "-pace", "2ms")
	j := c.start(t, id, []string{"MPIOS_PROFILE_EVERY=250ms"}, run...)
	j.waitLog(`mpirun: exchange n\d/\d+ requested as one joint migration \(request 1\): rank 1 to n1, rank 2 to n2`, 1, 90*time.Second)
	j.waitLog(`mpirun: migration of rank [12] to n\d aborted, it continues on n\d`, 2, 60*time.Second)
	info := c.jobInfo(id)
	for _, n := range []string{"n1", "n2"} {
		c.waitSlots(n, 2, 2)
	}
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)

	e := info.Reconfigurations[0]
	if !e.Joint || !slices.Equal(e.Ranks, []int{1, 2}) || e.State != reconf.Aborted {
		t.Fatalf("first reconfiguration %+v, want the joint swap of ranks 1 and 2 aborted", e)
	}
	why := map[int]string{}
	for _, h := range info.Migrations {
		if h.Seq == e.Seq {
			if h.State != reconf.Aborted {
				t.Errorf("rank %d's record %+v, want it aborted", h.Rank, h)
			}
			why[h.Rank] = h.Error
		}
	}
	if !strings.Contains(why[1], "ended before taking over") || !strings.Contains(why[2], "rank 1 not ready to move") {
		t.Errorf("reasons %v, want rank 1's successor's end and rank 2 aborted for rank 1", why)
	}
	if info.Ranks[1].Node != "n2" || info.Ranks[2].Node != "n1" {
		t.Errorf("ranks %+v after the aborted swap, want rank 1 on n2 and rank 2 on n1", info.Ranks)
	}
}

// waitSlots waits until node reports used slots and ranks running (a stopped successor
// is reaped by its pcmd shortly after the abort).
func (c *cluster) waitSlots(node string, used, ranks int) {
	c.t.Helper()
	var info job.NodeInfo
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m, err := c.nc.Request(job.NodeInfoSubject(node), nil, 2*time.Second)
		if err != nil {
			continue
		}
		if info, err = ctlauth.VerifyNodeInfo(m.Subject, m.Data, ctlauth.AnyKey{}); err == nil && info.Used == used && len(info.Ranks) == ranks {
			return
		}
	}
	c.t.Fatalf("node %s: %d slots used, ranks %+v; want %d used by %d ranks", node, info.Used, info.Ranks, used, ranks)
}
