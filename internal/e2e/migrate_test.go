package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/nats-io/nats.go"
)

// cluster is a NATS server and pcmd nodes on loopback, as on a real cluster: mpirun and the
// nodes only share the NATS URL.
type cluster struct {
	t   *testing.T
	url string
	nc  *nats.Conn
	env []string
	// stores maps each node started by startNode to its checkpoint store.
	stores map[string]string
}

// debianNATS is Debian's nats-server, used when installed (CI installs it).
const debianNATS = "/usr/sbin/nats-server"

func newCluster(t *testing.T, nodes ...string) *cluster {
	t.Helper()
	url := ""
	if _, err := os.Stat(debianNATS); err == nil {
		url = startNATSBinary(t)
	} else {
		t.Logf("%s not installed: using an in-process NATS server", debianNATS)
		url = testbin.NATSServer(t, "", "")
	}
	return newClusterAt(t, url, nodes...)
}

// newClusterAt is newCluster on the NATS server (or servers: comma-separated URLs) at url.
func newClusterAt(t *testing.T, url string, nodes ...string) *cluster {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &cluster{t: t, url: url, nc: nc, env: testbin.IsolatedEnv(t.TempDir()), stores: map[string]string{}}
	for _, n := range nodes {
		c.startNode(n, "--allow", bin+"/*")
	}
	return c
}

