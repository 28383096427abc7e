// Command experiment reproduces the adaptation scenario of the MPI/IOS paper on an emulated
// cluster (package internal/testbed) and writes the results into docs/EXPERIMENTS.md and
// docs/experiment.svg.
//
// Scenario: heat2d runs as 2 × --ranks-per-node ranks on nodes n1 and n2. When rank 0
// reports iteration --join-at[0] × iters node n3 joins, at --join-at[1] × iters node n4
// (one --join-at value: both at once); at --load-at × iters a competing CPU-bound process
// takes --load of n1's and n2's CPU. This runs once per adaptive IOS policy of --policies
// (mpirun --policy mpiios, atsras, flcras) and once with --static (none). A last run checks
// stability: 4 idle, equal nodes, one rank each, the first of --policies, --idle-iters
// iterations: it should not migrate anything.
//
// Progress is measured from heat2d's "residual ITER VALUE" lines (-residual-every K), each
// timestamped when it arrives on mpirun's stdout; migrations from mpirun's
// "mpirun: migrated rank R from A to B at iteration I in PAUSE" lines on stderr.
//
// Usage (as root, for network namespaces and CPU quotas; otherwise the nodes share 127.0.0.1
// without quotas and the report says so):
//
//	go run ./bench/experiment            # full run, several minutes
//	go run ./bench/experiment --quick    # smoke run, about a minute
//
// See docs/EXPERIMENTS.md for the results and what the experiment expects of mpirun and pcmd.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/testbed"
	"github.com/mpios/mpios/internal/testbin"
)

// config is the command line.
type config struct {
	quick         bool
	n, iters      int
	residualEvery int
	joinAt        floatList // fractions of iters at which n3 and n4 join (one value: both)
	ranksPerNode  int
	loadAt        float64
	load          float64
	cpus          float64
	slots         int
	period        time.Duration
	adaptive      string   // -adaptive: the one adaptive policy of the old command line
	policies      []string // the adaptive policies, one run each
	static        string
	idleIters     int
	idleN         int
	skipIdle      bool
	window        float64
	timeout       time.Duration
	isolation     string
	doc, svg      string
	data          string
	logs          string
	render        string
	date          string
	keep          bool
	verbose       bool
	pcmdArgs      []string
	iosCooldown   time.Duration
	args          []string // the command line, for the report

	// -scenario grid (grid.go): two clusters joined by a slow link.
	scenario     string
	gridNodes    int
	gridDelay    time.Duration
	gridOneNATS  bool
	gridPolicies []string
}

type stringList []string

// floatList is a comma-separated list of numbers.
type floatList []float64

