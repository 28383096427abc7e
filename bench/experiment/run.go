package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbed"
)

// scenario is one run of heat2d on an emulated cluster.
type scenario struct {
	Name   string `json:"name"`
	Policy string `json:"policy"` // IOS policy of the job; "" = none given
	// Nodes start with the cluster; Hosts is mpirun's --hosts.
	Nodes []testbed.NodeSpec `json:"nodes"`
	Hosts string             `json:"hosts"`
	// Joins add nodes once rank 0 reports their iterations, in order.
	Joins []joinStep `json:"joins,omitempty"`
	// Join and JoinAt are the single join of data files written before Joins existed
	// (read by --render only, through upgrade).
	Join   []testbed.NodeSpec `json:"join,omitempty"`
	JoinAt int                `json:"join_at,omitempty"`
	// LoadNodes get load Load once rank 0 reports iteration LoadAt (never if LoadAt <= 0).
	LoadNodes []string `json:"load_nodes,omitempty"`
	LoadAt    int      `json:"load_at,omitempty"`
	Load      float64  `json:"load,omitempty"`
	// heat2d's arguments.
	N             int `json:"n"`
	Iters         int `json:"iters"`
	ResidualEvery int `json:"residual_every"`
	// Clusters names each node's cluster (pcmd serve --cluster; -scenario grid), and
	// ClusterDelay delays every packet between two clusters, each way.
	Clusters     map[string]string `json:"clusters,omitempty"`
	ClusterDelay time.Duration     `json:"cluster_delay,omitempty"`
	// NodePolicy is every node's pcmd serve --policy (-scenario grid; "": pcmd's default).
	NodePolicy string `json:"node_policy,omitempty"`
	// SiteNATS gives every cluster its own NATS server, the servers joined by routes that
	// cross the delayed link (testbed.Options.Sites); false: one server for all.
	SiteNATS bool `json:"site_nats,omitempty"`
}

// joinStep is nodes joining the running job.
type joinStep struct {
	At    int                `json:"at"` // rank 0's iteration
	Nodes []testbed.NodeSpec `json:"nodes"`
}

// label is the event's name in the report, e.g. "n3 joins" or "n3,n4 join".
func (j joinStep) label() string {
	var names []string
	for _, n := range j.Nodes {
		names = append(names, n.Name)
	}
	if len(names) == 1 {
		return names[0] + " joins"
	}
	return strings.Join(names, ",") + " join"
}

// upgrade moves the single join of an older data file into Joins.
func (s *scenario) upgrade() {
	if len(s.Joins) == 0 && s.JoinAt > 0 && len(s.Join) > 0 {
		s.Joins = []joinStep{{At: s.JoinAt, Nodes: s.Join}}
	}
	s.Join, s.JoinAt = nil, 0
}

// loaded reports whether the scenario raises the load on some nodes.
func (s scenario) loaded() bool { return s.LoadAt > 0 && len(s.LoadNodes) > 0 }

// loadLabel is the name of the load's event in the report.
func (s scenario) loadLabel() string {
	return fmt.Sprintf("load %.0f%% on %s", 100*s.Load, strings.Join(s.LoadNodes, ","))
}

// eventLabels are the labels of the scenario's events, in order: its joins, then the load.
func (s scenario) eventLabels() []string {
	var out []string
	for _, j := range s.Joins {
		out = append(out, j.label())
	}
	if s.loaded() {
		out = append(out, s.loadLabel())
	}
	return out
}

// loadChanges counts the events of the scenario that change the cluster's resources.
func (s scenario) loadChanges() int { return len(s.eventLabels()) }

// ranks is the number of ranks --hosts asks for.
func (s scenario) ranks() int {
	total := 0
	for _, h := range strings.Split(s.Hosts, ",") {
		_, slots, ok := strings.Cut(h, ":")
		n, err := strconv.Atoi(slots)
		if !ok || err != nil {
			n = 1
		}
		total += n
	}
	return total
}

// sample is the progress rank 0 reported at a time.
type sample struct {
	At   float64 `json:"at"` // seconds since mpirun started
	Iter int     `json:"iter"`
}

// event is something the experiment did to the cluster during a run.
type event struct {
	At    float64 `json:"at"`
	Label string  `json:"label"`
	Iter  int     `json:"iter"` // rank 0's last reported iteration when it happened
}

