package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
)

// Binaries built by TestMain.
var mpirun, fakerank string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) {
		mpirun, fakerank = filepath.Join(dir, "mpirun"), filepath.Join(dir, "fakerank")
	}, "./cmd/mpirun", "./internal/launch/testdata/fakerank"))
}

type proc struct {
	cmd            *exec.Cmd
	stdout, stderr testbin.Buffer
	runtimeDir     string
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{runtimeDir: t.TempDir()}
	p.cmd = exec.Command(mpirun, args...)
	p.cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+p.runtimeDir)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// wait waits for mpirun and returns its exit status.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("mpirun %q: %v\nstderr:\n%.2000s", p.cmd.Args[1:], err, p.stderr.String())
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		p.checkClean(t)
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		t.Fatalf("mpirun did not finish within %v\nstdout:\n%s\nstderr:\n%s", limit, p.stdout.String(), p.stderr.String())
		return -1
	}
}

// checkClean fails if a job record or a rank process outlived mpirun.
func (p *proc) checkClean(t *testing.T) {
	t.Helper()
	if ents, _ := os.ReadDir(filepath.Join(p.runtimeDir, "mpios")); len(ents) != 0 {
		t.Errorf("job record left behind: %v", ents)
	}
	re := regexp.MustCompile(`(?m)^rank \d+ (?:pid|child) (\d+)$`)
	for _, m := range re.FindAllStringSubmatch(p.stdout.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		if aliveAfter(pid, 3*time.Second) {
			t.Errorf("process %d survived mpirun", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// aliveAfter reports whether pid still runs after waiting up to d: a SIGKILLed process that
// is not ours to reap may take a moment to die.
func aliveAfter(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return true
		}
	}
	return false
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z' // a zombie is dead
}

func mpirunOK(t *testing.T, args ...string) *proc {
	t.Helper()
	p := start(t, args...)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	return p
}

func wantLine(t *testing.T, out, pattern string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + pattern + `$`).MatchString(out) {
		t.Errorf("no line matching %q in:\n%.3000s", pattern, out)
	}
}

func TestArgsPassthrough(t *testing.T) {
	t.Parallel()
	p := mpirunOK(t, "-np", "2", fakerank, "-args", "--", "-n", "5", "-np", "--help")
	for r := range 2 {
		wantLine(t, p.stdout.String(), fmt.Sprintf(`rank %d args \["-args" "--" "-n" "5" "-np" "--help"\]`, r))
	}
	wantLine(t, p.stderr.String(), `mpirun: job \S+ nats nats://127\.0\.0\.1:\d+`)
	if first, _, _ := strings.Cut(p.stderr.String(), "\n"); !strings.HasPrefix(first, "mpirun: job ") {
		t.Errorf("first stderr line %q", first)
	}
}

func TestAliasAndOptions(t *testing.T) {
	t.Parallel()
	p := mpirunOK(t, "-n", "3", "--tag-output", "--job-id", "opt-test", "--bind", "127.0.0.1",
		"--timeout", "30s", fakerank)
	wantLine(t, p.stderr.String(), `mpirun: job opt-test nats nats://127\.0\.0\.1:\d+`)
	for r := range 3 {
		wantLine(t, p.stdout.String(), fmt.Sprintf(`\[%d\] rank %d table 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+`, r, r))
	}
}

func TestRankFailureStatus(t *testing.T) {
	t.Parallel()
	p := start(t, "-np", "4", fakerank, "-on", "2", "-exit", "3", "-delay", "200ms", "-sleep", "1h", "-child")
	begin := time.Now()
	if code := p.wait(t, 20*time.Second); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if d := time.Since(begin); d > 8*time.Second {
		t.Errorf("took %v", d)
	}
	wantLine(t, p.stderr.String(), `mpirun: rank 2 \(pid \d+\) exited with status 3`)
}

func TestSignalsStopJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}} {
		p := start(t, "-np", "3", fakerank, "-sleep", "1h", "-child")
		// Wait until every rank and its child run, so the test sees all pids.
		deadline := time.Now().Add(20 * time.Second)
		for strings.Count(p.stdout.String(), " table ") < 3 || strings.Count(p.stdout.String(), " child ") < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("ranks did not start:\n%s\n%s", p.stdout.String(), p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ents, _ := os.ReadDir(filepath.Join(p.runtimeDir, "mpios")); len(ents) != 1 {
			t.Errorf("job record missing while running: %v", ents)
		}
		if err := p.cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 10*time.Second); code != tc.code {
			t.Errorf("%v: exit status %d, want %d", tc.sig, code, tc.code)
		}
		wantLine(t, p.stderr.String(), fmt.Sprintf(`mpirun: received %v, stopping the job`, tc.sig))
	}
}