func (f *floatList) String() string {
	var s []string
	for _, v := range *f {
		s = append(s, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return strings.Join(s, ",")
}

func (f *floatList) Set(v string) error {
	*f = nil
	for _, part := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("%q: not a number", part)
		}
		*f = append(*f, x)
	}
	return nil
}

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags(args []string) (*config, error) {
	cfg := &config{args: args}
	fs := flag.NewFlagSet("experiment", flag.ContinueOnError)
	fs.BoolVar(&cfg.quick, "quick", false, "short smoke run: small grid, few iterations (sizes not given explicitly)")
	fs.IntVar(&cfg.n, "n", 0, "heat2d grid size (default 2048, --quick 1024)")
	fs.IntVar(&cfg.iters, "iters", 0, "heat2d iterations of the adaptive and static runs (default 3000, --quick 2400)")
	fs.IntVar(&cfg.residualEvery, "residual-every", 10, "heat2d -residual-every: progress report period in iterations")
	fs.Var(&cfg.joinAt, "join-at", "n3 joins at the first of these fractions of the iterations, n4 at the second; one value: both join then (default 0.2,0.45; --quick 0.2,0.4: phases long enough for the moves a join causes to land)")
	fs.IntVar(&cfg.ranksPerNode, "ranks-per-node", 4, "ranks that start on each of n1 and n2 (with 4, 8 ranks spread better over 3 nodes than over 2, so throughput can rise at each join)")
	fs.Float64Var(&cfg.loadAt, "load-at", 0, "the load on n1 and n2 rises at this fraction of the iterations (default 0.7, --quick 0.6)")
	fs.Float64Var(&cfg.load, "load", 0.8, "share of n1's and n2's CPU the competing process takes")
	fs.Float64Var(&cfg.cpus, "cpus", 0.5, "CPU quota of every node")
	fs.IntVar(&cfg.slots, "slots", 0, "slots of every node (default --ranks-per-node, at least 2)")
	fs.DurationVar(&cfg.period, "cfs-period", 10*time.Millisecond, "CFS period of the node quotas (short periods keep throttling from stalling the ranks' exchanges)")
	policies := fs.String("policies", "mpiios,atsras,flcras", "adaptive IOS policies, comma-separated: one run each, compared with the same static run; the first also runs the idle run")
	fs.StringVar(&cfg.adaptive, "adaptive", "", "one adaptive IOS policy (the older form of --policies; overrides it)")
	fs.StringVar(&cfg.static, "static", "none", "IOS policy of the static run")
	fs.IntVar(&cfg.idleIters, "idle-iters", 200, "iterations of the idle run")
	fs.IntVar(&cfg.idleN, "idle-n", 0, "grid size of the idle run (default 8192, --quick 2048)")
	fs.BoolVar(&cfg.skipIdle, "skip-idle", false, "leave out the idle run")
	fs.Float64Var(&cfg.window, "window", 0, "seconds over which iteration rates are averaged (default 1, --quick 0.5)")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "mpirun --timeout of each run (default 15m, --quick 5m)")
	fs.StringVar(&cfg.isolation, "isolation", "auto", "testbed isolation: auto, netns or loopback")
	fs.StringVar(&cfg.doc, "doc", "", "markdown report (default docs/EXPERIMENTS.md of the module; \"-\": stdout)")
	fs.StringVar(&cfg.svg, "svg", "", "SVG plot (default docs/experiment.svg of the module)")
	fs.StringVar(&cfg.data, "data", "", "also write the raw measurements here as JSON")
	fs.StringVar(&cfg.logs, "logs", filepath.Join(os.TempDir(), "mpios-experiment-logs"), "save mpirun's output and every node's pcmd log of each run here (\"\": do not)")
	fs.StringVar(&cfg.render, "render", "", "run nothing: write the report and plot of an earlier run's --data `FILE`")
	fs.StringVar(&cfg.date, "date", "2026-11-22", "date written into the report")
	fs.BoolVar(&cfg.verbose, "v", false, "print mpirun's and the testbed's messages as they come")
	fs.DurationVar(&cfg.iosCooldown, "ios-cooldown", 3*time.Second, "pcmd serve --ios-cooldown, if pcmd has it: a rank does not move again this soon after it arrived by migration (0: pcmd's default)")
	fs.Var((*stringList)(&cfg.pcmdArgs), "pcmd-arg", "extra argument for every \"pcmd serve\" (repeat for more)")
	fs.StringVar(&cfg.scenario, "scenario", "join", "join: nodes join a running job, then load rises (the MPI/IOS experiment); grid: two emulated clusters joined by a slow link, steals inside and across them, one cluster overloaded (writes only its own section of the report)")
	fs.IntVar(&cfg.gridNodes, "grid-nodes", 3, "-scenario grid: nodes per cluster (at least 3: ranks start on the first two, the others are idle)")
	fs.DurationVar(&cfg.gridDelay, "grid-delay", 15*time.Millisecond, "-scenario grid: one-way delay of every packet between the clusters")
	fs.BoolVar(&cfg.gridOneNATS, "grid-one-nats", false, "-scenario grid: one NATS server for both clusters, on the bridge, which the link does not delay (the layout before per-cluster servers: the agents' round trips then do not show the clusters)")
	gridPolicies := fs.String("grid-policies", "crs,nrs,rs,mpiios", "-scenario grid: adaptive IOS policies, one run each, compared with one static run")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	def := func(p *int, full, quick int) {
		if *p == 0 {
			*p = map[bool]int{false: full, true: quick}[cfg.quick]
		}
	}
	deff := func(p *float64, full, quick float64) {
		if *p == 0 {
			*p = map[bool]float64{false: full, true: quick}[cfg.quick]
		}
	}
	if cfg.scenario == "grid" {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "ranks-per-node" })
		if !set {
			cfg.ranksPerNode = 2 // 8 ranks on 4 half-CPU nodes
		}
		if cfg.slots == 0 {
			cfg.slots = 2 * cfg.ranksPerNode // room for the overloaded cluster's ranks
		}
		def(&cfg.iters, 1500, 600)
		deff(&cfg.loadAt, 0.3, 0.3)
	}
	def(&cfg.n, 2048, 1024)
	def(&cfg.iters, 3000, 2400)
	def(&cfg.idleN, 8192, 2048)
	if len(cfg.joinAt) == 0 {
		cfg.joinAt = map[bool]floatList{false: {0.2, 0.45}, true: {0.2, 0.4}}[cfg.quick]
	}
	if cfg.slots == 0 {
		cfg.slots = max(2, cfg.ranksPerNode)
	}
	cfg.policies = nil
	if cfg.adaptive != "" {
		*policies = cfg.adaptive
	}
	for _, p := range strings.Split(*policies, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case slices.Contains(cfg.policies, p):
			return nil, fmt.Errorf("-policies: %q twice", p)
		case p == "static" || p == "idle":
			return nil, fmt.Errorf("-policies: %q names a run, not a policy", p)
		}
		cfg.policies = append(cfg.policies, p)
	}
	deff(&cfg.loadAt, 0.7, 0.6)
	for _, p := range strings.Split(*gridPolicies, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(cfg.gridPolicies, p) {
			cfg.gridPolicies = append(cfg.gridPolicies, p)
		}
	}
	deff(&cfg.window, 1, 0.5)
	if cfg.timeout == 0 {
		cfg.timeout = map[bool]time.Duration{false: 15 * time.Minute, true: 5 * time.Minute}[cfg.quick]
	}
	switch {
	case cfg.n < 4 || cfg.idleN < 4:
		return nil, errors.New("-n and -idle-n must be at least 4 (one row per rank)")
	case cfg.iters < 1 || cfg.idleIters < 1:
		return nil, errors.New("-iters and -idle-iters must be positive")
	case cfg.residualEvery < 1:
		return nil, errors.New("-residual-every must be positive")
	case len(cfg.policies) == 0:
		return nil, errors.New("-policies: no policy")
	case len(cfg.joinAt) > 2:
		return nil, errors.New("-join-at: at most 2 values (n3, n4)")
	case cfg.scenario == "join" && !(cfg.joinAt[0] > 0 && slices.IsSorted(cfg.joinAt) && cfg.loadAt >= cfg.joinAt[len(cfg.joinAt)-1] && cfg.loadAt < 1):
		return nil, errors.New("want 0 < -join-at (n3) <= -join-at (n4) <= -load-at < 1")
	case cfg.ranksPerNode < 1:
		return nil, errors.New("-ranks-per-node must be positive")
	case !(cfg.load > 0 && cfg.load <= 1):
		return nil, errors.New("-load must be in (0, 1]")
	case !(cfg.cpus >= 0.01):
		return nil, errors.New("-cpus must be at least 0.01")
	case cfg.slots < cfg.ranksPerNode:
		return nil, errors.New("-slots must be at least -ranks-per-node (that many ranks start on each of n1 and n2)")
	case cfg.window <= 0:
		return nil, errors.New("-window must be positive")
	case cfg.timeout <= 0:
		return nil, errors.New("-timeout must be positive")
	case cfg.scenario != "join" && cfg.scenario != "grid":
		return nil, fmt.Errorf("-scenario %q: want join or grid", cfg.scenario)
	case cfg.scenario == "grid" && (cfg.gridNodes < 3 || cfg.gridDelay < 0 || len(cfg.gridPolicies) == 0):
		return nil, errors.New("-scenario grid: want -grid-nodes of at least 3, a -grid-delay not negative and some -grid-policies")
	}
	return cfg, nil
}

