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

// mpirunEnv runs mpirun, with extra environment variables for the job (nil: none).
func mpirunEnv(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "mpirun"), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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

// rankRings returns, for every live process of job id started on node (MPIOS_NODE), its
// rank and the number of shared-memory rings it has mapped.
func rankRings(t *testing.T, id, node string) map[int]int {
	t.Helper()
	out := map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil {
			continue
		}
		vars := map[string]string{}
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				vars[k] = v
			}
		}
		if vars["MPIOS_JOB_ID"] != id || vars["MPIOS_NODE"] != node {
			continue
		}
		maps, err := os.ReadFile(d + "/maps")
		if err != nil {
			continue
		}
		var rank int
		if _, err := fmt.Sscan(vars["MPIOS_RANK"], &rank); err != nil {
			continue
		}
		out[rank] += strings.Count(string(maps), "/dev/shm/mpios."+id+".")
	}
	return out
}

// waitRings waits until cond holds for the ranks' ring counts on node.
func waitRings(t *testing.T, id, node string, cond func(map[int]int) bool) map[int]int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := rankRings(t, id, node)
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: rings per rank %v", node, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A job on two pcmd nodes: ranks of one node talk through shared memory, ranks of different
// nodes over TCP, and a migration switches a pair between the two at the boundary; heat2d's
// result stays bitwise that of an undisturbed run.
func TestMixedJobUsesSharedMemoryOnANodeAndTCPAcrossMigrations(t *testing.T) {
	args := []string{"heat2d", "-n", "96", "-iters", "3000"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1", "n2")
	dump := filepath.Join(t.TempDir(), "out.bin")
	id := fmt.Sprintf("shmmixed-%d", os.Getpid())
	j := c.start(t, id, nil, append(append([]string{"--hosts", "n1:2,n2:2", prog(args[0])}, args[1:]...), "-dump", dump, "-pace", "2ms")...)
	c.waitRunning(t, id)
	// Round-robin placement: n1 runs ranks 0 and 2, n2 ranks 1 and 3. heat2d's halo pairs
	// (0,1), (1,2), (2,3) all cross nodes.
	c.migrate(j, "n1", 1, 1)
	// Now rank 1 shares n1 with both its neighbours, and rank 3 is alone on n2: rings on n1,
	// none on n2 (rank 3's rings with rank 1's old process are gone with it).
	waitRings(t, id, "n1", func(m map[int]int) bool { return m[1] >= 2 && m[0] >= 1 && m[2] >= 1 })
	waitRings(t, id, "n2", func(m map[int]int) bool { return len(m) == 1 && m[3] == 0 })
	c.migrate(j, "n2", 2, 1) // and back: rank 1's pairs with 0 and 2 return to TCP
	waitRings(t, id, "n2", func(m map[int]int) bool { _, ok := m[1]; return ok })
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
	if left := segmentsLeft(t, id); len(left) != 0 {
		t.Errorf("left on /dev/shm: %v", left)
	}
}
