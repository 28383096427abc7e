package spawner

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/job"
)

// FuzzSpawnRequestPolicy feeds the node's policy arbitrary spawn requests, as anyone on the
// NATS server may send them: whatever the bytes, a program runs only if its cleaned
// absolute path matches --allow, and the rank's environment holds nothing but pcmd's
// passed variables and MPIOS_* ones, with the node's own values winning.
func FuzzSpawnRequestPolicy(f *testing.F) {
	for _, req := range []job.SpawnRequest{
		{Job: "j", Rank: 0, Path: "/opt/mpios/bin/heat2d", Env: []string{"MPIOS_JOB_ID=j", "MPIOS_BIND=6.6.6.6"}},
		{Job: "j", Rank: 1, Path: "/opt/mpios/bin/../../../bin/sh", Args: []string{"-c", "id"}},
		{Job: "j", Rank: 2, Path: "../bin/sh", Env: []string{"LD_PRELOAD=/tmp/x.so"}},
	} {
		data, err := job.Encode(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("\xc1\xff"))
	allow := []string{"/opt/mpios/bin/*"}
	base := BaseEnv([]string{"PATH=/bin", "PCMD_NATS_TOKEN=s3cret"}, nil)
	node := []string{job.EnvBind + "=10.0.0.1", job.EnvNode + "=n1"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req job.SpawnRequest
		if job.Decode(data, &req) != nil || req.Validate() != nil {
			return
		}
		if path, code, why := checkProgram(allow, req.Path); why == "" {
			if code != "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || !Allowed(allow, path) {
				t.Fatalf("%q admitted as %q", req.Path, path)
			}
		} else if path != "" || code == "" {
			t.Fatalf("%q refused with code %q but path %q", req.Path, code, path)
		}
		env := RankEnv(base, req.Env, node)
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			if name != "PATH" && !strings.HasPrefix(name, "MPIOS_") {
				t.Fatalf("the rank's environment holds %q", kv)
			}
		}
		for _, kv := range node {
			name, want, _ := strings.Cut(kv, "=")
			if got, _ := Lookup(env, name); got != want {
				t.Fatalf("%s = %q in the rank's environment, want the node's %q", name, got, want)
			}
		}
	})
}
