package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mpios/mpios/internal/natsconn/natstest"
)

func TestLimitAndCredentialUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-np", "2147483647", fakerank}, `mpirun: -np 2147483647: at most 65536 ranks \(see mpirun --help\)`},
		{[]string{"-np", "65537", fakerank}, `mpirun: -np 65537: at most 65536 ranks .*`},
		{[]string{"-np", "1", "--nats-ca", "ca.pem", fakerank}, `mpirun: NATS credentials and TLS options .* need --nats URL.*`},
		{[]string{"-np", "1", "--nats", "tls://127.0.0.1:1", "--nats-cert", "c.pem", fakerank}, `mpirun: a client certificate needs its key file .*`},
		{[]string{"-np", "1", "--nats", "nats://127.0.0.1:1", "--nats-creds", "a", "--nats-nkey", "b", fakerank}, `mpirun: give only one of .*`},
	} {
		p := start(t, tc.args...)
		if code := p.wait(t, 20*time.Second); code != statusUsage {
			t.Errorf("%q: exit status %d, want %d", tc.args, code, statusUsage)
		}
		wantLine(t, p.stderr.String(), tc.want)
	}
}

// TestTLSNATSServerWithClientCertificates runs a job on a NATS server that requires TLS and
// client certificates: mpirun and every rank connect with the CA and certificate files.
func TestTLSNATSServerWithClientCertificates(t *testing.T) {
	t.Parallel()
	pki := natstest.NewPKI(t, t.TempDir())
	url := natstest.TLSServer(t, pki, true)
	p := mpirunOK(t, "-np", "3", "--nats", url, "--nats-ca", pki.CAFile,
		"--nats-cert", pki.ClientCert, "--nats-key", pki.ClientKey, fakerank)
	wantLine(t, p.stderr.String(), `mpirun: job \S+ nats tls://127\.0\.0\.1:\d+`)
	wantLine(t, p.stdout.String(), `rank 2 table \S+`)

	// Without the client certificate the server refuses mpirun before any rank starts.
	p = start(t, "-np", "1", "--nats", url, "--nats-ca", pki.CAFile, fakerank)
	if code := p.wait(t, 20*time.Second); code != 1 {
		t.Errorf("no client certificate: exit status %d, want 1", code)
	}
	wantLine(t, p.stderr.String(), `mpirun: connect to NATS at tls://127\.0\.0\.1:\d+: .*`)
}

// TestTokenFromTheEnvironmentOrAFile: the token reaches mpirun and its ranks without ever
// being on a command line.
func TestTokenFromTheEnvironmentOrAFile(t *testing.T) {
	t.Parallel()
	const token = "tok-9f2c41"
	port := natstest.StartServer(t, func(o *server.Options) { o.Authorization = token })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := map[string]*proc{
		"file": start(t, "-np", "2", "--nats", url, "--nats-token-file", file, fakerank),
		"env":  startEnv(t, []string{"MPIOS_NATS_TOKEN=" + token}, "-np", "2", "--nats", url, fakerank),
		"none": start(t, "-np", "1", "--nats", url, fakerank),
	}
	for name, p := range runs {
		want := 0
		if name == "none" {
			want = 1
		}
		if code := p.wait(t, 30*time.Second); code != want {
			t.Errorf("token from %s: exit status %d, want %d", name, code, want)
		}
		if want == 0 {
			wantLine(t, p.stdout.String(), `rank 1 table \S+`)
		}
		if strings.Contains(strings.Join(p.cmd.Args, " "), token) {
			t.Errorf("token from %s on the command line", name)
		}
	}
}

// startEnv is start with extra environment variables.
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{runtimeDir: t.TempDir()}
	p.cmd = exec.Command(mpirun, args...)
	p.cmd.Env = append(append(os.Environ(), "XDG_RUNTIME_DIR="+p.runtimeDir), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}