func startNATSBinary(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(debianNATS, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on port %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startNode starts a pcmd node and waits for its first heartbeat.
func (c *cluster) startNode(name string, args ...string) *exec.Cmd {
	c.t.Helper()
	beats, err := c.nc.SubscribeSync(job.NodeInfoSubject(name))
	if err != nil {
		c.t.Fatal(err)
	}
	beats.Unsubscribe()
	// Heartbeats every 500 ms: a node is declared gone after three missed (1.5 s), which a test
	// that kills a node still sees quickly, while a busy machine (CI running every package at
	// once) does not starve a healthy pcmd past it.
	all := []string{"serve", "--insecure-open", "--node", name, "--nats", c.url, "--slots", "8", "--heartbeat", "500ms"}
	if !slices.Contains(args, "--ckpt-store") {
		c.stores[name] = filepath.Join(c.t.TempDir(), "store")
		all = append(all, "--store", c.stores[name])
	}
	all = append(all, args...)
	cmd := exec.Command(prog("pcmd"), all...)
	cmd.Env = c.env
	var logb testbin.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // at once: SIGTERM would drain the node first
		cmd.Wait()
		if c.t.Failed() {
			c.t.Logf("pcmd %s log:\n%s", name, logb.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.nc.Request(job.NodeInfoSubject(name), nil, 200*time.Millisecond); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("pcmd %s did not come up:\n%s", name, logb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// job is an mpirun running in the background.
type bgJob struct {
	t      *testing.T
	id     string
	cmd    *exec.Cmd
	stdout testbin.Buffer
	stderr testbin.Buffer
	done   chan error
}

func (c *cluster) start(t *testing.T, id string, extraEnv []string, args ...string) *bgJob {
	t.Helper()
	// The nodes' IOS agents must not move ranks on their own here.
	all := append([]string{"--nats", c.url, "--job-id", id, "--policy", "none"}, args...)
	j := &bgJob{t: t, id: id, done: make(chan error, 1)}
	j.cmd = exec.Command(prog("mpirun"), all...)
	// Agreements every 20 iterations (40 ms with -pace 2ms), however loaded the machine.
	j.cmd.Env = append(append(append([]string(nil), c.env...), "MPIOS_CKPT_POLL=20"), extraEnv...)
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.done <- j.cmd.Wait() }()
	t.Cleanup(func() { j.cmd.Process.Kill() })
	j.waitLog(`job `+id+` nats`, 1, 10*time.Second)
	return j
}

// wait waits for mpirun to end and returns its exit code.
func (j *bgJob) wait(limit time.Duration) int {
	j.t.Helper()
	select {
	case err := <-j.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			j.t.Fatal(err)
		}
		return 0
	case <-time.After(limit):
		j.cmd.Process.Signal(syscall.SIGQUIT)
		j.t.Fatalf("job %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", j.id, limit, j.stdout.String(), j.stderr.String())
	}
	return -1
}

// sameDump fails the test unless the dump file at path holds want.
func (j *bgJob) sameDump(path string, want []byte) {
	j.t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		j.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		j.t.Fatalf("job %s: result differs from the undisturbed run\nstderr:\n%s", j.id, j.stderr.String())
	}
}

// waitLog waits until mpirun's stderr matches re n times.
func (j *bgJob) waitLog(re string, n int, limit time.Duration) {
	j.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(limit)
	for len(rx.FindAllString(j.stderr.String(), -1)) < n {
		select {
		case <-j.done:
			j.t.Fatalf("job %s ended before %d lines matching %q\nstderr:\n%s", j.id, n, re, j.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("job %s: no %d lines matching %q within %v\nstderr:\n%s", j.id, n, re, limit, j.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRunning waits until every rank of job id has started iterating: the rendezvous is
// done (mpirun takes requests) and a little time passed.
func (c *cluster) waitRunning(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := c.nc.Request(job.ReconfGetSubject(id), nil, time.Second)
		if err == nil && len(m.Data) > 0 {
			// mpirun answers only from its event loop; the ranks have said hello when a
			// harmless control request is no longer refused as "starting".
			data, _ := testbin.OwnerControl(c.env, id, job.ControlRequest{Kind: job.ControlMigrate, Rank: 1 << 20, To: "probe"})
			if r, err := c.nc.Request(job.ControlSubject(id), data, time.Second); err == nil {
				var rep job.ControlReply
				if ctlauth.DecodeUnverified(r.Data, &rep) == nil && !strings.Contains(rep.Error, "not running") {
					time.Sleep(200 * time.Millisecond)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not start running within 30s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// control sends a control request to job id and returns the reply.
func (c *cluster) control(id string, req job.ControlRequest) job.ControlReply {
	c.t.Helper()
	data, err := testbin.OwnerControl(c.env, id, req)
	if err != nil {
		c.t.Fatalf("control request %+v: %v", req, err)
	}
	m, err := c.nc.Request(job.ControlSubject(id), data, 10*time.Second)
	if err != nil {
		c.t.Fatalf("control request %+v: %v", req, err)
	}
	var rep job.ControlReply
	if err := ctlauth.DecodeUnverified(m.Data, &rep); err != nil {
		c.t.Fatal(err)
	}
	return rep
}

// migrate asks for a migration and waits until mpirun reports it (the n-th report).
func (c *cluster) migrate(j *bgJob, to string, n int, ranks ...int) {
	c.t.Helper()
	rep := c.control(j.id, job.ControlRequest{Kind: job.ControlMigrate, Ranks: ranks, To: to, Reason: "test"})
	for deadline := time.Now().Add(10 * time.Second); !rep.OK && strings.Contains(rep.Error, "try again") && time.Now().Before(deadline); {
		// The rank's previous process on the target is still exiting.
		time.Sleep(50 * time.Millisecond)
		rep = c.control(j.id, job.ControlRequest{Kind: job.ControlMigrate, Ranks: ranks, To: to, Reason: "test"})
	}
	if !rep.OK {
		c.t.Fatalf("migrate %v to %s refused: %s\nstderr:\n%s", ranks, to, rep.Error, j.stderr.String())
	}
	j.waitLog(`mpirun: migrated rank \d+ from \S+ to \S+ at iteration`, n, 30*time.Second)
}

// referenceDump runs prog locally (no migration) and returns its dump.
func referenceDump(t *testing.T, args ...string) []byte {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "ref.bin")
	res := mpirun(t, 120*time.Second, append([]string{"-np", "4", prog(args[0])}, append(args[1:], "-dump", dump)...)...)
	if res.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", res.code, res.stderr)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMigrationsKeepResultsBitwise is the migration test of record: two pcmd nodes and a real
// nats-server; heat2d and jacobi on 4 ranks move back and forth, two ranks in one boundary,
// rank 0 included, and the results are bitwise those of an undisturbed run; heat2d also
// checkpoints in the background meanwhile.
func TestMigrationsKeepResultsBitwise(t *testing.T) {
	apps := map[string][]string{
		"heat2d": {"heat2d", "-n", "96", "-iters", "2500"},
		"jacobi": {"jacobi", "-n", "256", "-maxiters", "2500", "-tol", "0"},
		// The 2-D decomposition: its Cartesian view of the world and its column halos
		// (mpi.CartView, Shift, Pack) are made again by each successor.
		"heat2d-2d": {"heat2d", "-n", "96", "-iters", "2500", "-decomp", "2d"},
	}
	for name, args := range apps {
		t.Run(name, func(t *testing.T) {
			want := referenceDump(t, args...)
			c := newCluster(t, "n1", "n2")
			dump := filepath.Join(t.TempDir(), "out.bin")
			run := []string{"--hosts", "n1:2,n2:2"}
			if name == "heat2d" {
				// Checkpoints every 7 iterations (14 ms) are often still being written
				// when a migration comes: they must be committed first, and survive it.
				run = append(run, "--ckpt-every", "7")
			}
			run = append(append(run, prog(args[0])), args[1:]...)
			j := c.start(t, "mig-"+name, nil, append(run, "-dump", dump, "-pace", "2ms")...)
			c.waitRunning(t, j.id)
			// Placement is round-robin: n1 runs ranks 0 and 2, n2 ranks 1 and 3.
			c.migrate(j, "n1", 1, 1)    // there
			c.migrate(j, "n2", 2, 1)    // and back
			c.migrate(j, "n2", 4, 0, 2) // two ranks in one boundary, rank 0 included
			c.migrate(j, "n1", 5, 0)
			if code := j.wait(120 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			j.sameDump(dump, want)
			if n := strings.Count(j.stderr.String(), "mpirun: migrated rank"); n != 5 {
				t.Fatalf("%d migrations reported, want 5:\n%s", n, j.stderr.String())
			}
			if strings.Contains(j.stderr.String(), "checkpoint") && strings.Contains(j.stderr.String(), "warning") {
				t.Fatalf("a checkpoint failed:\n%s", j.stderr.String())
			}
		})
	}
}

// TestMigrationAtCheckpointBoundary: with a checkpoint at every boundary, each migration
// coincides with one being taken; it is finished before the rank moves (the leaving process
// could not finish it later, and its successor never began it), and the job goes on.
func TestMigrationAtCheckpointBoundary(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "600"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1", "n2")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "migck", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "1", prog("heat2d"), "-n", "48", "-iters", "600", "-dump", dump, "-pace", "2ms")
	c.waitRunning(t, j.id)
	c.migrate(j, "n1", 1, 1)
	c.migrate(j, "n2", 2, 1, 0)
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
	if strings.Contains(j.stderr.String(), "warning") {
		t.Fatalf("a checkpoint failed:\n%s", j.stderr.String())
	}
}

// TestFailedMigrationsLeaveTheRankInPlace covers the failure cases of a migration: each one is
// aborted, the old process continues, the job's result is unchanged, and mpirun says why.
func TestFailedMigrationsLeaveTheRankInPlace(t *testing.T) {
	args := []string{"heat2d", "-n", "64", "-iters", "1500"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1", "n2")
	// n3 runs nothing of ours: its --allow does not cover the program.
	c.startNode("n3", "--allow", "/nonexistent/*")

	cases := []struct {
		name    string
		fail    string // the job's successors fail so (testdata/failsucc)
		to      string
		refused string // the control request is refused with this
		aborted string // or the migration is aborted with this in mpirun's log
	}{
		{name: "unknown-node", to: "nowhere", refused: "no pcmd serves it"},
		{name: "same-node", to: "n2", refused: "already runs on n2"},
		{name: "target-refuses", to: "n3", aborted: "not allowed by --allow"},
		{name: "successor-fails-to-start", fail: "exit-at-start", to: "n1", aborted: "ended before taking over: exited with status 3"},
		{name: "successor-dies-mid-transfer", fail: "exit-mid-state", to: "n1", aborted: "hand state to the successor on n1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := []string{"--hosts", "n1:2,n2:2"}
			if tc.fail != "" {
				run = append(run, prog("failsucc"), tc.fail)
			}
			id := "fail-" + tc.name
			dump := filepath.Join(t.TempDir(), "out.bin")
			j := c.start(t, id, nil, append(run, prog(args[0]), args[1], args[2], args[3], args[4], "-dump", dump, "-pace", "2ms")...)
			c.waitRunning(t, j.id)
			rep := c.control(id, job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: tc.to, Reason: "test"})
			if tc.refused != "" {
				if rep.OK || !strings.Contains(rep.Error, tc.refused) {
					t.Fatalf("reply %+v, want a refusal containing %q", rep, tc.refused)
				}
			} else {
				if !rep.OK {
					t.Fatalf("request refused: %s", rep.Error)
				}
				j.waitLog(`migration of rank 1 to `+tc.to+` aborted, it continues on n2: .*`+regexp.QuoteMeta(tc.aborted), 1, 90*time.Second)
				info := c.jobInfo(id)
				if len(info.Migrations) != 1 || info.Migrations[0].State != reconf.Aborted || info.Migrations[0].Error == "" {
					t.Fatalf("job info migrations %+v, want one failed with a reason", info.Migrations)
				}
			}
			if code := j.wait(120 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			j.sameDump(dump, want)
		})
	}
}

func (c *cluster) jobInfo(id string) job.JobInfo {
	c.t.Helper()
	m, err := c.nc.Request(job.JobInfoSubject(id), nil, 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	// mpirun answers under the job key: verify it as the job's owner, with its record.
	rt := ""
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok {
			rt = filepath.Join(v, "mpios")
		}
	}
	rec, err := jobrecord.ReadJob(rt, id)
	if err != nil {
		c.t.Fatal(err)
	}
	key, err := rec.Key()
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := key.DecodeJobInfo(m.Subject, m.Data, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return info
}

// TestRestartOnOtherNodesFetchesPieces: a job checkpoints on nodes n1 and n2 (synchronously,
// so that the checkpoint of iteration 16 is surely committed when it dies) and dies; it is
// restarted on n3 and n4, whose stores hold nothing of it: the manifest comes from the
// ranks' agreement, the pieces from the pcmd of the nodes that store them.
func TestRestartOnOtherNodesFetchesPieces(t *testing.T) {
	args := []string{"heat2d", "-n", "41", "-iters", "40"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1", "n2", "n3", "n4")
	crashed := c.start(t, "rs1", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "8", "--ckpt-sync", "--no-recover", prog("heat2d"), "-n", "41", "-iters", "40", "-crash-after", "21")
	if code := crashed.wait(60 * time.Second); code == 0 {
		t.Fatalf("the crashing run exited 0:\n%s", crashed.stderr.String())
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "rs2", nil, "--hosts", "n3:2,n4:2", "--restart", "rs1", prog("heat2d"), "-n", "41", "-iters", "40", "-dump", dump)
	if code := j.wait(60 * time.Second); code != 0 {
		t.Fatalf("restart: exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	errs := j.stderr.String()
	if !strings.Contains(errs, "restarts from job rs1 checkpoint") || !strings.Contains(errs, "iteration 16") {
		t.Errorf("restart should resume from iteration 16:\n%s", errs)
	}
	for _, node := range []string{"n1", "n2"} {
		if !strings.Contains(errs, "checkpoint 2 from node "+node) {
			t.Errorf("no piece was read from node %s:\n%s", node, errs)
		}
	}
	j.sameDump(dump, want)
}

// TestAcceptedMigrationIsCarriedOutOrAbortedWithAReason: an accepted migration whose ranks
// never reach an agreement point on it (MPIOS_CKPT_POLL larger than the run: the ranks agree
// once, at their first boundary) is not left pending in silence, as one was in a grid
// experiment run: it is aborted after --migrate-timeout with the reason, or reported not
// carried out when its rank finishes first. Either way the job's history says so, the rank
// stayed where it was, and the result is unchanged.
func TestAcceptedMigrationIsCarriedOutOrAbortedWithAReason(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	for _, tc := range []struct {
		name, iters, timeout, log string
	}{
		// 5000 paced iterations last at least 10 s: the 1 s timeout comes first.
		{"timeout", "5000", "1s", `mpirun: migration of rank 1 to n1 aborted, it continues on n2: the ranks reached no agreement point on it within 1s \(request 1\)`},
		// 1500 paced iterations end long before the 1 minute timeout.
		{"finished-first", "1500", "1m", `mpirun: migration of rank 1 to n1 not carried out: rank 1 finished first \(request 1\)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"heat2d", "-n", "64", "-iters", tc.iters}
			want := referenceDump(t, args...)
			id := "pending-" + tc.name
			dump := filepath.Join(t.TempDir(), "out.bin")
			j := c.start(t, id, []string{"MPIOS_CKPT_POLL=65536"}, "--hosts", "n1:2,n2:2", "--migrate-timeout", tc.timeout,
				prog(args[0]), args[1], args[2], args[3], args[4], "-dump", dump, "-pace", "2ms")
			c.waitRunning(t, j.id)
			if rep := c.control(id, job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: "n1", Reason: "test"}); !rep.OK {
				t.Fatalf("request refused: %s", rep.Error)
			}
			if tc.name == "timeout" {
				j.waitLog(tc.log, 1, 60*time.Second)
				info := c.jobInfo(id)
				if len(info.Migrations) != 1 || info.Migrations[0].State != reconf.Aborted || info.Migrations[0].Error == "" {
					t.Errorf("job info migrations %+v, want one aborted with a reason", info.Migrations)
				}
				if info.Ranks[1].Node != "n2" {
					t.Errorf("rank 1 runs on %q, want n2", info.Ranks[1].Node)
				}
			}
			if code := j.wait(120 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
			}
			wantLine := regexp.MustCompile(tc.log)
			if !wantLine.MatchString(j.stderr.String()) {
				t.Errorf("mpirun's log lacks %q:\n%s", tc.log, j.stderr.String())
			}
			if strings.Contains(j.stderr.String(), "migrated rank") {
				t.Errorf("the rank moved:\n%s", j.stderr.String())
			}
			j.sameDump(dump, want)
		})
	}
}
