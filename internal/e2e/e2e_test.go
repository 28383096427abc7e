// Package e2e runs real multi-process jobs through the mpirun binary.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

var bin string // directory with the built mpirun and test programs

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) { bin = dir },
		"./cmd/mpirun", "./internal/e2e/testdata/mpicheck", "./internal/e2e/testdata/failsucc", "./heat2d", "./jacobi", "./cmd/pcmd",
		"./internal/mpisuite/testdata/suiterun"))
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func mpirun(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	return mpirunEnv(t, limit, nil, args...)
}

func prog(name string) string { return filepath.Join(bin, name) }

func TestEveryOperationAcrossProcesses(t *testing.T) {
	for _, np := range []string{"1", "2", "3", "4", "5"} {
		t.Run("np"+np, func(t *testing.T) {
			res := mpirun(t, 60*time.Second, "-np", np, prog("mpicheck"), "all")
			if res.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
			}
			if n := strings.Count(res.stdout, " ok\n"); fmt.Sprint(n) != np {
				t.Fatalf("%d ranks reported ok:\n%s", n, res.stdout)
			}
		})
	}
}

func TestSingletonWithoutMpirun(t *testing.T) {
	out, err := exec.Command(prog("mpicheck"), "all").CombinedOutput()
	if err != nil || string(out) != "rank 0 of 1 ok\n" {
		t.Fatalf("singleton: %v\n%s", err, out)
	}
}

