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
// on each size from 2 to 5 ranks.
func TestMPICHSemanticsAcrossProcesses(t *testing.T) {
	for np := 2; np <= 5; np++ {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			stdout, stderr, err := testbin.Run(3*time.Minute, nil, filepath.Join(bin, "mpirun"),
				"-np", fmt.Sprint(np), filepath.Join(bin, "suiterun"))
			if err != nil {
				t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
			}
			if n := strings.Count(stdout, " ok\n"); n != np {
				t.Fatalf("%d of %d ranks reported ok:\n%s\n%s", n, np, stdout, stderr)
			}
		})
	}
}
