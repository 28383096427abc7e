package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/gobuild"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/testbin"
)

// fakerank is the test rank binary built by TestMain.
var fakerank string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) { fakerank = filepath.Join(dir, "fakerank") }, "./internal/launch/testdata/fakerank"))
}

type result struct {
	stdout, stderr string
	err            error
	elapsed        time.Duration
}

// runJob runs fakerank (unless cfg.Program is set) with args and checks the invariants of
// every run: the first stderr line, and no record file or rank process left behind.
func runJob(t *testing.T, cfg Config, args ...string) result {
	t.Helper()
	var stdout, stderr testbin.Buffer
	if cfg.Program == "" {
		cfg.Program = fakerank
	}
	cfg.Args = args
	cfg.Stdout, cfg.Stderr = &stdout, &stderr
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = t.TempDir()
	}
	start := time.Now()
	err := Run(context.Background(), cfg)
	res := result{stdout: stdout.String(), stderr: stderr.String(), err: err, elapsed: time.Since(start)}
	t.Logf("%d ranks %q: %v in %v\nstderr:\n%s", cfg.NP, args, err, res.elapsed, trunc(res.stderr, 1500))

	first, _, _ := strings.Cut(res.stderr, "\n")
	if !regexp.MustCompile(`^mpirun: job \S+ nats nats://[^@\s]+$`).MatchString(first) {
		t.Errorf("first stderr line %q is not the job line", first)
	}
	if ents, _ := os.ReadDir(cfg.RuntimeDir); len(ents) != 0 {
		t.Errorf("runtime dir not cleaned up: %v", ents)
	}
	for _, pid := range pids(res.stdout) {
		if aliveAfter(pid, 3*time.Second) {
			t.Errorf("process %d survived the job", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return res
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "...(truncated)"
	}
	return s
}

var pidRE = regexp.MustCompile(`(?m)^(?:\[\d+\] )?rank \d+ (?:pid|child) (\d+)`)

// pids returns the rank and child pids fakerank printed.
func pids(stdout string) []int {
	var out []int
	for _, m := range pidRE.FindAllStringSubmatch(stdout, -1) {
		pid, _ := strconv.Atoi(m[1])
		out = append(out, pid)
	}
	return out
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

// alive reports whether pid runs (zombies count as dead: nothing may reap them here).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func exitError(t *testing.T, err error, kind FailureKind, code int) *ExitError {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run returned %v, want an *ExitError", err)
	}
	if ee.Kind != kind || ee.Code != code {
		t.Errorf("ExitError kind %d code %d (%s), want kind %d code %d", ee.Kind, ee.Code, ee.Reason, kind, code)
	}
	return ee
}

func wantLine(t *testing.T, out, pattern string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + pattern + `$`).MatchString(out) {
		t.Errorf("no line matching %q in:\n%s", pattern, trunc(out, 4000))
	}
}

