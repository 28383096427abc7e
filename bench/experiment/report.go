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

// adaptive returns the adaptive runs, one per policy, in the order they ran.
func (r *report) adaptive() []*result {
	var out []*result
	for _, res := range r.results {
		if res.Scenario.Name != "static" && res.Scenario.Name != "idle" {
			out = append(out, res)
		}
	}
	return out
}

// base is the scenario the report describes: the static run's, else the first run's.
func (r *report) base() scenario {
	if s := r.find("static"); s != nil {
		return s.Scenario
	}
	for _, res := range r.adaptive() {
		return res.Scenario
	}
	return scenario{}
}

// completed reports whether a run finished all its iterations without error.
func completed(res *result) bool {
	return res != nil && res.Err == "" && res.iterations() >= res.Scenario.Iters
}

// speedup is the static run's total time over res's, 0 if either did not complete.
func (r *report) speedup(res *result) float64 {
	s := r.find("static")
	if !completed(res) || !completed(s) || res.Total <= 0 {
		return 0
	}
	return s.Total / res.Total
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

// phases returns the mean rates before the first event, between events, and after the
// last, one per phase of the scenario (-1 for a phase the run did not reach).
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
	for len(out) < res.Scenario.loadChanges()+1 {
		out = append(out, -1)
	}
	return out
}

