package mpisuite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

var bin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) { bin = dir },
		"./cmd/mpirun", "./internal/mpisuite/testdata/suiterun"))
}

// TestMPICHSemanticsAcrossProcesses runs every ported case in real processes through mpirun,
// on each size from 2 to 5 ranks, over shared memory (the default between ranks of a node)
// and over TCP (MPIOS_TRANSPORT=tcp, as between nodes).
func TestMPICHSemanticsAcrossProcesses(t *testing.T) {
	for _, transport := range []string{"auto", "tcp"} {
		for np := 2; np <= 5; np++ {
			t.Run(fmt.Sprintf("%s/np%d", transport, np), func(t *testing.T) {
				env := append(os.Environ(), "MPIOS_TRANSPORT="+transport)
				stdout, stderr, err := testbin.Run(3*time.Minute, env, filepath.Join(bin, "mpirun"),
					"-np", fmt.Sprint(np), filepath.Join(bin, "suiterun"))
				if err != nil {
					t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
				}
				if n := strings.Count(stdout, " ok\n"); n != np {
					t.Fatalf("%d of %d ranks reported ok:\n%s\n%s", n, np, stdout, stderr)
				}
				// Each rank says how many rings it mapped: none over TCP, some over shared memory.
				rings := 0
				for r := 0; r < np; r++ {
					var n int
					i := strings.Index(stdout, fmt.Sprintf("rank %d rings ", r))
					if i < 0 {
						t.Fatalf("rank %d did not report its rings:\n%s", r, stdout)
					}
					fmt.Sscanf(stdout[i:], "rank %d rings %d", new(int), &n)
					rings += n
				}
				if (transport == "tcp") != (rings == 0) {
					t.Fatalf("transport %s, but the ranks mapped %d rings:\n%s", transport, rings, stdout)
				}
			})
		}
	}
}
