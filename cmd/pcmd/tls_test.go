package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/natsconn/natstest"
	"github.com/mpios/mpios/internal/nodestatus"
)

// TestClusterOverTLS runs two pcmd nodes and a job over both on a NATS server that requires
// TLS and client certificates. pcmd reads its certificate files from $PCMD_NATS_*, mpirun
// from flags; the remote ranks get the file paths as $MPIOS_NATS_* through their spawn.
func TestClusterOverTLS(t *testing.T) {
	pki := natstest.NewPKI(t, t.TempDir())
	url := natstest.TLSServer(t, pki, true)
	heat2d := filepath.Join(bin, "heat2d")
	nodeEnv := []string{"PCMD_NATS_CA=" + pki.CAFile, "PCMD_NATS_CERT=" + pki.ClientCert, "PCMD_NATS_KEY=" + pki.ClientKey}
	for _, name := range []string{"n1", "n2"} {
		p := startProc(t, nodeEnv, "pcmd", "serve", "--insecure-open", "--node", name, "--nats", url, "--heartbeat", "250ms",
			"--kill-grace", "1s", "--advertise", "127.0.0.1", "--slots", "2", "--allow", heat2d, "--no-ios")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("pcmd %s log:\n%s", name, p.stderr.String())
			}
		})
	}
	tlsFlags := []string{"--nats", url, "--nats-ca", pki.CAFile, "--nats-cert", pki.ClientCert, "--nats-key", pki.ClientKey}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p := run(t, 10*time.Second, nil, "pcmd", append([]string{"status", "--json", "--wait", "300ms"}, tlsFlags...)...)
		var st nodestatus.Status
		if p.code == 0 && json.Unmarshal([]byte(p.stdout.String()), &st) == nil && len(st.Nodes) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not up over TLS: exit %d\n%s%s", p.code, p.stdout.String(), p.stderr.String())
		}
	}
	args := append(tlsFlags, "--hosts", "n1:2,n2:2", heat2d, "-n", "67", "-iters", "20")
	p := run(t, 60*time.Second, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "mpirun", args...)
	if p.code != 0 || !strings.Contains(p.stdout.String(), "checksum ") {
		t.Fatalf("mpirun over TLS: exit %d\nstdout:\n%s\nstderr:\n%s", p.code, p.stdout.String(), p.stderr.String())
	}

	// Without a client certificate the server refuses pcmd.
	p = run(t, 20*time.Second, nil, "pcmd", "status", "--nats", url, "--nats-ca", pki.CAFile, "--wait", "100ms")
	if p.code == 0 {
		t.Errorf("pcmd status without a client certificate succeeded:\n%s", p.stdout.String())
	}
}