// joinRise is what the scenario's joins did to res's rate: the rates before and after
// each join, and whether each join raised it by at least 10% (noise aside).
func joinRise(res *result) (rates []float64, rose bool) {
	ph := phases(res)
	n := len(res.Scenario.Joins)
	if n == 0 || len(ph) < n+1 {
		return nil, false
	}
	rates, rose = ph[:n+1], true
	for i := 1; i <= n; i++ {
		if rates[i-1] <= 0 || rates[i] < 1.1*rates[i-1] {
			rose = false
		}
	}
	return rates, rose
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

// runColors are the plot's colors of the runs; adaptive policies not listed get extraColors.
var (
	runColors   = map[string]string{"static": "#d62728", "mpiios": "#1f77b4", "adaptive": "#1f77b4", "atsras": "#2ca02c", "flcras": "#9467bd"}
	extraColors = []string{"#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
)

// svg draws the adaptive runs and the static run.
func (r *report) svg() string {
	var ss []series
	xMax := 0.0
	extra := 0
	for _, res := range r.results {
		if res.Scenario.Name == "idle" {
			continue
		}
		c, ok := runColors[res.Scenario.Name]
		if !ok {
			c = extraColors[extra%len(extraColors)]
			extra++
		}
		label := fmt.Sprintf("--policy %s", res.Scenario.Policy)
		if res.Scenario.Name == "static" {
			label = fmt.Sprintf("static (--policy %s)", res.Scenario.Policy)
		}
		ss = append(ss, series{
			Label: label, Color: c,
			Points: rates(res.Samples, r.cfg.window), Migrations: res.Migrations, Events: res.Events,
		})
		xMax = max(xMax, res.Total)
	}
	sc := r.base()
	var ev []string
	for _, j := range sc.Joins {
		ev = append(ev, fmt.Sprintf("%s at iteration %d", j.label(), j.At))
	}
	if sc.loaded() {
		ev = append(ev, fmt.Sprintf("%s at iteration %d", sc.loadLabel(), sc.LoadAt))
	}
	title := fmt.Sprintf("heat2d -n %d, %d ranks: %s", sc.N, sc.ranks(), strings.Join(ev, ", "))
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
		fmt.Fprintf(&b, "%-8s policy %-7s %6.1fs  %d/%d iterations  %d migrations  it/s by phase", res.Scenario.Name, res.Scenario.Policy,
			res.Total, res.iterations(), res.Scenario.Iters, len(res.Migrations))
		for _, v := range phases(res) {
			b.WriteString(" " + fmtRate(v))
		}
		if res.Err != "" {
			fmt.Fprintf(&b, "  error: %s", res.Err)
		}
		b.WriteString("\n")
	}
	for _, a := range r.adaptive() {
		if s := r.speedup(a); s > 0 {
			fmt.Fprintf(&b, "speedup %s vs static: %.2f\n", a.Scenario.Policy, s)
		}
	}
	return b.String()
}

// markdown is docs/EXPERIMENTS.md; svgPath is the plot's path relative to the document.
func (r *report) markdown(svgPath string) string {
	cfg := r.cfg
	s, idle, ads := r.find("static"), r.find("idle"), r.adaptive()
	sc := r.base()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var pols []string
	for _, a := range ads {
		pols = append(pols, "`"+a.Scenario.Policy+"`")
	}

	p("# Experiments\n\n")
	p("Reproductions of the MPI/IOS experiments on the emulated cluster of `internal/testbed`. This\n")
	p("file and [%s](%s) are written by `bench/experiment`; rerun it rather than editing them.\n\n", svgPath, svgPath)
	p("## Adapting to joining nodes and rising load\n\n")
	p("**Date:** %s. **Command** (as root, from the module root):\n\n    %s\n\n", cfg.date, r.command())
	isolated := len(r.results) > 0 && r.results[0].Isolated
	perNode := sc.ranks() / max(1, len(sc.Nodes))
	p("heat2d (`-n %d -iters %d -residual-every %d`) starts as %d ranks on nodes n1 and n2, %d ranks\n", sc.N, sc.Iters, sc.ResidualEvery, sc.ranks(), perNode)
	p("each. Every node has a quota of %g CPUs and %d slots.\n", cfg.cpus, cfg.slots)
	var steps []string
	for _, j := range sc.Joins {
		steps = append(steps, fmt.Sprintf("at iteration %d %s", j.At, j.label()))
	}
	if sc.loaded() {
		steps = append(steps, fmt.Sprintf("at iteration %d a competing CPU-bound process starts on %s and takes %.0f%% of their CPU\n(the paper's method of loading a node)",
			sc.LoadAt, strings.Join(sc.LoadNodes, " and "), 100*sc.Load))
	}
	if len(steps) > 0 {
		p("As rank 0 reports its iterations, %s.\n", strings.Join(steps, ";\n"))
	}
	p("The job runs once with each adaptive IOS policy (%s) and once with `%s` (static)", strings.Join(pols, ", "), cfg.static)
	if idle != nil {
		p(";\na last run puts one rank on each of 4 idle, equal nodes with policy `%s` for %d iterations\n(`-n %d`), where nothing should move.\n\n", idle.Scenario.Policy, idle.Scenario.Iters, idle.Scenario.N)
	} else {
		p(" (the idle run was left out).\n\n")
	}
	if len(sc.Joins) > 1 {
		p("The nodes join one after the other, and %d ranks spread better over 3 nodes than over 2, so each\n", sc.ranks())
		p("join can raise the rate of a bulk-synchronous job (whose slowest node sets the pace).\n")
		p("Reports up to 2026-11-23 had 4 ranks (2 per node) and n3 and n4 joining together at iteration 900\n")
		p("(`--ranks-per-node 2 --join-at 0.3 --load-at 0.55` reproduces them): their \"it/s after join\" is the rate with both\n")
		p("new nodes; with 4 ranks a lone third node could not have raised it.\n\n")
	}
	if !isolated {
		p("> **Not isolated:** this run could not use network namespaces and cgroups (not root, or no\n")
		p("> cgroup cpu controller), so all nodes shared 127.0.0.1 and the machine's CPUs without quotas,\n")
		p("> and the load generator ran unconstrained. The numbers below do not show the scenario.\n\n")
	}

	p("### Results\n\n")
	labels := sc.eventLabels()
	p("| run | IOS policy | total time (s) | speedup over static | migrations | migrations per rank per load change | it/s at the start |")
	for _, l := range labels {
		p(" it/s after %s |", l)
	}
	p(" checksum |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |%s --- |\n", strings.Repeat(" ---: |", len(labels)))
	for _, res := range append(append([]*result(nil), ads...), s) {
		if res == nil {
			continue
		}
		sp := "–"
		if res == s && completed(s) {
			sp = "1.00"
		} else if v := r.speedup(res); v > 0 {
			sp = fmt.Sprintf("%.2f", v)
		}
		name := "adaptive"
		if res == s {
			name = "static"
		}
		total := fmt.Sprintf("%.1f", res.Total)
		if !completed(res) {
			total += fmt.Sprintf(" (stopped at iteration %d: %s)", res.iterations(), oneLine(res.Err))
		}
		p("| %s | `%s` | %s | %s | %d | %.2f |", name, res.Scenario.Policy, total, sp, len(res.Migrations), perRankPerChange(res))
		for _, v := range phases(res)[:len(labels)+1] {
			p(" %s |", fmtRate(v))
		}
		p(" `%s` |\n", res.Checksum)
	}
	p("\nLoad changes: the %d events that change the cluster's resources (%s),\n", len(labels), strings.Join(labels, "; "))
	p("so migrations per rank per load change = migrations / (%d ranks × %d).\n", sc.ranks(), max(1, len(labels)))
	p("Iteration rates are rank 0's mean between the events, from its timestamped progress lines.\n")
	if s != nil && s.Checksum != "" {
		same, moved := true, false
		for _, a := range ads {
			if a.Checksum != "" && a.Checksum != s.Checksum {
				same = false
				p("**The checksums differ**: the `%s` run computed a different result.\n", a.Scenario.Policy)
			}
			moved = moved || len(a.Migrations) > 0
		}
		switch {
		case same && moved:
			p("Every run printed the same checksum: the migrations did not change the result.\n")
		case same:
			p("Every run printed the same checksum.\n")
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
	for _, a := range ads {
		if sp := r.speedup(a); sp > 0 {
			p("| `%s` finishes ≥ 1.8 × faster than static | %.2f × | %s |\n", a.Scenario.Policy, sp, metOrNot(sp >= 1.8))
		} else {
			p("| `%s` finishes ≥ 1.8 × faster than static | a run did not complete | **not met** |\n", a.Scenario.Policy)
		}
	}
	if idle != nil {
		p("| no migration in %d iterations on 4 idle, equal nodes | %d | %s |\n", cfg.idleIters, len(idle.Migrations), metOrNot(completed(idle) && len(idle.Migrations) == 0))
	}
	for _, a := range ads {
		v := perRankPerChange(a)
		p("| on average ≤ 1 migration per rank per load change (`%s`) | %.2f | %s |\n", a.Scenario.Policy, v, metOrNot(v <= 1))
	}
	if len(sc.Joins) > 0 {
		for _, a := range ads {
			rates, rose := joinRise(a)
			var rs []string
			for _, v := range rates {
				rs = append(rs, fmtRate(v))
			}
			p("| throughput rises (≥ 10%%) at each join (`%s`) | %s it/s | %s |\n", a.Scenario.Policy, orDash(strings.Join(rs, " → ")), metOrNot(rose))
		}
	}

	p("\n![iterations per second over time, adaptive and static](%s)\n\n", svgPath)
	p("Iterations per second of rank 0 (mean over the last %g s) over time since mpirun started. Dashed\n", cfg.window)
	p("lines: migrations; dotted lines: nodes join, load rises (in the run's color).\n\n")

	for _, a := range ads {
		p("### Migrations of the `%s` run\n\n", a.Scenario.Policy)
		if len(a.Migrations) == 0 {
			p("None reported.\n\n")
			continue
		}
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

	for _, res := range append(append([]*result(nil), ads...), idle) {
		if res == nil {
			continue
		}
		which := fmt.Sprintf("`%s`", res.Scenario.Policy)
		if res == idle {
			which = "idle"
		}
		p("### IOS agents at the end of the %s run\n\n", which)
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
	p("    go run ./bench/experiment                 # this report: about 10 minutes\n")
	p("    go run ./bench/experiment --policies mpiios --skip-idle   # one adaptive run and the static one\n")
	p("    go run ./bench/experiment --quick         # smoke run: a few minutes\n")
	p("    go run ./bench/experiment --doc - --svg /tmp/x.svg --data /tmp/x.json   # leave docs/ alone\n")
	p("    go run ./bench/experiment --render /tmp/x.json   # redo report and plot from saved data\n\n")
	p("`--help` lists the knobs (grid size, iterations, ranks per node, when nodes join and the load\n")
	p("rises, the load's share, node quotas, policies, extra `pcmd serve` arguments). mpirun's output and\n")
	p("every node's pcmd log (with its IOS agent's decisions) of every run are kept in `--logs`\n")
	p("(default `$TMPDIR/mpios-experiment-logs`, files named after the run). Without root the testbed\n")
	p("falls back to loopback and the report says so. The emulated cluster itself is `internal/testbed`\n")
	p("(`go doc ./internal/testbed`).\n")

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

// machineBusy reports whether the 1-minute load average at the start (before the
// experiment's own processes ran) exceeded half the machine's CPUs: other work was running.
func (r *report) machineBusy() bool {
	var l1 float64
	f := strings.Fields(r.loadStart)
	if len(f) == 0 {
		return false
	}
	_, err := fmt.Sscan(f[0], &l1)
	return err == nil && l1 > float64(runtime.NumCPU())/2
}

// notes interpret the results.
func (r *report) notes() []string {
	s, idle := r.find("static"), r.find("idle")
	var notes []string
	if !r.policyFlag {
		notes = append(notes, "This mpirun has no `--policy` flag; the runs set `MPIOS_POLICY` in mpirun's environment instead, which reaches the ranks (and so their profiles) only.")
	}
	for _, a := range r.adaptive() {
		pol := a.Scenario.Policy
		if len(a.Migrations) == 0 {
			notes = append(notes, fmt.Sprintf("mpirun reported no migration in the `%s` run, so it ran like the static one: nothing moved the ranks off the loaded nodes. Either no IOS agent decided to move a rank (pcmd without an agent, or an agent that does not see the load: see the expectations below), or mpirun does not log migrations as `mpirun: migrated rank R from A to B ...`.", pol))
		}
		if len(a.Migrations) > 0 && len(a.Events) > 0 && a.Scenario.loaded() {
			loadAt := a.Events[len(a.Events)-1].At
			after := 0
			for _, m := range a.Migrations {
				if m.At >= loadAt {
					after++
				}
			}
			if after == 0 {
				notes = append(notes, fmt.Sprintf("Every migration of the `%s` run happened before the load rose; afterwards nothing moved the ranks left on the loaded nodes, although the nodes that had joined had the capacity. The agents' table shows why the targets did not steal (their availability, and the reasons of their declines).", pol))
			}
		}
	}
	if r.machineBusy() {
		notes = append(notes, fmt.Sprintf("Other work loaded the machine during the experiment (load average %s at the start, %s at the end, on %d CPUs, of which the 4 nodes' quotas take up to %g): nodes got less than their quota at times, and the rates are noisy.", r.loadStart, orDash(r.loadEnd), runtime.NumCPU(), 4*r.cfg.cpus))
	}
	if r.machineBusy() && len(r.base().Joins) > 0 {
		for _, a := range r.adaptive() {
			if _, rose := joinRise(a); !rose {
				notes = append(notes, fmt.Sprintf("A joining node adds only the CPU that other work leaves free (the 4 nodes' quotas of %g CPUs each add up to %g of the machine's %d CPUs): with the load average above, a join could not raise the rate as much as its quota would, and the rise at each join needs a quieter machine to show.", r.cfg.cpus, 4*r.cfg.cpus, runtime.NumCPU()))
				break
			}
		}
	}
	if s != nil && len(s.Migrations) > 0 {
		notes = append(notes, fmt.Sprintf("The static run (policy `%s`) migrated %d times: a job with policy none should never move.", s.Scenario.Policy, len(s.Migrations)))
	}
	if completed(s) {
		ps := phases(s)
		last := len(ps) - 1
		if s.Scenario.loaded() && ps[last] > 0 && ps[0] > 0 {
			notes = append(notes, fmt.Sprintf("Under load the static run managed %.0f%% of its starting rate (%s vs %s it/s): the load generator really takes the CPU from the ranks.",
				100*ps[last]/ps[0], fmtRate(ps[last]), fmtRate(ps[0])))
		}
		for _, a := range r.adaptive() {
			pa := phases(a)
			if completed(a) && s.Scenario.loaded() && len(pa) == len(ps) && pa[last] > 0 && ps[last] > 0 {
				notes = append(notes, fmt.Sprintf("Under load the `%s` run went %.2f × as fast as the static one (%s vs %s it/s).", a.Scenario.Policy, pa[last]/ps[last], fmtRate(pa[last]), fmtRate(ps[last])))
			}
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