func TestRunSuccess(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 4}, "-args", "--", "-n", "5", "--help")
	if res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
	var table string
	for r := range 4 {
		wantLine(t, res.stdout, fmt.Sprintf(`rank %d args \["-args" "--" "-n" "5" "--help"\]`, r))
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d table (\S+)$`, r)).FindStringSubmatch(res.stdout)
		if m == nil {
			t.Fatalf("rank %d printed no table:\n%s", r, res.stdout)
		}
		if table == "" {
			table = m[1]
		} else if m[1] != table {
			t.Errorf("rank %d got table %s, rank 0 got %s", r, m[1], table)
		}
	}
	if addrs := strings.Split(table, ","); len(addrs) != 4 {
		t.Errorf("table %q: want 4 addresses", table)
	}
}

func TestRunNonMPIProgram(t *testing.T) {
	t.Parallel()
	// Ranks that never say hello and exit 0 are a successful job.
	if res := runJob(t, Config{NP: 3}, "-nohello"); res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
}

func TestTagOutputAndPartialLine(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 3, TagOutput: true}, "-partial", "-lines", "2")
	if res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
	for r := range 3 {
		wantLine(t, res.stdout, fmt.Sprintf(`\[%d\] rank %d partial`, r, r))
		wantLine(t, res.stdout, fmt.Sprintf(`\[%d\] rank %d table \S+`, r, r))
		wantLine(t, res.stderr, fmt.Sprintf(`\[%d\] rank %d err 1 \S+ end`, r, r))
	}
	if !strings.HasSuffix(res.stdout, "\n") {
		t.Error("stdout does not end with a newline")
	}
	for _, line := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
		if !regexp.MustCompile(`^\[(\d)\] rank (\d) `).MatchString(line) || line[1] != line[9] {
			t.Errorf("badly tagged line %q", line)
		}
	}
}

func TestOutputLinesNotInterleaved(t *testing.T) {
	t.Parallel()
	const lines, long = 3000, 1 << 20
	res := runJob(t, Config{NP: 4, TagOutput: true},
		"-lines", strconv.Itoa(lines), "-linelen", "300", "-long", strconv.Itoa(long))
	if res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
	check := func(name, out, kind string) {
		counts := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 2*long)
		lineRE := regexp.MustCompile(`^\[(\d)\] rank (\d) ` + kind + ` \d+ ([a-d]+) end$`)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "mpirun: ") || strings.Contains(line, " pid ") || strings.Contains(line, " table ") {
				continue
			}
			if m := regexp.MustCompile(`^\[(\d)\] rank (\d) long (x+) end$`).FindStringSubmatch(line); m != nil {
				if m[1] != m[2] || len(m[3]) != long {
					t.Errorf("%s: long line of rank %s mangled (%d bytes)", name, m[1], len(m[3]))
				}
				counts[m[1]+"long"]++
				continue
			}
			m := lineRE.FindStringSubmatch(line)
			if m == nil || m[1] != m[2] || len(m[3]) != 300 ||
				m[3] != strings.Repeat(string(rune('a'+m[1][0]-'0')), 300) {
				t.Fatalf("%s: mangled line %q", name, trunc(line, 400))
			}
			counts[m[1]]++
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for r := range 4 {
			if c := counts[strconv.Itoa(r)]; c != lines {
				t.Errorf("%s: rank %d: %d lines, want %d", name, r, c, lines)
			}
			if kind == "out" && counts[strconv.Itoa(r)+"long"] != 1 {
				t.Errorf("%s: rank %d: long line missing", name, r)
			}
		}
	}
	check("stdout", res.stdout, "out")
	check("stderr", res.stderr, "err")
}

func TestRankExitStatusExternalNATS(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const id = "exit-status-test"
	events, err := nc.SubscribeSync(job.EventSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	res := runJob(t, Config{NP: 4, NATSURL: url, JobID: id},
		"-on", "2", "-exit", "3", "-delay", "200ms", "-sleep", "1h", "-child")
	ee := exitError(t, res.err, RankFailed, 3)
	if ee.Rank != 2 {
		t.Errorf("failed rank %d, want 2", ee.Rank)
	}
	wantLine(t, res.stderr, `mpirun: job exit-status-test nats nats://127\.0\.0\.1:\d+`)
	wantLine(t, res.stderr, `mpirun: rank 2 \(pid \d+\) exited with status 3`)
	if res.elapsed > 10*time.Second {
		t.Errorf("job took %v to fail", res.elapsed)
	}
	if n := len(pids(res.stdout)); n != 8 {
		t.Errorf("saw %d rank and child pids, want 8:\n%s", n, res.stdout)
	}
	m, err := events.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no event published: %v", err)
	}
	// Events travel under the job key, which this test does not hold: read the body only.
	env, err := ctlauth.DecodeEnvelope(m.Data)
	if err != nil || env.Scheme != ctlauth.SchemeJobMAC || env.From.Role != ctlauth.RoleLauncher {
		t.Fatalf("event is not an envelope of the launcher under the job key: %+v %v", env, err)
	}
	var ev job.Event
	if err := job.Decode(env.Body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != job.EventRankFailed || ev.Rank != 2 || !strings.Contains(ev.Reason, "status 3") {
		t.Errorf("event %+v, want rank-failed for rank 2", ev)
	}
}

