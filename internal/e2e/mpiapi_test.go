package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMPICHSemanticsAcrossMigrations runs the ported MPICH cases (internal/mpisuite) one per
// iteration on 4 ranks while ranks migrate between two pcmd nodes, rank 0 included: every
// call (completion, cancellation, persistent requests, synchronous sends, matched probes,
// topologies and neighbour collectives, groups, CommCreate, CommSplitType, structured types,
// and the collective checks of internal/collcheck: Alltoallv, Alltoallw, Exscan, the new ops,
// the nonblocking collectives) then also runs on the world of successor processes.
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

// TestMPICHSemanticsAcrossResizes runs the ported MPICH cases and the collective checks one
// per iteration while the job goes 4 -> 6 -> 3 -> 5 ranks, through mpirun and a real nats-server: every case then runs on
// the worlds the resizes make (joiners included). After each resize every rank checks that
// the communicators it derived from the old world (Dup, Split, a one-rank Split, CartCreate,
// CommSplitType, CommCreate) fail with ErrRevoked.
func TestMPICHSemanticsAcrossResizes(t *testing.T) {
	c := newCluster(t)
	j := c.start(t, "rsz-suite", nil, "-np", "4", prog("suiterun"), "-iters", "1500", "-pace", "3ms", "-resizable")
	c.waitRunning(t, j.id)
	c.resize(j, 6, 1)
	c.resize(j, 3, 2)
	c.resize(j, 5, 3)
	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	out := j.stdout.String()
	if n := strings.Count(out, " ok\n"); n != 5 {
		t.Fatalf("%d ranks reported ok, want the 5 of the last world:\n%s\n%s", n, out, j.stderr.String())
	}
	for _, size := range []int{6, 3, 5} {
		re := regexp.MustCompile(fmt.Sprintf(`rank \d+ of %d: resized at iteration \d+, 6 communicators of the old world revoked`, size))
		if n := len(re.FindAllString(out, -1)); n == 0 {
			t.Errorf("no rank of the world of %d checked the old world's communicators:\n%s", size, out)
		}
	}
}
