package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mpirunEnv runs mpirun with extra environment variables for the job.
func mpirunEnv(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "mpirun"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	res := result{out.String(), errb.String(), 0, time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("mpirun %v did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, limit, res.stdout, res.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return res
}

func segmentsLeft(t *testing.T, jobID string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join("/dev/shm", "mpios."+jobID+".*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// Ranks of one node talk through shared memory (each maps one ring per peer and direction),
// unless MPIOS_TRANSPORT=tcp; nothing is left on /dev/shm after the job.
func TestRanksOfANodeUseSharedMemoryUnlessTCPIsForced(t *testing.T) {
	for _, tc := range []struct {
		transport string
		rings     int
	}{{"", 4}, {"tcp", 0}} {
		name := "auto"
		if tc.transport != "" {
			name = tc.transport
		}
		t.Run(name, func(t *testing.T) {
			jobID := fmt.Sprintf("shmrings-%s-%d", name, os.Getpid())
			res := mpirunEnv(t, 60*time.Second, []string{"MPIOS_TRANSPORT=" + tc.transport},
				"-np", "3", "--job-id", jobID, prog("mpicheck"), "rings")
			if res.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
			}
			for r := 0; r < 3; r++ {
				if want := fmt.Sprintf("rank %d rings %d\n", r, tc.rings); !strings.Contains(res.stdout, want) {
					t.Errorf("want %q in:\n%s", want, res.stdout)
				}
			}
			if left := segmentsLeft(t, jobID); len(left) != 0 {
				t.Errorf("left on /dev/shm: %v", left)
			}
		})
	}
}

// A rank killed while it streams a large message through shared memory: the receivers' calls
// fail with ProcFailedError (or mpirun stops them) within mpirun's bound, and the job leaves
// no segment behind.
func TestRankKilledMidMessageOverSharedMemory(t *testing.T) {
	jobID := fmt.Sprintf("shmkill-%d", os.Getpid())
	res := mpirun(t, 60*time.Second, "-np", "3", "--job-id", jobID, prog("mpicheck"), "killmid", "1")
	if res.code == 0 {
		t.Fatalf("job with a killed rank exited 0\n%s", res.stderr)
	}
	if strings.Contains(res.stdout, "returned <nil>") || strings.Contains(res.stderr, "returned <nil>") {
		t.Fatalf("a receive from a dead rank succeeded:\n%s\n%s", res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "rank 1") {
		t.Errorf("the failure message does not name rank 1:\n%s", res.stderr)
	}
	if left := segmentsLeft(t, jobID); len(left) != 0 {
		t.Errorf("left on /dev/shm: %v", left)
	}
	t.Logf("took %v\nstdout:\n%s", res.took, res.stdout)
}