// TestForgedAbortAndLostReportsAreIgnored: a client of the job's NATS server that does not
// hold the job key cannot end the job with an abort or a lost-peer report, forged or made
// with another job's key.
func TestForgedAbortAndLostReportsAreIgnored(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "u", "p")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const id = "forged-abort-test"
	other, err := ctlauth.NewJobChannel(id, bytes.Repeat([]byte{7}, 32), ctlauth.Sender{Role: ctlauth.RoleRank, Rank: 0}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	attacked := make(chan int)
	go func() {
		n := 0
		defer func() { attacked <- n }()
		for tick := time.NewTicker(50 * time.Millisecond); ; {
			select {
			case <-stop:
				tick.Stop()
				return
			case <-tick.C:
			}
			abort := job.Abort{Rank: 0, Code: 7, Message: "forged"}
			lost := job.Lost{Observer: 0, Rank: 1, Reason: "forged"}
			plain, _ := job.Encode(abort)
			plainLost, _ := job.Encode(lost)
			keyed, _ := other.Encode(job.AbortSubject(id), abort, time.Now())
			keyedLost, _ := other.Encode(job.LostSubject(id), lost, time.Now())
			for subj, data := range map[string][][]byte{job.AbortSubject(id): {plain, keyed}, job.LostSubject(id): {plainLost, keyedLost}} {
				for _, d := range data {
					if nc.Publish(subj, d) == nil {
						n++
					}
				}
			}
		}
	}()
	res := runJob(t, Config{NP: 2, NATSURL: url, JobID: id}, "-sleep", "1500ms")
	close(stop)
	if n := <-attacked; n == 0 {
		t.Fatal("no forged message was published")
	}
	if res.err != nil {
		t.Fatalf("the job failed under forged aborts and lost reports: %v\n%s", res.err, res.stderr)
	}
	wantLine(t, res.stderr, `mpirun: ignoring a message on mpios\.job\.forged-abort-test\.abort: ctlauth: .*`)
}

func TestRankKilledBySignal(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 3}, "-on", "1", "-signal", "KILL", "-sleep", "1h")
	exitError(t, res.err, RankFailed, 128+int(syscall.SIGKILL))
	wantLine(t, res.stderr, `mpirun: rank 1 \(pid \d+\) was killed by signal killed`)
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 2, Timeout: 700 * time.Millisecond}, "-sleep", "1h", "-child")
	exitError(t, res.err, TimedOut, StatusTimedOut)
	wantLine(t, res.stderr, `mpirun: job timed out after 700ms`)
}

func TestSignalStopsJob(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 1)
	time.AfterFunc(time.Second, func() { sigs <- syscall.SIGTERM })
	res := runJob(t, Config{NP: 3, Signals: sigs}, "-sleep", "1h", "-child")
	exitError(t, res.err, Interrupted, 143)
	wantLine(t, res.stderr, `mpirun: received terminated, stopping the job`)
}

func TestStubbornRankIsKilled(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 1)
	time.AfterFunc(time.Second, func() { sigs <- syscall.SIGINT })
	res := runJob(t, Config{NP: 2, Signals: sigs, KillGrace: 300 * time.Millisecond},
		"-sleep", "1h", "-ignoreterm")
	exitError(t, res.err, Interrupted, 130)
	wantLine(t, res.stderr, `mpirun: rank \d \(pid \d+\) did not stop within 300ms of SIGTERM, killing it`)
}

func TestAbort(t *testing.T) {
	t.Parallel()
	// fakerank exits right after publishing, racing the Abort against its exit status.
	for range 3 {
		res := runJob(t, Config{NP: 3}, "-on", "1", "-abort", "7", "-sleep", "1h")
		exitError(t, res.err, RankAborted, 7)
		wantLine(t, res.stderr, `mpirun: rank 1 \(pid \d+\) called abort with code 7: fakerank gives up`)
	}
}

func TestRendezvousTimeout(t *testing.T) {
	t.Parallel()
	// -ignoreterm: the waiting ranks must live to print the reply to their hello.
	res := runJob(t, Config{NP: 3, RendezvousTimeout: 700 * time.Millisecond, KillGrace: time.Second},
		"-silent", "1", "-sleep", "1h", "-ignoreterm")
	exitError(t, res.err, RendezvousFailed, StatusFailed)
	wantLine(t, res.stderr, `mpirun: rendezvous timed out after 700ms: no hello from rank 1`)
	// The ranks waiting in the rendezvous were told why.
	wantLine(t, res.stderr, `fakerank: rendezvous refused: mpirun: rendezvous timed out .*`)
}

