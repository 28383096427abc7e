package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/nats-io/nats.go"
)

// TestLoadedNodeLosesRanksToIdleNode is the IOS issue's end-to-end test: heat2d runs on a
// node whose CPU is mostly taken by a competing load; the IOS agent of an idle node steals
// its ranks (policy mpiios, no human involved), and the result is bitwise that of an
// undisturbed run.
func TestLoadedNodeLosesRanksToIdleNode(t *testing.T) {
	needRoot(t)
	opts := testOptions(t, IsolationNetns)
	opts.Nodes = []NodeSpec{{"busy", 0.5}, {"idle", 0.5}}
	// The nodes share this machine: their spare CPU is their quota's, whatever else runs.
	opts.ExtraArgs = []string{"--ios-period", "250ms", "--ios-cooldown", "1s", "--cpu-quota-only"}
	c := startCluster(t, opts)
	if err := c.SetLoad("busy", 0.8); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	heat := filepath.Join(bin, "heat2d")
	// Long enough that the remaining life pays for a move (the mpiios gain grows with its log).
	args := []string{heat, "-n", "384", "-iters", "12000", "-residual-every", "1000"}
	run := func(mpirunArgs ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "mpirun"), mpirunArgs...)
		cmd.Env = testbin.IsolatedEnv(t.TempDir(), "MPIOS_PROFILE_EVERY=250ms")
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
		logs, _ := filepath.Glob(filepath.Join(c.WorkDir(), "logs", "*"))
		for _, l := range logs {
			t.Logf("%s:\n%s", filepath.Base(l), tail(l, 4000))
		}
		if nc, err := nats.Connect(c.NATSURL()); err == nil {
			states, _ := nodestatus.DiscoverIOS(nc, time.Second, nil)
			b, _ := json.MarshalIndent(states, "", " ")
			t.Logf("IOS agents:\n%s", b)
			nc.Close()
		}
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