// result is what one run measured.
type result struct {
	Scenario      scenario     `json:"scenario"`
	PolicyHow     string       `json:"policy_how"` // how the policy reached mpirun
	Isolated      bool         `json:"isolated"`
	CgroupVersion int          `json:"cgroup_version"`
	JobID         string       `json:"job_id"`
	Total         float64      `json:"total"` // seconds mpirun ran
	Err           string       `json:"error,omitempty"`
	Samples       []sample     `json:"samples"`
	Migrations    []migration  `json:"migrations"`
	Aborted       int          `json:"aborted"`
	Events        []event      `json:"events"`
	Checksum      string       `json:"checksum"`
	SecPerIter    float64      `json:"sec_per_iter"`
	Agents        []agentState `json:"agents"`              // the IOS agents' states at the end
	DelayHow      string       `json:"delay_how,omitempty"` // "netem" or "router" when clusters are delayed
	Log           string       `json:"-"`                   // mpirun's stderr and the testbed's messages
}

// iterations is the last iteration rank 0 reported.
func (r *result) iterations() int {
	if len(r.Samples) == 0 {
		return 0
	}
	return r.Samples[len(r.Samples)-1].Iter
}

// binaries are the programs the experiment runs.
type binaries struct {
	dir                                    string
	mpirun, heat2d, pcmd, loadgen, nodeexe string
	natsd                                  string
	policyFlag                             bool // mpirun knows --policy
}

// runner runs scenarios.
type runner struct {
	cfg  *config
	bins binaries
	log  *log.Logger
}

// run runs one scenario on a fresh cluster.
func (rn *runner) run(ctx context.Context, sc scenario) (*result, error) {
	res := &result{Scenario: sc}
	var logBuf syncBuffer
	logger := log.New(io.MultiWriter(&logBuf, rn.logWriter()), "testbed: ", log.Ltime)
	opts := testbed.Options{
		PCMD: rn.bins.pcmd, LoadGen: rn.bins.loadgen, NodeExec: rn.bins.nodeexe, NATSD: rn.bins.natsd, Sites: sc.sites(),
		Allow:     []string{filepath.Join(rn.bins.dir, "*")},
		Isolation: testbed.Isolation(rn.cfg.isolation), CFSPeriod: rn.cfg.period,
		Slots: rn.cfg.slots, ExtraArgs: rn.cfg.pcmdArgs, NodeArgs: sc.nodeArgs(), Nodes: sc.Nodes, Log: logger,
	}
	c, err := testbed.Start(ctx, opts)
	if err != nil && ctx.Err() == nil {
		// Starting the cluster is not part of what is measured: on this shared machine a
		// start can fail for reasons of its own, so it gets a second chance, in the log.
		rn.log.Printf("%s: the cluster did not start (%v); starting it once more", sc.Name, err)
		c, err = testbed.Start(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Close(); err != nil {
			rn.log.Printf("closing the cluster: %v", err)
		}
	}()
	res.Isolated = c.Isolated()
	if err := sc.link(c); err != nil {
		return nil, err
	}
	if sc.ClusterDelay > 0 {
		res.DelayHow = "netem"
		if strings.Contains(logBuf.String(), "delay router") {
			res.DelayHow = "router"
		}
	}
	if nodes := c.Nodes(); len(nodes) > 0 {
		res.CgroupVersion = nodes[0].CgroupVersion
	}

	args := []string{"--nats", c.NATSURL(), "--hosts", sc.Hosts, "--timeout", rn.cfg.timeout.String()}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MPIOS_") {
			env = append(env, kv)
		}
	}
	switch {
	case sc.Policy == "":
		res.PolicyHow = "none given"
	case rn.bins.policyFlag:
		args = append(args, "--policy", sc.Policy)
		res.PolicyHow = "mpirun --policy " + sc.Policy
	default:
		env = append(env, job.EnvPolicy+"="+sc.Policy)
		res.PolicyHow = job.EnvPolicy + "=" + sc.Policy + " (this mpirun has no --policy)"
	}
	args = append(args, rn.bins.heat2d, "-n", strconv.Itoa(sc.N), "-iters", strconv.Itoa(sc.Iters),
		"-residual-every", strconv.Itoa(sc.ResidualEvery))
	cmd := exec.CommandContext(ctx, rn.bins.mpirun, args...)
	cmd.Env = env
	cmd.Dir = rn.bins.dir
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	rn.log.Printf("%s: mpirun %s", sc.Name, strings.Join(redactArgs(args), " "))

	var mu sync.Mutex // guards res while the run goes on
	progress := make(chan int, 1024)
	start := time.Now()
	since := func() float64 { return time.Since(start).Seconds() }
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start mpirun: %w", sc.Name, err)
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		defer close(progress)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			t := since()
			if iter, ok := parseResidual(line); ok {
				mu.Lock()
				res.Samples = append(res.Samples, sample{At: t, Iter: iter})
				mu.Unlock()
				select {
				case progress <- iter:
				default: // the orchestrator is busy; it reads the newest value later
				}
				continue
			}
			mu.Lock()
			if m := checksumRE.FindStringSubmatch(line); m != nil {
				res.Checksum = m[1]
			} else if m := secIterRE.FindStringSubmatch(line); m != nil {
				res.SecPerIter, _ = strconv.ParseFloat(m[1], 64)
			}
			mu.Unlock()
		}
	})
	readers.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			t := since()
			fmt.Fprintf(&logBuf, "%8.3fs %s\n", t, line)
			if rn.cfg.verbose {
				rn.log.Printf("%s: %s", res.Scenario.Name, line)
			}
			mu.Lock()
			if m, ok := parseMigration(line); ok {
				m.At = t
				res.Migrations = append(res.Migrations, m)
				rn.log.Printf("%s: %.1fs: migration: rank %d %s -> %s", res.Scenario.Name, t, m.Rank, m.From, m.To)
			} else if abortedRE.MatchString(line) {
				res.Aborted++
			} else if m := jobRE.FindStringSubmatch(line); m != nil && res.JobID == "" {
				res.JobID = m[1]
			}
			mu.Unlock()
		}
	})

	// The orchestrator changes the cluster as rank 0 reaches the scenario's iterations.
	orchDone := make(chan error, 1)
	go func() {
		joins, loaded := 0, !sc.loaded()
		var errs []error
		for iter := range progress {
			for joins < len(sc.Joins) && iter >= sc.Joins[joins].At {
				j := sc.Joins[joins]
				joins++
				for _, n := range j.Nodes {
					if err := c.AddNode(n.Name, n.CPUs); err != nil {
						errs = append(errs, err)
					}
				}
				rn.addEvent(res, &mu, since(), iter, j.label())
			}
			if joins == len(sc.Joins) && !loaded && iter >= sc.LoadAt {
				loaded = true
				for _, n := range sc.LoadNodes {
					if err := c.SetLoad(n, sc.Load); err != nil {
						errs = append(errs, err)
					}
				}
				rn.addEvent(res, &mu, since(), iter, sc.loadLabel())
			}
		}
		orchDone <- errors.Join(errs...)
	}()

	readers.Wait()
	waitErr := cmd.Wait()
	res.Total = since()
	orchErr := <-orchDone
	if agents, err := iosSnapshot(c.NATSURL(), time.Second); err == nil {
		res.Agents = agents
	} else {
		rn.log.Printf("%s: asking the IOS agents for their state: %v", sc.Name, err)
	}
	rn.saveLogs(sc.Name, c, &logBuf)
	mu.Lock()
	defer mu.Unlock()
	if waitErr != nil {
		res.Err = fmt.Sprintf("mpirun: %v", waitErr)
	}
	if orchErr != nil {
		res.Err = strings.TrimPrefix(res.Err+"; "+orchErr.Error(), "; ")
	}
	res.Log = logBuf.String()
	rn.log.Printf("%s: %d iterations in %.1fs, %d migrations%s", sc.Name, res.iterations(), res.Total, len(res.Migrations),
		map[bool]string{true: ", error: " + res.Err, false: ""}[res.Err != ""])
	return res, ctx.Err()
}

