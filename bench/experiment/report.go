package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// report turns the runs into the markdown report, the plot and a summary.
type report struct {
	cfg        *config
	start, end time.Time
	policyFlag bool
	loadStart  string // /proc/loadavg at the start
	loadEnd    string
	results    []*result
}

func (r *report) find(name string) *result {
	for _, res := range r.results {
		if res.Scenario.Name == name {
			return res
		}
	}
	return nil
}

// completed reports whether a run finished all its iterations without error.
func completed(res *result) bool {
	return res != nil && res.Err == "" && res.iterations() >= res.Scenario.Iters
}

// speedup is static's total time over adaptive's, 0 if either did not complete.
func (r *report) speedup() float64 {
	a, s := r.find("adaptive"), r.find("static")
	if !completed(a) || !completed(s) || a.Total <= 0 {
		return 0
	}
	return s.Total / a.Total
}

// perRankPerChange is a run's migrations per rank per load change.
func perRankPerChange(res *result) float64 {
	d := res.Scenario.ranks() * max(1, res.Scenario.loadChanges())
	return float64(len(res.Migrations)) / float64(d)
}

// phaseRate is rank 0's mean iteration rate between two times (-1: no data).
func phaseRate(samples []sample, from, to float64) float64 {
	var first, last *sample
	for i := range samples {
		s := &samples[i]
		if s.At < from || s.At > to {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || last == first || last.At <= first.At {
		return -1
	}
	return float64(last.Iter-first.Iter) / (last.At - first.At)
}

// phases returns the mean rates before the first event, between events, and after the last.
func phases(res *result) []float64 {
	bounds := []float64{0}
	for _, e := range res.Events {
		bounds = append(bounds, e.At)
	}
	bounds = append(bounds, res.Total+1)
	var out []float64
	for i := 0; i+1 < len(bounds); i++ {
		out = append(out, phaseRate(res.Samples, bounds[i], bounds[i+1]))
	}
	return out
}

func fmtRate(v float64) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// svg draws the adaptive and the static run.
func (r *report) svg() string {
	colors := map[string]string{"adaptive": "#1f77b4", "static": "#d62728"}
	var ss []series
	xMax := 0.0
	for _, res := range r.results {
		c, ok := colors[res.Scenario.Name]
		if !ok {
			continue
		}
		ss = append(ss, series{
			Label: fmt.Sprintf("%s (--policy %s)", res.Scenario.Name, res.Scenario.Policy), Color: c,
			Points: rates(res.Samples, r.cfg.window), Migrations: res.Migrations, Events: res.Events,
		})
		xMax = max(xMax, res.Total)
	}
	title := fmt.Sprintf("heat2d -n %d, 4 ranks: n3,n4 join at iteration %d, load %.0f%% on n1,n2 at iteration %d",
		r.cfg.n, int(r.cfg.joinAt*float64(r.cfg.iters)), 100*r.cfg.load, int(r.cfg.loadAt*float64(r.cfg.iters)))
	return plotSVG(title, ss, xMax)
}

// command is the command line that produced the report.
func (r *report) command() string {
	cmd := "go run ./bench/experiment"
	for _, a := range r.cfg.args {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd += " " + a
	}
	return cmd
}

// summary is the short text printed at the end of a run.
func (r *report) summary() string {
	var b strings.Builder
	for _, res := range r.results {
		fmt.Fprintf(&b, "%-8s policy %-7s %6.1fs  %d/%d iterations  %d migrations", res.Scenario.Name, res.Scenario.Policy,
			res.Total, res.iterations(), res.Scenario.Iters, len(res.Migrations))
		if res.Err != "" {
			fmt.Fprintf(&b, "  error: %s", res.Err)
		}
		b.WriteString("\n")
	}
	if s := r.speedup(); s > 0 {
		fmt.Fprintf(&b, "speedup adaptive vs static: %.2f\n", s)
	}
	return b.String()
}

// markdown is docs/EXPERIMENTS.md; svgPath is the plot's path relative to the document.
func (r *report) markdown(svgPath string) string {
	cfg := r.cfg
	a, s, idle := r.find("adaptive"), r.find("static"), r.find("idle")
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# Experiments\n\n")
	p("Reproductions of the MPI/IOS experiments on the emulated cluster of `internal/testbed`. This\n")
	p("file and [%s](%s) are written by `bench/experiment`; rerun it rather than editing them.\n\n", svgPath, svgPath)
	p("## Adapting to joining nodes and rising load\n\n")
	p("**Date:** %s. **Command** (as root, from the module root):\n\n    %s\n\n", cfg.date, r.command())
	isolated := len(r.results) > 0 && r.results[0].Isolated
	p("heat2d (`-n %d -iters %d -residual-every %d`) starts as 4 ranks on nodes n1 and n2, 2 ranks\n", cfg.n, cfg.iters, cfg.residualEvery)
	p("each. Every node has a quota of %g CPUs and %d slots. When rank 0 reports iteration %d, nodes n3\n", cfg.cpus, cfg.slots, int(cfg.joinAt*float64(cfg.iters)))
	p("and n4 join; at iteration %d a competing CPU-bound process starts on n1 and n2 and takes %.0f%% of\n", int(cfg.loadAt*float64(cfg.iters)), 100*cfg.load)
	p("their CPU (the paper's method of loading a node). The job runs once with the IOS policy\n")
	p("`%s` (adaptive) and once with `%s` (static); a third run puts one rank on each of 4 idle,\n", cfg.adaptive, cfg.static)
	p("equal nodes with policy `%s` for %d iterations (`-n %d`), where nothing should move.\n\n", cfg.adaptive, cfg.idleIters, cfg.idleN)
	if !isolated {
		p("> **Not isolated:** this run could not use network namespaces and cgroups (not root, or no\n")
		p("> cgroup cpu controller), so all nodes shared 127.0.0.1 and the machine's CPUs without quotas,\n")
		p("> and the load generator ran unconstrained. The numbers below do not show the scenario.\n\n")
	}

	p("### Results\n\n")
	p("| run | IOS policy | total time (s) | speedup over static | migrations | migrations per rank per load change | it/s before join | it/s after join | it/s under load | checksum |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, res := range []*result{a, s} {
		if res == nil {
			continue
		}
		sp := "–"
		if v := r.speedup(); v > 0 {
			sp = fmt.Sprintf("%.2f", map[bool]float64{true: v, false: 1}[res == a])
		}
		ph := phases(res)
		for len(ph) < 3 {
			ph = append(ph, -1)
		}
		total := fmt.Sprintf("%.1f", res.Total)
		if !completed(res) {
			total += fmt.Sprintf(" (stopped at iteration %d: %s)", res.iterations(), oneLine(res.Err))
		}
		p("| %s | `%s` | %s | %s | %d | %.2f | %s | %s | %s | `%s` |\n", res.Scenario.Name, res.Scenario.Policy, total, sp,
			len(res.Migrations), perRankPerChange(res), fmtRate(ph[0]), fmtRate(ph[1]), fmtRate(ph[2]), res.Checksum)
	}
	p("\nLoad changes: the two events that change the cluster's resources (n3 and n4 join; the load\n")
	p("rises on n1 and n2), so migrations per rank per load change = migrations / (4 ranks × 2).\n")
	p("Iteration rates are rank 0's mean between the events, from its timestamped progress lines.\n")
	if a != nil && s != nil && a.Checksum != "" && s.Checksum != "" {
		if a.Checksum == s.Checksum && len(a.Migrations) > 0 {
			p("Both runs printed the same checksum: the migrations did not change the result.\n")
		} else if a.Checksum == s.Checksum {
			p("Both runs printed the same checksum.\n")
		} else {
			p("**The checksums differ**: the adaptive run computed a different result.\n")
		}
	}
	if idle != nil {
		p("\n| run | IOS policy | nodes | iterations | time (s) | migrations |\n| --- | --- | --- | ---: | ---: | ---: |\n")
		it := fmt.Sprintf("%d", idle.iterations())
		if !completed(idle) {
			it += " (" + oneLine(idle.Err) + ")"
		}
		p("| idle | `%s` | %s, %g CPUs each | %s | %.1f | %d |\n", idle.Scenario.Policy, idle.Scenario.Hosts, cfg.cpus, it, idle.Total, len(idle.Migrations))
	}

	p("\n### Targets (reported, not asserted)\n\n| target | measured | |\n| --- | --- | --- |\n")
	if sp := r.speedup(); sp > 0 {
		p("| adaptive finishes ≥ 1.8 × faster than static | %.2f × | %s |\n", sp, metOrNot(sp >= 1.8))
	} else {
		p("| adaptive finishes ≥ 1.8 × faster than static | a run did not complete | **not met** |\n")
	}
	if idle != nil {
		p("| no migration in %d iterations on 4 idle, equal nodes | %d | %s |\n", cfg.idleIters, len(idle.Migrations), metOrNot(completed(idle) && len(idle.Migrations) == 0))
	}
	if a != nil {
		v := perRankPerChange(a)
		p("| on average ≤ 1 migration per rank per load change (adaptive) | %.2f | %s |\n", v, metOrNot(v <= 1))
	}

	p("\n![iterations per second over time, adaptive and static](%s)\n\n", svgPath)
	p("Iterations per second of rank 0 (mean over the last %g s) over time since mpirun started. Dashed\n", cfg.window)
	p("lines: migrations; dotted lines: nodes join, load rises (in the run's color).\n\n")

	if a != nil {
		p("### Migrations of the adaptive run\n\n")
		if len(a.Migrations) == 0 {
			p("None reported.\n\n")
		} else {
			p("| time (s) | rank | from | to | iteration | pause | reason |\n| ---: | ---: | --- | --- | ---: | ---: | --- |\n")
			for _, m := range a.Migrations {
				it, pause := "–", "–"
				if m.Iteration >= 0 {
					it = fmt.Sprint(m.Iteration)
				}
				if m.Pause >= 0 {
					pause = fmt.Sprintf("%.0f ms", 1000*m.Pause)
				}
				p("| %.1f | %d | %s | %s | %s | %s | %s |\n", m.At, m.Rank, m.From, m.To, it, pause, strings.ReplaceAll(m.Reason, "|", "/"))
			}
			if a.Aborted > 0 {
				p("\n%d migrations were aborted (the rank stayed).\n", a.Aborted)
			}
			p("\n")
		}
	}

	for _, res := range []*result{a, idle} {
		if res == nil {
			continue
		}
		p("### IOS agents at the end of the %s run\n\n", res.Scenario.Name)
		if len(res.Agents) == 0 {
			p("No IOS agent answered on `%s`.\n\n", iosDiscoverSubject)
			continue
		}
		p("| node | policy | availability | effective CPUs | steals sent / accepted / failed | migrations ok / failed | last events |\n")
		p("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
		for _, ag := range res.Agents {
			st := ag.Stats
			p("| %s | `%s` | %.2f | %.2f | %d / %d / %d | %d / %d | %s |\n", ag.Node, ag.Policy, ag.Availability, ag.EffectiveCPUs,
				st["steals_sent"], st["steals_accepted"], st["steals_failed"], st["migrations_ok"], st["migrations_failed"],
				oneLine(strings.Join(ag.Events, "; ")))
		}
		p("\n")
	}

	p("### Reading\n\n")
	for _, note := range r.notes() {
		p("- %s\n", note)
	}

	p("\n### Setup\n\n")
	p("- Machine: %d CPUs, Linux %s, %s. Load average at the start %s, at the end %s\n", runtime.NumCPU(),
		strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")), runtime.Version(), orDash(r.loadStart), orDash(r.loadEnd))
	p("  (other jobs share the machine, so absolute numbers are noisy).\n")
	if isolated {
		cgv := 0
		if len(r.results) > 0 {
			cgv = r.results[0].CgroupVersion
		}
		p("- Testbed: every node has its own network namespace (`mpios-nK`, address 10.77.0.x on the\n")
		p("  bridge `mpios-br0`, NATS on 10.77.0.1) and cgroup (`mpios/nK`, cgroup v%d, quota %g CPUs per\n", cgv, cfg.cpus)
		p("  %v CFS period); pcmd and its ranks run in `mpios/nK/work`, the load generator in\n", cfg.period)
		p("  `mpios/nK/load`, the two splitting the quota %.0f%% : %.0f%% while the load is on.\n", 100*(1-cfg.load), 100*cfg.load)
	} else {
		p("- Testbed: loopback mode (127.0.0.1, no quotas).\n")
	}
	p("- Policy passed as: %s.\n", r.policyHow())
	if len(cfg.pcmdArgs) > 0 {
		p("- Extra arguments of every `pcmd serve`: `%s`.\n", strings.Join(cfg.pcmdArgs, " "))
	}
	p("- Duration of the whole experiment: %s.\n", r.end.Sub(r.start).Round(time.Second))

	p("\n### Running it\n\n")
	p("As root (network namespaces, veths, a bridge and cgroups; needs `ip` from iproute2 and the cgroup\n")
	p("v1 or v2 cpu controller), from the module root:\n\n")
	p("    go run ./bench/experiment                 # this report: about 5 minutes\n")
	p("    go run ./bench/experiment --quick         # smoke run: about a minute\n")
	p("    go run ./bench/experiment --doc - --svg /tmp/x.svg --data /tmp/x.json   # leave docs/ alone\n")
	p("    go run ./bench/experiment --render /tmp/x.json   # redo report and plot from saved data\n\n")
	p("`--help` lists the knobs (grid size, iterations, when nodes join and the load rises, the load's\n")
	p("share, node quotas, policies, extra `pcmd serve` arguments). mpirun's output and every node's\n")
	p("pcmd log (with its IOS agent's decisions) of the last run are kept in `--logs`\n")
	p("(default `$TMPDIR/mpios-experiment-logs`). Without root the testbed falls back to loopback and\n")
	p("the report says so. The emulated cluster itself is `internal/testbed` (`go doc ./internal/testbed`).\n")

	p("\n### What the experiment expects of mpirun and pcmd\n\n")
	p("%s\n", expectations)
	return b.String()
}

func (r *report) policyHow() string {
	var hows []string
	for _, res := range r.results {
		hows = append(hows, fmt.Sprintf("%s run: %s", res.Scenario.Name, res.PolicyHow))
	}
	return strings.Join(hows, "; ")
}

// notes interpret the results.
func (r *report) notes() []string {
	a, s, idle := r.find("adaptive"), r.find("static"), r.find("idle")
	var notes []string
	if !r.policyFlag {
		notes = append(notes, "This mpirun has no `--policy` flag; the runs set `MPIOS_POLICY` in mpirun's environment instead, which reaches the ranks (and so their profiles) only.")
	}
	if a != nil && len(a.Migrations) == 0 {
		notes = append(notes, "mpirun reported no migration in the adaptive run, so it ran like the static one: nothing moved the ranks off the loaded nodes. Either no IOS agent decided to move a rank (pcmd without an agent, or an agent that does not see the load: see the expectations below), or mpirun does not log migrations as `mpirun: migrated rank R from A to B ...`.")
	}
	if a != nil && len(a.Migrations) > 0 && len(a.Events) > 0 {
		loadAt := a.Events[len(a.Events)-1].At
		after := 0
		for _, m := range a.Migrations {
			if m.At >= loadAt {
				after++
			}
		}
		if after == 0 && a.Scenario.LoadAt > 0 {
			notes = append(notes, "Every migration of the adaptive run happened before the load rose; afterwards nothing moved the ranks left on the loaded nodes, although the nodes that had joined had the capacity. The agents' table shows why the targets did not steal (their availability, and the reasons of their declines).")
		}
	}
	if f := strings.Fields(r.loadStart); len(f) > 0 {
		var l1 float64
		if _, err := fmt.Sscan(f[0], &l1); err == nil && l1 > float64(runtime.NumCPU()) {
			notes = append(notes, fmt.Sprintf("Other jobs overloaded the machine during the experiment (load average %s at the start, %s at the end, on %d CPUs): nodes got less than their quota at times, and the rates are noisy.", r.loadStart, orDash(r.loadEnd), runtime.NumCPU()))
		}
	}
	if s != nil && len(s.Migrations) > 0 {
		notes = append(notes, fmt.Sprintf("The static run (policy `%s`) migrated %d times: a job with policy none should never move.", s.Scenario.Policy, len(s.Migrations)))
	}
	if a != nil && s != nil && completed(a) && completed(s) {
		pa, ps := phases(a), phases(s)
		if len(pa) == 3 && len(ps) == 3 && ps[2] > 0 && ps[0] > 0 {
			notes = append(notes, fmt.Sprintf("Under load the static run managed %.0f%% of its unloaded rate (%s vs %s it/s): the load generator really takes the CPU from the ranks.",
				100*ps[2]/ps[0], fmtRate(ps[2]), fmtRate(ps[0])))
		}
		if len(pa) == 3 && len(ps) == 3 && pa[2] > 0 && ps[2] > 0 {
			notes = append(notes, fmt.Sprintf("Under load the adaptive run went %.2f × as fast as the static one (%s vs %s it/s).", pa[2]/ps[2], fmtRate(pa[2]), fmtRate(ps[2])))
		}
	}
	if idle != nil && len(idle.Migrations) > 0 {
		notes = append(notes, fmt.Sprintf("On the idle, equal nodes %d migrations happened: the policy moves ranks without a gain to be had (noise from other jobs on the machine, or a missing stability threshold).", len(idle.Migrations)))
	}
	for _, res := range r.results {
		if res.Err != "" {
			notes = append(notes, fmt.Sprintf("The %s run failed: %s. The end of mpirun's output:\n\n  ```\n%s\n  ```", res.Scenario.Name, oneLine(res.Err), indent(lastLines(res.Log, 12), "  ")))
		}
	}
	if len(notes) == 0 {
		notes = append(notes, "Nothing unexpected.")
	}
	return notes
}

// expectations is what the experiment relies on; it is part of the report.
const expectations = `- **mpirun --policy NAME** (checked with ` + "`mpirun --help`" + `): sets the job's IOS policy
  (` + "`mpiios`" + `: migrate autonomously; ` + "`none`" + `: never migrate). Without the flag the tool sets
  ` + "`MPIOS_POLICY=NAME`" + ` in mpirun's environment, which mpirun passes to the ranks.
- **mpirun logs every completed migration** on stderr as
  ` + "`mpirun: migrated rank R from NODE to NODE at iteration I in PAUSE, SIZE of state (REASON)`" + `;
  only ` + "`migrated rank R from A to B`" + ` is required, ` + "`at iteration I`" + `, ` + "`in PAUSE`" + ` (a Go duration) and a
  trailing ` + "`(REASON)`" + ` are read when present. ` + "`migration of rank R to NODE aborted`" + ` counts as aborted.
- **heat2d keeps printing** ` + "`residual ITER VALUE`" + ` from rank 0 every ` + "`-residual-every`" + ` iterations,
  also after rank 0 itself migrated, and ` + "`checksum`" + ` at the end; mpirun forwards them to stdout as they
  come (their arrival times are the measurements).
- **Nodes that join a running job are used**: n3 and n4 register (pcmd heartbeats on NATS) while
  the job runs; the IOS agents must discover them (or be told by them) and may move ranks there. A
  migration needs a free slot on the target (every node has ` + "`--slots`" + `, default 2) and the
  program at the same path (the testbed's shared file system).
- **The IOS cooldown is shorter than the phases**: pcmd counts a migrated rank's cooldown
  (` + "`--ios-cooldown`" + `, default 1m) from its arrival (a fresh start may move at once), so with
  the default no rank could move twice during this experiment's phases of about 10 s. The tool passes
  ` + "`--ios-cooldown 3s`" + ` (its ` + "`--ios-cooldown`" + ` flag) when ` + "`pcmd serve --help`" + ` lists the option.
- **The agents see the emulated load through cgroups**: on a node, pcmd and its ranks run in
  ` + "`mpios/NODE/work`" + `, whose parent ` + "`mpios/NODE`" + ` carries the node's quota (v1
  ` + "`cpu.cfs_quota_us`" + `/` + "`cpu.cfs_period_us`" + `, v2 ` + "`cpu.max`" + `). While the load runs,
  ` + "`mpios/NODE/work`" + ` has its own quota of (1 − load) × the node's and the load generator
  uses the rest in ` + "`mpios/NODE/load`" + `. So an agent that takes the smallest quota of its own
  cgroup and its ancestors (from ` + "`/proc/self/cgroup`" + ` and ` + "`/sys/fs/cgroup`" + `, which the
  testbed leaves visible) and its own cgroup's usage sees the node's capacity drop from the quota to
  (1 − load) × quota, with the ranks using all of it. ` + "`/proc/stat`" + ` and ` + "`/proc/loadavg`" + ` are the
  whole machine's, shared by all nodes, and say nothing about one node.
- **Nodes are separate hosts**: each pcmd runs in its own network namespace and advertises its own
  address (10.77.0.x), so its ranks listen there; a migrated rank's successor listens on the target
  node's address, and mpirun (in the root namespace) reaches NATS at 10.77.0.1.
- **The static run never migrates** (policy none), and a failed or aborted migration leaves the job
  running and correct: the adaptive run must print the same checksum as the static one.`

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