func TestFailedRankEndsJobWithItsStatus(t *testing.T) {
	res := mpirun(t, 30*time.Second, "-np", "4", prog("mpicheck"), "exit", "2", "3")
	if res.code != 3 {
		t.Fatalf("exit code %d, want 3\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "rank 2") {
		t.Errorf("failure message does not name rank 2:\n%s", res.stderr)
	}
	if res.took > 15*time.Second {
		t.Errorf("job took %v to end after a rank failed", res.took)
	}
}

func TestKilledRankEndsJob(t *testing.T) {
	res := mpirun(t, 30*time.Second, "-np", "3", prog("mpicheck"), "kill", "1")
	if res.code == 0 {
		t.Fatalf("job with a killed rank exited 0\n%s", res.stderr)
	}
	if !strings.Contains(res.stderr, "rank 1") || !strings.Contains(strings.ToLower(res.stderr), "signal") {
		t.Errorf("message should name rank 1 and the signal:\n%s", res.stderr)
	}
}

func TestBlockedReceiveOnDeadPeerFailsWithTypedError(t *testing.T) {
	// The survivors are blocked in Recv from rank 0 when it dies; they must return
	// ProcFailedError (exit 4 in mpicheck) or be stopped by mpirun, never hang.
	res := mpirun(t, 30*time.Second, "-np", "3", "--tag-output", prog("mpicheck"), "blocked", "0")
	if res.code == 0 {
		t.Fatalf("exit 0\n%s", res.stderr)
	}
	if strings.Contains(res.stdout, "returned <nil>") {
		t.Fatalf("a receive from a dead rank succeeded:\n%s", res.stdout)
	}
	t.Logf("stdout:\n%s", res.stdout)
}

func TestAbortEndsJobWithCode(t *testing.T) {
	res := mpirun(t, 30*time.Second, "-np", "3", prog("mpicheck"), "abort", "1", "5")
	if res.code != 5 {
		t.Fatalf("exit code %d, want 5\n%s", res.code, res.stderr)
	}
}

// TestExternalNATSServer runs a job against the real nats-server from Debian's package.
func TestExternalNATSServer(t *testing.T) {
	server, err := exec.LookPath("nats-server")
	if err != nil {
		server = "/usr/sbin/nats-server" // Debian's place, not on every PATH
		if _, err := os.Stat(server); err != nil {
			t.Skip("nats-server not installed (apt-get install nats-server)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command(server, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "--user", "mpios", "--pass", "s3cret")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	url := fmt.Sprintf("nats://mpios:s3cret@127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := mpirun(t, 60*time.Second, "-np", "4", "--nats", url, prog("mpicheck"), "all")
	if res.code != 0 || strings.Count(res.stdout, " ok\n") != 4 {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if strings.Contains(res.stderr, "s3cret") {
		t.Errorf("mpirun printed the NATS password:\n%s", res.stderr)
	}
}

// TestCheckpointFlagsRestartBitwise drives checkpoint and restart through mpirun's own flags:
// a job that dies after a checkpoint, restarted with --restart, ends bitwise identical to an
// undisturbed run.
func TestCheckpointFlagsRestartBitwise(t *testing.T) {
	dir := t.TempDir()
	rt := t.TempDir()
	env := testbin.IsolatedEnv(rt)
	run := func(args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, prog("mpirun"), args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		res := result{stdout: out.String(), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			res.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return res
	}
	undisturbed := filepath.Join(dir, "a")
	if res := run("-np", "3", prog("heat2d"), "-n", "41", "-iters", "40", "-dump", undisturbed); res.code != 0 {
		t.Fatalf("undisturbed run: %d\n%s", res.code, res.stderr)
	}
	for _, mode := range []string{"sync", "background"} {
		// With --ckpt-sync the checkpoint of iteration 16 is committed before iteration 17
		// starts; in the background it is committed a few agreement points later, and this
		// tiny grid's iterations take microseconds, so the crash after 21 may beat it.
		store := filepath.Join(dir, "ckpt-"+mode)
		args := []string{"-np", "3", "--job-id", "ck1", "--ckpt-every", "8", "--ckpt-dir", store, "--no-recover"}
		if mode == "sync" {
			args = append(args, "--ckpt-sync")
		}
		if res := run(append(args, prog("heat2d"), "-n", "41", "-iters", "40", "-crash-after", "21")...); res.code == 0 {
			t.Fatalf("%s: the crashing run exited 0", mode)
		}
		newest := newestCheckpoint(t, store, "ck1")
		if mode == "sync" && newest != 16 || newest != 8 && newest != 16 {
			t.Fatalf("%s: newest committed checkpoint of iteration %d, want 16 (or 8 in the background)", mode, newest)
		}
		restarted := filepath.Join(dir, "b-"+mode)
		res := run("-np", "3", "--job-id", "ck2-"+mode, "--ckpt-dir", store, "--restart", "ck1",
			prog("heat2d"), "-n", "41", "-iters", "40", "-dump", restarted)
		if res.code != 0 {
			t.Fatalf("%s: restart: %d\n%s", mode, res.code, res.stderr)
		}
		if want := fmt.Sprintf("(iteration %d)", newest); !strings.Contains(res.stderr, want) {
			t.Errorf("%s: restart should report resuming from %s:\n%s", mode, want, res.stderr)
		}
		a, b := testbin.ReadFloats(t, undisturbed), testbin.ReadFloats(t, restarted)
		if len(a) != len(b) || len(a) != 41*41 {
			t.Fatalf("dumps of %d and %d values", len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: cell %d: restarted %v, undisturbed %v", mode, i, b[i], a[i])
			}
		}
	}
	// A job that ends normally commits its last checkpoint (taken in the background at
	// iteration 40) before its ranks exit.
	store := filepath.Join(dir, "ckpt-end")
	if res := run("-np", "3", "--job-id", "ck3", "--ckpt-every", "8", "--ckpt-dir", store, prog("heat2d"), "-n", "41", "-iters", "40"); res.code != 0 {
		t.Fatalf("run to the end: %d\n%s", res.code, res.stderr)
	}
	if newest := newestCheckpoint(t, store, "ck3"); newest != 40 {
		t.Errorf("after a complete run the newest checkpoint is of iteration %d, want 40", newest)
	}
	if res := run("-np", "3", "--ckpt-every", "-1", prog("heat2d")); res.code != 2 || !strings.Contains(res.stderr, "--ckpt-every") {
		t.Errorf("--ckpt-every -1: exit %d\n%s", res.code, res.stderr)
	}
}

// TestProfileOut: profiling is on by default under mpirun, and --profile-out writes every
// rank's published profiles as JSON lines.
func TestProfileOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "profiles.jsonl")
	res := mpirun(t, 60*time.Second, "-np", "2", "--profile-out", out, "--policy", "none",
		prog("heat2d"), "-n", "32", "-iters", "600", "-pace", "2ms")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var p struct {
			Rank      int    `json:"rank"`
			Policy    string `json:"policy"`
			Iteration int64  `json:"iteration"`
			Sent      []struct {
				Rank, Messages int
			} `json:"sent"`
			Received []struct {
				Rank, Messages int
			} `json:"received"`
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if p.Policy != "none" {
			t.Errorf("profile of rank %d carries policy %q, want none", p.Rank, p.Policy)
		}
		if p.Iteration > 0 && len(p.Sent) == 1 && p.Sent[0].Rank == 1-p.Rank && p.Sent[0].Messages > 0 &&
			len(p.Received) == 1 && p.Received[0].Rank == 1-p.Rank && p.Received[0].Messages > 0 {
			seen[p.Rank] = true
		}
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("no profile with iterations and halo traffic to the other rank from both ranks:\n%s", data)
	}
}

// newestCheckpoint returns the iteration of job's newest committed checkpoint in store, or -1.
func newestCheckpoint(t *testing.T, store, jobID string) int64 {
	t.Helper()
	s, err := ckptstore.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.Checkpoints(jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		return -1
	}
	return ms[0].Iteration
}