func main() {
	logger := log.New(os.Stderr, "experiment: ", log.Ltime)
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		logger.Print(err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, logger)
	stop()
	if err != nil {
		logger.Print(err)
		os.Exit(1)
	}
}

// scenarios returns the adaptive runs (one per policy, named after it), the static and the
// idle run of cfg.
func scenarios(cfg *config) (adaptive []scenario, static, idle scenario) {
	n12 := []testbed.NodeSpec{{Name: "n1", CPUs: cfg.cpus}, {Name: "n2", CPUs: cfg.cpus}}
	n34 := []testbed.NodeSpec{{Name: "n3", CPUs: cfg.cpus}, {Name: "n4", CPUs: cfg.cpus}}
	iter := func(frac float64) int { return max(1, int(frac*float64(cfg.iters))) }
	var joins []joinStep
	if len(cfg.joinAt) == 1 {
		joins = []joinStep{{At: iter(cfg.joinAt[0]), Nodes: n34}}
	} else {
		joins = []joinStep{{At: iter(cfg.joinAt[0]), Nodes: n34[:1]}, {At: iter(cfg.joinAt[1]), Nodes: n34[1:]}}
	}
	base := scenario{
		Nodes: n12, Hosts: fmt.Sprintf("n1:%d,n2:%d", cfg.ranksPerNode, cfg.ranksPerNode), Joins: joins,
		LoadNodes: []string{"n1", "n2"}, LoadAt: iter(cfg.loadAt), Load: cfg.load,
		N: cfg.n, Iters: cfg.iters, ResidualEvery: cfg.residualEvery,
	}
	for _, p := range cfg.policies {
		sc := base
		sc.Name, sc.Policy = p, p
		adaptive = append(adaptive, sc)
	}
	static = base
	static.Name, static.Policy = "static", cfg.static
	idle = scenario{
		Name: "idle", Policy: cfg.policies[0], Nodes: append(append([]testbed.NodeSpec(nil), n12...), n34...),
		Hosts: "n1:1,n2:1,n3:1,n4:1", N: cfg.idleN, Iters: cfg.idleIters, ResidualEvery: max(1, min(cfg.residualEvery, cfg.idleIters/20)),
	}
	return adaptive, static, idle
}

