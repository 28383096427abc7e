package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestMPICHSemanticsAcrossMigrations runs the ported MPICH cases (internal/mpisuite) one per
// iteration on 4 ranks while ranks migrate between two pcmd nodes, rank 0 included: every
// call (completion, cancellation, persistent requests, synchronous sends, matched probes,
// topologies and neighbour collectives, groups, CommCreate, CommSplitType, structured types)
// then also runs on the world of successor processes.
func TestMPICHSemanticsAcrossMigrations(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	j := c.start(t, "mig-suite", nil, "--hosts", "n1:2,n2:2", prog("suiterun"), "-iters", "400", "-pace", "2ms")
	c.waitRunning(t, j.id)
	// Placement is round-robin: n1 runs ranks 0 and 2, n2 ranks 1 and 3.
	c.migrate(j, "n1", 1, 1)
	c.migrate(j, "n2", 2, 0, 2)
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	if n := strings.Count(j.stdout.String(), " ok\n"); n != 4 {
		t.Fatalf("%d ranks reported ok:\n%s\n%s", n, j.stdout.String(), j.stderr.String())
	}
	if n := strings.Count(j.stderr.String(), "mpirun: migrated rank"); n != 3 {
		t.Fatalf("%d migrations reported, want 3:\n%s", n, j.stderr.String())
	}
}
