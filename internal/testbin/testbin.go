// Package testbin builds the project's commands for tests that run them as real processes
// (mpirun, pcmd, the example solvers) and reads what they print.
package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// ModuleRoot returns the directory of the module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles package pkg (an import path or a path relative to the module root) into out,
// failing t if it does not build.
func Build(t testing.TB, out, pkg string) {
	t.Helper()
	if err := BuildE(out, pkg); err != nil {
		t.Fatal(err)
	}
}

// BuildE is Build without a testing.TB. With several packages, out must be a directory
// ending in a path separator; each binary is named after its package.
func BuildE(out string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, b)
	}
	return nil
}

// Main is TestMain for packages whose tests run the project's commands as processes. It
// builds pkgs (paths relative to the module root) with one go build, so that they compile in
// parallel, into a temporary directory where each binary is named after the last element of
// its package path; calls ready with that directory; runs the tests; and removes the
// directory. It returns the exit code for os.Exit.
func Main(m *testing.M, ready func(dir string), pkgs ...string) int {
	dir, err := os.MkdirTemp("", "mpios-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := BuildE(dir+string(filepath.Separator), pkgs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ready(dir)
	return m.Run()
}

// Run runs the program at path with args for at most limit and returns what it printed. env
// nil means the current environment. The error is the program's (an *exec.ExitError for a
// non-zero status), or says that it did not finish in time.
func Run(limit time.Duration, env []string, path string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v (%w)", filepath.Base(path), limit, err)
	}
	return o.String(), e.String(), err
}

// CheckBitwise fails t unless got and want hold the same float64 bit patterns, naming the
// first element that differs with name(i).
func CheckBitwise(t testing.TB, got, want []float64, name func(i int) string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("%s = %v, want %v", name(i), got[i], want[i])
		}
	}
}

// Crashed fails t unless err is the exit status 1 of a job whose rank crashed on purpose,
// and returns the checkpoints of job id in the store at ckptDir, newest first.
func Crashed(t testing.TB, err error, stdout, stderr, ckptDir, id string) []ckptstore.Manifest {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("crashing run: got %v, want exit status 1\n%s%s", err, stdout, stderr)
	}
	store, err := ckptstore.Open(ckptDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.Checkpoints(id)
	if err != nil {
		t.Fatalf("checkpoints of the crashed job: %v\n%s%s", err, stdout, stderr)
	}
	return ms
}

// OutputValue returns the value of the line "key value" in out, failing t if there is none.
func OutputValue(t testing.TB, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return v
		}
	}
	t.Fatalf("no %q line in output:\n%s", key, out)
	return ""
}

// ReadFloats reads a -dump file of raw float64 values, failing t on error.
func ReadFloats(t testing.TB, path string) []float64 {
	t.Helper()
	xs, err := solverkit.ReadFloats(path)
	if err != nil {
		t.Fatal(err)
	}
	return xs
}

// IsolatedEnv returns the environment without MPIOS_ variables, with XDG_RUNTIME_DIR set to
// runtimeDir, plus extra. A private runtime directory keeps mpirun's job ids apart from those
// of tests running concurrently.
func IsolatedEnv(runtimeDir string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MPIOS_") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	return append(append(env, "XDG_RUNTIME_DIR="+runtimeDir), extra...)
}

// Buffer is a bytes.Buffer that a test can read while a process is still writing to it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NATSServer starts an in-process NATS server on a random loopback port for the duration of
// the test and returns its URL. With a non-empty user the server requires user and password,
// and the URL carries them.
func NATSServer(t testing.TB, user, password string) string {
	t.Helper()
	srv := NATSServerWith(t, func(o *natsserver.Options) { o.Username, o.Password = user, password })
	if user == "" {
		return srv.ClientURL()
	}
	return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+password+"@", 1)
}

// NATSServerWith starts an in-process NATS server on a random loopback port for the duration
// of the test, after configure (nil: none) has set its options (authentication, TLS).
func NATSServerWith(t testing.TB, configure func(*natsserver.Options)) *natsserver.Server {
	t.Helper()
	opts := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true}
	if configure != nil {
		configure(opts)
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// OwnerControl encodes req for job jobID's control subject as the job's owner does (pcmd
// migrate, checkpoint, resize): signed with the job key from the record its mpirun wrote
// under the XDG_RUNTIME_DIR of env.
func OwnerControl(env []string, jobID string, req job.ControlRequest) ([]byte, error) {
	dir := jobrecord.RuntimeDir()
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok {
			dir = filepath.Join(v, "mpios")
		}
	}
	rec, err := jobrecord.ReadRecord(jobrecord.RecordPath(dir, jobID))
	if err != nil {
		return nil, err
	}
	w, err := rec.OwnerWrapper(time.Now())
	if err != nil {
		return nil, err
	}
	body, err := job.Encode(req)
	if err != nil {
		return nil, err
	}
	return w.Wrap(job.ControlSubject(jobID), body, time.Now())
}

// CPUTime is the calling process's CPU time so far, user and system, of all its threads:
// what benchmarks that share the machine with other work report instead of wall time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