func run(ctx context.Context, cfg *config, logger *log.Logger) error {
	root, err := testbin.ModuleRoot()
	if err != nil {
		return fmt.Errorf("run from inside the mpios module: %w", err)
	}
	if cfg.doc == "" {
		cfg.doc = filepath.Join(root, "docs", "EXPERIMENTS.md")
	}
	if cfg.svg == "" {
		cfg.svg = filepath.Join(root, "docs", "experiment.svg")
	}
	if cfg.render != "" {
		return render(cfg, logger)
	}
	dir, err := os.MkdirTemp("", "mpios-experiment-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins := binaries{dir: dir}
	for _, b := range []struct {
		path *string
		pkg  string
	}{{&bins.mpirun, "./cmd/mpirun"}, {&bins.heat2d, "./heat2d"}, {&bins.pcmd, "./cmd/pcmd"},
		{&bins.loadgen, "./internal/testbed/loadgen"}, {&bins.nodeexe, "./internal/testbed/nodeexec"},
		{&bins.natsd, "./internal/testbed/natsd"}} {
		*b.path = filepath.Join(dir, filepath.Base(b.pkg))
		if err := testbin.BuildE(*b.path, b.pkg); err != nil {
			return err
		}
	}
	help, _ := exec.Command(bins.mpirun, "--help").CombinedOutput()
	bins.policyFlag = strings.Contains(string(help), "--policy")
	if !bins.policyFlag {
		logger.Printf("this mpirun has no --policy flag: the runs pass the policy as MPIOS_POLICY instead")
	}
	serveHelp, _ := exec.Command(bins.pcmd, "serve", "--help").CombinedOutput()
	if cfg.iosCooldown > 0 && !strings.Contains(strings.Join(cfg.pcmdArgs, " "), "--ios-cooldown") {
		if strings.Contains(string(serveHelp), "--ios-cooldown") {
			cfg.pcmdArgs = append(cfg.pcmdArgs, "--ios-cooldown", cfg.iosCooldown.String())
		} else {
			logger.Printf("this pcmd has no --ios-cooldown flag: its own cooldown applies")
		}
	}
	// The emulated nodes share this machine: a node's spare CPU is what its quota leaves,
	// not the host's idle CPUs (which the other nodes' load takes).
	if strings.Contains(string(serveHelp), "--cpu-quota-only") && !strings.Contains(strings.Join(cfg.pcmdArgs, " "), "--cpu-quota-only") {
		cfg.pcmdArgs = append(cfg.pcmdArgs, "--cpu-quota-only")
	}

	rn := &runner{cfg: cfg, bins: bins, log: logger}
	if cfg.scenario == "grid" {
		return runGrid(ctx, cfg, rn, logger)
	}
	adaptive, static, idle := scenarios(cfg)
	rep := &report{cfg: cfg, start: time.Now(), policyFlag: bins.policyFlag, loadStart: loadAvg()}
	for _, sc := range append(adaptive, static, idle) {
		if sc.Name == "idle" && cfg.skipIdle {
			continue
		}
		res, err := rn.run(ctx, sc)
		if err != nil {
			return fmt.Errorf("%s run: %w", sc.Name, err)
		}
		rep.results = append(rep.results, res)
	}
	rep.end, rep.loadEnd = time.Now(), loadAvg()

	return writeOutputs(cfg, rep, logger)
}

// saved is the --data file: enough to render the report again (--render).
type saved struct {
	Args       []string  `json:"args"`
	PcmdArgs   []string  `json:"pcmd_args"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	LoadStart  string    `json:"load_start"`
	LoadEnd    string    `json:"load_end"`
	PolicyFlag bool      `json:"policy_flag"`
	Results    []*result `json:"results"`
}

// saveData writes the runs to the --data file, if one was asked for, so that --render can
// redo the report and plot later.
func saveData(cfg *config, rep *report) error {
	if cfg.data == "" {
		return nil
	}
	b, err := json.MarshalIndent(saved{Args: cfg.args, PcmdArgs: cfg.pcmdArgs, Start: rep.start, End: rep.end,
		LoadStart: rep.loadStart, LoadEnd: rep.loadEnd, PolicyFlag: rep.policyFlag, Results: rep.results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(cfg.data, b, 0o644)
}

// writeOutputs writes the --data file, the plot and the report.
func writeOutputs(cfg *config, rep *report, logger *log.Logger) error {
	if err := saveData(cfg, rep); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.svg, []byte(rep.svg()), 0o644); err != nil {
		return err
	}
	md := keepGridSection(cfg.doc, rep.markdown(relTo(filepath.Dir(cfg.doc), cfg.svg)))
	if cfg.doc == "-" {
		_, err := os.Stdout.WriteString(md)
		return err
	}
	if err := os.WriteFile(cfg.doc, []byte(md), 0o644); err != nil {
		return err
	}
	logger.Printf("wrote %s and %s", cfg.doc, cfg.svg)
	if cfg.logs != "" && len(rep.results) > 0 && rep.results[0].Log != "" {
		logger.Printf("mpirun and node logs in %s", cfg.logs)
	}
	fmt.Print(rep.summary())
	return nil
}

// render writes the report and the plot of an earlier run's --data file.
func render(cfg *config, logger *log.Logger) error {
	b, err := os.ReadFile(cfg.render)
	if err != nil {
		return err
	}
	var sv saved
	if err := json.Unmarshal(b, &sv); err != nil {
		return fmt.Errorf("%s: %w", cfg.render, err)
	}
	orig, err := parseFlags(sv.Args)
	if err != nil {
		return fmt.Errorf("%s: the recorded command line: %w", cfg.render, err)
	}
	orig.doc, orig.svg, orig.data, orig.pcmdArgs = cfg.doc, cfg.svg, "", sv.PcmdArgs
	for _, res := range sv.Results {
		res.Scenario.upgrade()
	}
	rep := &report{cfg: orig, start: sv.Start, end: sv.End, loadStart: sv.LoadStart, loadEnd: sv.LoadEnd,
		policyFlag: sv.PolicyFlag, results: sv.Results}
	if orig.scenario == "grid" {
		return writeGrid(orig, rep)
	}
	return writeOutputs(orig, rep, logger)
}

// relTo is path relative to dir if possible.
func relTo(dir, path string) string {
	if r, err := filepath.Rel(dir, path); err == nil {
		return r
	}
	return path
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