func TestRankExitsBeforeRendezvous(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 3}, "-quit", "2", "-hellodelay", "300ms", "-sleep", "1h")
	exitError(t, res.err, RendezvousFailed, StatusFailed)
	wantLine(t, res.stderr, `mpirun: rank 2( \(pid \d+\))? exited before the rendezvous completed`)
}

func TestBadHellosAreIgnored(t *testing.T) {
	t.Parallel()
	res := runJob(t, Config{NP: 2}, "-garbage", "-dup", "-hellodelay", "500ms")
	if res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
	wantLine(t, res.stderr, `mpirun: ignoring a message on mpios.job.\S+.hello: ctlauth: malformed envelope.*`)
	wantLine(t, res.stderr, `mpirun: ignoring malformed hello: decode \*job.Hello: .*`)
	wantLine(t, res.stderr, `mpirun: ignoring invalid hello: hello from rank 7: outside \[0,2\)`)
	wantLine(t, res.stderr, `mpirun: ignoring duplicate hello for rank 0 from pid \d+ .*`)
	wantLine(t, res.stdout, `rank 0 dup reply "mpirun: duplicate hello for rank 0"`)
	wantLine(t, res.stdout, `rank 1 table \S+`)
}

func TestBuildPackageDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // to see that the build directory is removed
	res := runJob(t, Config{NP: 2, Program: "./testdata/fakerank"}, "-args")
	if res.err != nil {
		t.Fatalf("Run: %v", res.err)
	}
	wantLine(t, res.stdout, `rank 1 table \S+`)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestBuildError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module broken\n\ngo 1.22\n")
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nfunc main() { undefinedThing() }\n")
	var stderr testbin.Buffer
	err := Run(context.Background(), Config{NP: 2, Program: dir, Stderr: &stderr, RuntimeDir: t.TempDir()})
	var be *gobuild.BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Run returned %v, want a *BuildError", err)
	}
	if !strings.Contains(be.Output, "undefined: undefinedThing") || !strings.Contains(err.Error(), "undefinedThing") {
		t.Errorf("build error does not show the compiler message: %v", err)
	}
}

func TestProgramErrors(t *testing.T) {
	t.Parallel()
	notMain := t.TempDir()
	writeFile(t, filepath.Join(notMain, "lib.go"), "package lib\n")
	notExec := filepath.Join(t.TempDir(), "data.txt")
	writeFile(t, notExec, "x")
	for _, tc := range []struct{ prog, want string }{
		{"no-such-program-xyz", "not found"},
		{"./no/such/file", "not found"},
		{notMain, "not a main package"},
		{t.TempDir(), "without Go files"},
		{notExec, "not executable"},
	} {
		err := Run(context.Background(), Config{NP: 1, Program: tc.prog, Stderr: &testbin.Buffer{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.prog, err, tc.want)
		}
	}
	if err := Run(context.Background(), Config{NP: 0, Program: "true"}); err == nil {
		t.Error("NP 0 accepted")
	}
	if err := Run(context.Background(), Config{NP: 1, Program: "true", JobID: "a.b"}); err == nil {
		t.Error("bad job id accepted")
	}
}

func TestRecordFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "rt")
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{NP: 1, Program: fakerank, Args: []string{"-sleep", "2s"},
			JobID: "rec-test", RuntimeDir: dir, Stdout: &testbin.Buffer{}, Stderr: &testbin.Buffer{}})
	}()
	path := jobrecord.RecordPath(dir, "rec-test")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec, err := jobrecord.ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.JobID != "rec-test" || rec.PID != os.Getpid() || !strings.Contains(rec.NATSURL, "@127.0.0.1:") ||
		time.Since(rec.Started) > time.Minute {
		t.Errorf("record %+v", rec)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	// A second job with the same id must not take over the live one's record.
	err = Run(context.Background(), Config{NP: 1, Program: "true", JobID: "rec-test", RuntimeDir: dir,
		Stdout: &testbin.Buffer{}, Stderr: &testbin.Buffer{}})
	if !errors.Is(err, jobrecord.ErrJobIDInUse) {
		t.Errorf("duplicate job id: %v, want ErrJobIDInUse", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record not removed: %v", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
