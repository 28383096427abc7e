package testbed

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

// TestLoadedNodeLosesRanksToIdleNode is the IOS issue's end-to-end test: heat2d runs on a
// node whose CPU is mostly taken by a competing load; the IOS agent of an idle node steals
// its ranks (policy mpiios, no human involved), and the result is bitwise that of an
// undisturbed run.
func TestLoadedNodeLosesRanksToIdleNode(t *testing.T) {
	needRoot(t)
	opts := testOptions(t, IsolationNetns)
	opts.Nodes = []NodeSpec{{"busy", 0.5}, {"idle", 0.5}}
	opts.ExtraArgs = []string{"--ios-period", "500ms", "--ios-cooldown", "1s"}
	c := startCluster(t, opts)
	if err := c.SetLoad("busy", 0.8); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	heat := filepath.Join(bin, "heat2d")
	args := []string{heat, "-n", "384", "-iters", "6000", "-residual-every", "500"}
	run := func(mpirunArgs ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "mpirun"), mpirunArgs...)
		cmd.Env = testbin.IsolatedEnv(t.TempDir())
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("mpirun %s: %v\n%s\n%s", strings.Join(mpirunArgs, " "), err, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	adaptive, local := filepath.Join(dir, "adaptive.bin"), filepath.Join(dir, "local.bin")
	_, stderr := run(append([]string{"--nats", c.NATSURL(), "--policy", "mpiios", "--hosts", "busy:2"}, append(args, "-dump", adaptive)...)...)
	moved := regexp.MustCompile(`mpirun: migrated rank \d from busy to idle .*\(ios mpiios`).FindAllString(stderr, -1)
	if len(moved) == 0 {
		t.Fatalf("no rank left the loaded node:\n%s", stderr)
	}
	t.Logf("%d migration(s):\n%s", len(moved), stderr)
	run(append([]string{"-np", "2"}, append(args, "-dump", local)...)...)
	a, err1 := os.ReadFile(adaptive)
	b, err2 := os.ReadFile(local)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the result after autonomous migrations differs from the undisturbed run")
	}
}