func (rn *runner) addEvent(res *result, mu *sync.Mutex, at float64, iter int, label string) {
	mu.Lock()
	res.Events = append(res.Events, event{At: at, Iter: iter, Label: label})
	mu.Unlock()
	rn.log.Printf("%s: %.1fs (iteration %d): %s", res.Scenario.Name, at, iter, label)
}

// logWriter is where the testbed's messages go besides the result's log.
func (rn *runner) logWriter() io.Writer {
	if rn.cfg.verbose {
		return os.Stderr
	}
	return io.Discard
}

// redactArgs hides the NATS credentials of a command line.
func redactArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if i > 0 && out[i-1] == "--nats" {
			if at := strings.LastIndex(out[i], "@"); at >= 0 {
				out[i] = "nats://…@" + out[i][at+1:]
			}
		}
	}
	return out
}

// syncBuffer is a strings.Builder safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// saveLogs copies mpirun's output and every node's log (pcmd, its IOS agent, the load
// generator) into the --logs directory.
func (rn *runner) saveLogs(run string, c *testbed.Cluster, mpirunLog *syncBuffer) {
	dir := rn.cfg.logs
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		rn.log.Printf("logs: %v", err)
		return
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, run+"-"+name+".log"), b, 0o644); err != nil {
			rn.log.Printf("logs: %v", err)
		}
	}
	write("mpirun", []byte(mpirunLog.String()))
	for _, n := range c.Nodes() {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			rn.log.Printf("logs: %v", err)
			continue
		}
		write(n.Name, b)
	}
}
