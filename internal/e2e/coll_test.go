package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

var buildCollcheck sync.Once

// collcheck returns the path of the collcheck program, built on first use.
func collcheck(t *testing.T) string {
	t.Helper()
	path := filepath.Join(bin, "collcheck")
	var err error
	buildCollcheck.Do(func() { err = testbin.BuildE(path, "./internal/e2e/testdata/collcheck") })
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func runCollcheck(t *testing.T, np int, checks ...string) {
	t.Helper()
	res := mpirun(t, 120*time.Second, append([]string{"-np", fmt.Sprint(np), collcheck(t)}, checks...)...)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if n := strings.Count(res.stdout, " ok\n"); n != np {
		t.Fatalf("%d of %d ranks reported ok:\n%s\n%s", n, np, res.stdout, res.stderr)
	}
}

// The bug of a Bcast whose root's buffer is longer (or shorter) than the others': on four
// processes every non-root rank returns ErrCount, the root succeeds, and nobody hangs.
func TestBcastWithMismatchedLengthsFailsWithErrCountOnFourProcesses(t *testing.T) {
	runCollcheck(t, 4, "bcast-root-longer", "bcast-root-shorter")
}

func TestCollectivesAcrossProcesses(t *testing.T) {
	for np := 2; np <= 5; np++ {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) { runCollcheck(t, np, "misfits", "semantics") })
	}
}
