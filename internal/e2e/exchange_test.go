package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/reconf"
)

// exchangeNode are the pcmd flags of the exchange test: two slots, both used by the job;
// the agents sample every 250 ms, and a moved rank stays for the rest of the test.
var exchangeNode = []string{"--slots", "2", "--ios-period", "250ms", "--ios-cooldown", "10m"}

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
	want := referenceDump(t, args...)
	c := newCluster(t)
	for _, n := range []string{"n1", "n2"} {
		c.startNode(n, append([]string{"--allow", bin + "/*"}, exchangeNode...)...)
	}
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
