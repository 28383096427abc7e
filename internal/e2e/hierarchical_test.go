package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/reconf"
)

// hierarchicalNode are the pcmd flags of the hierarchical tests: the managers plan every
// 250 ms, a job is planned once (the cooldown outlasts the test), and no node sends steal
// requests of its own (only a wholly idle node would), so only the manager moves the job.
var hierarchicalNode = []string{"--hierarchical", "--policy", "sheriff", "--steal-threshold", "1",
	"--ios-period", "250ms", "--ios-cooldown", "10m"}

// TestJoiningNodeMakesTheManagerGrowAMalleableJob is §2.2.2's "the decisions become resize
// requests" end to end: a malleable job runs on n1, 4 ranks; n2 (2 slots) joins. The agents
// elect a manager, which finds n2 available and idle and, the job being malleable, grows it
// onto n2's free slots (4 -> 6) with one resize request; the job ends bitwise identical to
// an undisturbed run. Through mpirun, pcmd --hierarchical and a real nats-server.
func TestJoiningNodeMakesTheManagerGrowAMalleableJob(t *testing.T) {
	args := []string{"malleable", "-rows", "64", "-cols", "16", "-iters", "3000"}
	want := referenceDump(t, args...)
	c := newCluster(t)
	c.startNode("n1", append([]string{"--allow", bin + "/*"}, hierarchicalNode...)...)
	const id = "hiergrow"
	dump := filepath.Join(t.TempDir(), "out.bin")
	run := append(append([]string{"--policy", "sheriff", "--hosts", "n1:4", prog(args[0])}, args[1:]...), "-dump", dump, "-pace", "3ms")
	j := c.start(t, id, nil, run...)
	c.waitRunning(t, id)

	c.startNode("n2", append([]string{"--allow", bin + "/*", "--slots", "2"}, hierarchicalNode...)...)
	j.waitLog(`mpirun: resized 4 -> 6 ranks at iteration \d+`, 1, 60*time.Second)
	info := c.jobInfo(id)
	if info.Size != 6 || len(info.Ranks) != 6 || info.Ranks[4].Node != "n2" || info.Ranks[5].Node != "n2" {
		t.Errorf("job info after the grow %+v, want ranks 4 and 5 on n2", info)
	}
	var grows int
	for _, e := range info.Reconfigurations {
		if e.Kind == reconf.Resize && e.OldNP == 4 && e.NP == 6 {
			grows++
			if !strings.HasPrefix(e.Reason, "ios hierarchical: manager n") || !strings.Contains(e.Reason, "n2 is available and idle") ||
				!strings.Contains(e.Reason, "grow 4 -> 6 onto n2:2") {
				t.Errorf("grow's reason %q", e.Reason)
			}
		}
	}
	if grows != 1 {
		t.Errorf("%d grows 4 -> 6 in the log, want 1: %+v", grows, info.Reconfigurations)
	}
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}