func TestTimeoutCLI(t *testing.T) {
	t.Parallel()
	p := start(t, "-np", "2", "--timeout", "500ms", fakerank, "-sleep", "1h")
	if code := p.wait(t, 20*time.Second); code != 124 {
		t.Errorf("exit status %d, want 124", code)
	}
	wantLine(t, p.stderr.String(), `mpirun: job timed out after 500ms`)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-np", "0", fakerank}, 2, `mpirun: -np 0: need at least 1 rank \(see mpirun --help\)`},
		{[]string{"-np", "-3", fakerank}, 2, `mpirun: -np -3: need at least 1 rank .*`},
		{[]string{"-np", "2"}, 2, `mpirun: missing PROGRAM \(see mpirun --help\)`},
		{[]string{fakerank}, 2, `mpirun: missing -np N .*`},
		{[]string{"--bogus", "-np", "2", fakerank}, 2, `mpirun: flag provided but not defined: -bogus .*`},
		{[]string{"-np", "two", fakerank}, 2, `mpirun: invalid value "two" for flag -np: .*`},
		{[]string{"-np", "1", "--timeout", "soon", fakerank}, 2, `mpirun: invalid value "soon" for flag -timeout: .*`},
		{[]string{"-np", "1", "--job-id", "a/b", fakerank}, 2, `mpirun: --job-id: .*`},
		{[]string{"-np", "1", "--max-recoveries", "-1", fakerank}, 2, `mpirun: --max-recoveries -1: want N >= 0 .*`},
		{[]string{"-np", "1", "--hang-timeout", "-1s", fakerank}, 2, `mpirun: --hang-timeout must not be negative .*`},
		{[]string{"-np", "1", "--migrate-timeout", "0s", fakerank}, 2, `mpirun: --migrate-timeout must be positive .*`},
		{[]string{"-np", "2", "./no-such-program"}, 1, `mpirun: program "./no-such-program": not found .*`},
		{[]string{"-np", "2", "no-such-command-xyz"}, 1, `mpirun: program "no-such-command-xyz": not found .*`},
	} {
		p := start(t, tc.args...)
		if code := p.wait(t, 20*time.Second); code != tc.code {
			t.Errorf("%q: exit status %d, want %d", tc.args, code, tc.code)
		}
		out := p.stderr.String()
		if strings.Count(out, "\n") != 1 || p.stdout.String() != "" {
			t.Errorf("%q: want exactly one line on stderr and nothing on stdout, got\n%s%s", tc.args, out, p.stdout.String())
		}
		wantLine(t, out, tc.want)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		p := mpirunOK(t, arg)
		out := p.stdout.String()
		for _, want := range []string{"USAGE:", "-np N, -n N", "--nats URL", "--tag-output", "--timeout DURATION",
			"--job-id ID", "--bind HOST", "--migrate-timeout DURATION", "EXAMPLES:", "EXIT STATUS:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: help lacks %q", arg, want)
			}
		}
	}
}

// writeModule creates a Go module in a new directory with main.go holding src.
func writeModule(t *testing.T, name, src string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string]string{"go.mod": "module " + name + "\n\ngo 1.22\n", "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBuildDirectory(t *testing.T) {
	t.Parallel()
	dir := writeModule(t, "hello2d", `package main

import (
	"fmt"
	"os"
)

func main() { fmt.Println("hello from", os.Getenv("MPIOS_RANK"), os.Args[1:]) }
`)
	p := start(t, "-np", "2", dir, "-n", "5")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	wantLine(t, p.stdout.String(), `hello from 0 \[-n 5\]`)
	wantLine(t, p.stdout.String(), `hello from 1 \[-n 5\]`)

	bad := writeModule(t, "broken", "package main\n\nfunc main() { nope() }\n")
	p = start(t, "-np", "2", bad)
	if code := p.wait(t, 60*time.Second); code != 1 {
		t.Errorf("broken build: exit status %d, want 1", code)
	}
	wantLine(t, p.stderr.String(), `mpirun: go build .*broken: exit status 1`)
	wantLine(t, p.stderr.String(), `.*main.go:3:\d+: undefined: nope`)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRealNATSServer runs a job against the nats-server binary of the Debian package, or the
// one named by $MPIOS_TEST_NATS_SERVER.
func TestRealNATSServer(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("MPIOS_TEST_NATS_SERVER")
	if bin == "" {
		// Debian installs it in /usr/sbin, which is not on every user's PATH.
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
			if _, err := os.Stat(p); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		t.Skip("nats-server not installed (apt-get install nats-server)")
	}
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "--user", "ruser", "--pass", "rpass")
	var srvOut testbin.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = srv.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not start: %v\n%s", err, srvOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := fmt.Sprintf("nats://ruser:rpass@127.0.0.1:%d", port)
	p := mpirunOK(t, "-np", "3", "--nats", url, fakerank)
	wantLine(t, p.stderr.String(), fmt.Sprintf(`mpirun: job \S+ nats nats://127\.0\.0\.1:%d`, port))
	if strings.Contains(p.stderr.String(), "rpass") {
		t.Error("password printed")
	}
	wantLine(t, p.stdout.String(), `rank 2 table \S+`)

	// Wrong credentials: a clear connection error, no job.
	p = start(t, "-np", "1", "--nats", fmt.Sprintf("nats://ruser:wrong@127.0.0.1:%d", port), fakerank)
	if code := p.wait(t, 20*time.Second); code != 1 {
		t.Errorf("bad credentials: exit status %d, want 1", code)
	}
	wantLine(t, p.stderr.String(), `mpirun: connect to NATS at nats://127\.0\.0\.1:\d+: .*[Aa]uthorization.*`)
}
