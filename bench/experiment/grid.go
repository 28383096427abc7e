package main

// The grid scenario (-scenario grid): two emulated clusters joined by a slow link.
//
// Nodes a1..aK form cluster "a", b1..bK cluster "b" (pcmd serve --cluster), every one with
// -cpus of CPU; testbed.SetLink delays every packet between the clusters by -grid-delay
// each way (netem, or the testbed's userspace delay router where the kernel has no netem),
// inside a cluster nothing is delayed. heat2d starts with -ranks-per-node ranks on each of
// the first two nodes of both clusters, so its halo exchanges cross the slow link; the last
// node of each cluster is idle, and steals. At -load-at × iters a competing process takes
// -load of every node of cluster a. The job runs once per policy of -grid-policies and once
// static (-static). Reported: the steal requests the agents sent inside their cluster and
// across (their counters), the migrations inside and across, and the total times.

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/testbed"
	"github.com/mpios/mpios/iosbridge"
)

// Markers of the grid scenario's section of the report. The rest of the file belongs to
// the other scenario; each run of a scenario replaces only its own part.
const (
	gridBegin = "<!-- bench/experiment -scenario grid: begin (generated, do not edit) -->"
	gridEnd   = "<!-- bench/experiment -scenario grid: end -->"
)

// gridClusters are the two clusters' names.
var gridClusters = []string{"a", "b"}

// gridScenarios returns the grid runs of cfg: one per policy, then the static one.
func gridScenarios(cfg *config) []scenario {
	var nodes []testbed.NodeSpec
	clusters := map[string]string{}
	var hosts, loadNodes []string
	for _, cl := range gridClusters {
		for i := 1; i <= cfg.gridNodes; i++ {
			name := fmt.Sprintf("%s%d", cl, i)
			nodes = append(nodes, testbed.NodeSpec{Name: name, CPUs: cfg.cpus})
			clusters[name] = cl
			if i <= 2 {
				hosts = append(hosts, fmt.Sprintf("%s:%d", name, cfg.ranksPerNode))
			}
			if cl == gridClusters[0] {
				loadNodes = append(loadNodes, name)
			}
		}
	}
	base := scenario{
		Nodes: nodes, Hosts: strings.Join(hosts, ","), Clusters: clusters, ClusterDelay: cfg.gridDelay,
		LoadNodes: loadNodes, LoadAt: max(1, int(cfg.loadAt*float64(cfg.iters))), Load: cfg.load,
		N: cfg.n, Iters: cfg.iters, ResidualEvery: cfg.residualEvery, SiteNATS: !cfg.gridOneNATS,
	}
	var out []scenario
	for _, p := range append(append([]string(nil), cfg.gridPolicies...), cfg.static) {
		sc := base
		// How a node looks for work (CRS's clusters, NRS's locales) is its own pcmd serve
		// --policy; the job's (mpirun --policy) decides which of its ranks go.
		sc.Name, sc.Policy, sc.NodePolicy = "grid-"+p, p, p
		if p == cfg.static {
			sc.Name, sc.NodePolicy = "grid-static", ""
		}
		out = append(out, sc)
	}
	return out
}

// nodeArgs gives every node of a cluster its pcmd serve --cluster, and the scenario's
// node policy.
func (s scenario) nodeArgs() map[string][]string {
	if len(s.Clusters) == 0 {
		return nil
	}
	out := map[string][]string{}
	for n, c := range s.Clusters {
		out[n] = []string{"--cluster", c}
		if s.NodePolicy != "" {
			out[n] = append(out[n], "--policy", s.NodePolicy)
		}
	}
	return out
}

// sites are the testbed's sites of a scenario with SiteNATS: its clusters.
func (s scenario) sites() map[string][]string {
	if !s.SiteNATS || len(s.Clusters) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, n := range s.Nodes {
		if c, ok := s.Clusters[n.Name]; ok {
			out[c] = append(out[c], n.Name)
		}
	}
	return out
}

// link delays the traffic between the scenario's clusters (nothing without clusters): the
// data between their nodes and, with SiteNATS, the routes between their NATS servers.
func (s scenario) link(c *testbed.Cluster) error {
	if len(s.Clusters) == 0 || s.ClusterDelay <= 0 {
		return nil
	}
	groups := map[string][]string{}
	for _, n := range s.Nodes {
		groups[s.Clusters[n.Name]] = append(groups[s.Clusters[n.Name]], n.Name)
	}
	if s.SiteNATS {
		for cl := range groups {
			groups[cl] = append(groups[cl], testbed.SiteServer(cl))
		}
	}
	if err := c.SetLink(groups[gridClusters[0]], groups[gridClusters[1]], testbed.Link{Delay: s.ClusterDelay}); err != nil {
		return fmt.Errorf("delaying the link between the clusters: %w", err)
	}
	return nil
}

// stealShare sums the agents' steal request counters of a run: inside a cluster, across,
// and CRS's wide-area steals.
func stealShare(res *result) (in, across, wide int64) {
	for _, a := range res.Agents {
		in += a.Stats["steal_requests_in_cluster"]
		across += a.Stats["steal_requests_across"]
		wide += a.Stats["wide_steals_sent"]
	}
	return in, across, wide
}

// locales is how the agents' measured round trips of a run classify their peers.
type locales struct {
	in, across             int // agent-peer pairs with a round trip, inside a cluster and across
	localIn, farAcross     int // of those, classed local inside and not local across
	pairs                  int
	medianIn, medianAcross time.Duration // of the base round trips NRS classifies
	// The medians of the smoothed round trips (with the agents' own delays).
	smoothIn, smoothAcross time.Duration
}

// localesOf classifies every agent's peers by NRS's locales (iosbridge.NRSLocale) and
// compares with the clusters.
func localesOf(res *result) locales {
	var lc locales
	var inside, across, sIn, sAcross []time.Duration
	for _, a := range res.Agents {
		mine, ok := res.Scenario.Clusters[a.Node]
		if !ok {
			continue
		}
		base := a.PeerBaseRTT
		if base == nil {
			base = a.PeerRTT // agents from before the base round trip: what they classified
		}
		for peer, rtt := range base {
			theirs, ok := res.Scenario.Clusters[peer]
			if !ok {
				continue
			}
			if s, ok := a.PeerRTT[peer]; ok {
				if theirs == mine {
					sIn = append(sIn, s)
				} else {
					sAcross = append(sAcross, s)
				}
			}
			local := iosbridge.NRSLocale(rtt) == iosbridge.LocaleLocal
			if theirs == mine {
				lc.in++
				inside = append(inside, rtt)
				if local {
					lc.localIn++
				}
			} else {
				lc.across++
				across = append(across, rtt)
				if !local {
					lc.farAcross++
				}
			}
		}
	}
	lc.pairs = lc.in + lc.across
	lc.medianIn, lc.medianAcross = median(inside), median(across)
	lc.smoothIn, lc.smoothAcross = median(sIn), median(sAcross)
	return lc
}

// median of ds (0 if empty).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// crossings counts a run's migrations that left their cluster.
func crossings(res *result) (inside, across int) {
	for _, m := range res.Migrations {
		if res.Scenario.Clusters[m.From] == res.Scenario.Clusters[m.To] {
			inside++
		} else {
			across++
		}
	}
	return inside, across
}

// gridMarkdown is the grid scenario's section of the report.
func (r *report) gridMarkdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cfg := r.cfg
	static := r.find("grid-static")
	var sc scenario
	if len(r.results) > 0 {
		sc = r.results[0].Scenario
	}
	p("%s\n## Two emulated clusters: where the steals go, and an overloaded cluster\n\n", gridBegin)
	p("**Date:** %s. **Command** (as root, from the module root):\n\n    %s\n\n", cfg.date, r.command())
	p("**Machine load average** (1, 5, 15 min) at the start: %s; at the end: %s. This is a\n", orDash(r.loadStart), orDash(r.loadEnd))
	p("measurement on a 2-core machine whose load includes the run's own processes (the nodes' ranks and\n")
	p("pcmds, the NATS servers, the competing load) and whatever else ran at the time; each policy runs\n")
	p("once, so times and rates are noisy; the steal counts and where the migrations went are the result.\n\n")
	p("Clusters a (%s) and b (%s), %d nodes each with a quota of %.2g CPUs and %d slots. ",
		strings.Join(r.clusterNodes(sc, "a"), ", "), strings.Join(r.clusterNodes(sc, "b"), ", "), cfg.gridNodes, cfg.cpus, cfg.slots)
	p("Every packet between the clusters is delayed by %v each way (`testbed.SetLink`; %s), ", sc.ClusterDelay, r.delayHow())
	p("inside a cluster nothing is delayed. Every pcmd runs with `--cluster a` or `--cluster b` and, in an adaptive run, `--policy` of that run ")
	p("(a node's own policy decides how it looks for work, the job's `mpirun --policy` which ranks go). ")
	p("heat2d (`-n %d -iters %d`) starts as %d ranks on `--hosts %s`, so its halo exchanges cross the slow link; ",
		sc.N, sc.Iters, sc.ranks(), sc.Hosts)
	p("the last node of each cluster starts idle. At iteration %d a competing CPU-bound process takes %.0f%% of the CPU of every node of cluster a (%s). ",
		sc.LoadAt, 100*sc.Load, strings.Join(sc.LoadNodes, ", "))
	p("Each policy runs once; the static run uses `%s`.\n\n", cfg.static)
	if sc.SiteNATS {
		p("Each cluster runs its own NATS server (`testbed.Options.Sites`: a namespace of its own on the bridge, no CPU quota), ")
		p("its nodes' pcmds connect to it, and the two servers are joined by an authenticated route that crosses the delayed link, as a grid whose sites each run their control plane. ")
		p("So the IOS agents' messages between the clusters, and the heartbeat echoes NRS times, take the link's round trip too; mpirun and the experiment use cluster a's server.\n\n")
	} else {
		p("The IOS agents' control messages go through the testbed's one NATS server on the bridge, which the link does not delay: ")
		p("only the ranks' data (TCP between the nodes) crosses the slow link. So the agents' measured round trips are all alike, ")
		p("and NRS's latency locales (which classify by the ping round trip between agents) cannot tell the clusters apart here; ")
		p("CRS knows them from `--cluster`.\n\n")
	}

	p("| run | IOS policy | total time (s) | speedup over static | it/s before load | it/s under load | steal requests inside a cluster | across | share inside | CRS wide-area steals | migrations inside a cluster | across | checksum |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, res := range r.results {
		in, across, wide := stealShare(res)
		share := "–"
		if in+across > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(in)/float64(in+across))
		}
		speed := "–"
		if static != nil && completed(res) && completed(static) && res.Total > 0 {
			speed = fmt.Sprintf("%.2f", static.Total/res.Total)
		}
		ph := phases(res)
		before, under := -1.0, -1.0
		if len(ph) >= 2 {
			before, under = ph[0], ph[1]
		}
		mi, ma := crossings(res)
		total := fmt.Sprintf("%.1f", res.Total)
		if !completed(res) {
			total += " (failed: " + oneLine(res.Err) + ")"
		}
		p("| %s | `%s` | %s | %s | %s | %s | %d | %d | %s | %d | %d | %d | `%s` |\n", res.Scenario.Name, res.Scenario.Policy, total, speed,
			fmtRate(before), fmtRate(under), in, across, share, wide, mi, ma, orDash(res.Checksum))
	}
	p("\nSteal requests are counted by the agent that sends them (its own, CRS's wide-area ones, and the ones it forwards), ")
	p("inside its cluster or across, from its `--cluster` and the target's profile (`steal_requests_in_cluster`, ")
	p("`steal_requests_across` in the IOS state). Random stealing picks among the %d other nodes, %d of them in the thief's cluster, ",
		2*cfg.gridNodes-1, cfg.gridNodes-1)
	p("so it keeps about %.0f%% of its requests inside a cluster by chance. Iteration rates are rank 0's mean before and after the load starts.\n\n",
		100*float64(cfg.gridNodes-1)/float64(2*cfg.gridNodes-1))

	p("**NRS's latency locales** as the agents measured them at the end of each run: every agent times the echo of its heartbeats to every peer; ")
	p("the smoothed round trip (`peer_rtt` in the IOS state, like TCP's SRTT) includes how long both agents took to handle the echo, ")
	p("so NRS classifies the base round trip, the least of the last 8 (`peer_base_rtt`), as local at 10 ms or less (seed 003). ")
	p("A pair agrees with the clusters when a peer in the agent's own cluster is local and one in the other cluster is not.\n\n")
	p("| run | median base round trip inside a cluster (ms) | across (ms) | median smoothed round trip inside (ms) | across (ms) | pairs in locale local inside | pairs not local across | pairs agreeing with the clusters |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, res := range r.results {
		lc := localesOf(res)
		if lc.pairs == 0 {
			p("| %s | – | – | – | – | – | – | no round trip measured |\n", res.Scenario.Name)
			continue
		}
		p("| %s | %.1f | %.1f | %.1f | %.1f | %d of %d | %d of %d | %d of %d (%.0f%%) |\n", res.Scenario.Name, ms(lc.medianIn), ms(lc.medianAcross),
			ms(lc.smoothIn), ms(lc.smoothAcross),
			lc.localIn, lc.in, lc.farAcross, lc.across, lc.localIn+lc.farAcross, lc.pairs, 100*float64(lc.localIn+lc.farAcross)/float64(lc.pairs))
	}
	p("\n")

	p("### Reading\n\n")
	for _, res := range r.results {
		if res.Scenario.Policy == cfg.static {
			continue
		}
		in, across, _ := stealShare(res)
		line := fmt.Sprintf("- `%s`: ", res.Scenario.Policy)
		if in+across > 0 {
			line += fmt.Sprintf("%.0f%% of %d steal requests stayed inside a cluster", 100*float64(in)/float64(in+across), in+across)
		} else {
			line += "no steal request counted"
		}
		if static != nil && completed(res) && completed(static) {
			verdict := "finished faster than static"
			if res.Total >= static.Total {
				verdict = "did not finish faster than static"
			}
			line += fmt.Sprintf("; %s (%.1f s against %.1f s)", verdict, res.Total, static.Total)
		}
		mi, ma := crossings(res)
		line += fmt.Sprintf("; migrations: %d inside a cluster, %d across", mi, ma)
		if lc := localesOf(res); lc.pairs > 0 && strings.HasPrefix(res.Scenario.Policy, iosbridge.PolicyNRS) {
			line += fmt.Sprintf("; its latency locales matched the clusters for %d of %d agent-peer pairs (base round trips %.1f ms inside, %.1f ms across)",
				lc.localIn+lc.farAcross, lc.pairs, ms(lc.medianIn), ms(lc.medianAcross))
		}
		line += ".\n"
		p("%s", line)
	}
	// A run that moved nothing is the static run again: how far its time is from the
	// static run's is what the machine's noise alone does.
	for _, res := range r.results {
		if res.Scenario.Policy == cfg.static || len(res.Migrations) > 0 || static == nil || !completed(res) || !completed(static) {
			continue
		}
		p("\nThe `%s` run moved no rank, yet its time differs from the static run's by %.0f%%: that is this machine's noise, ",
			res.Scenario.Policy, 100*math.Abs(res.Total/static.Total-1))
		p("and a difference of that order between any two runs here means nothing.\n")
	}
	p("\nmpirun's output and the node logs of each run are kept in `--logs` (`grid-POLICY`).\n%s\n", gridEnd)
	return b.String()
}

// clusterNodes lists the nodes of cluster cl in sc, in order.
func (r *report) clusterNodes(sc scenario, cl string) []string {
	var out []string
	for _, n := range sc.Nodes {
		if sc.Clusters[n.Name] == cl {
			out = append(out, n.Name)
		}
	}
	return out
}

// delayHow says how the link delay was made, from the runs' testbed messages.
func (r *report) delayHow() string {
	for _, res := range r.results {
		if strings.Contains(res.DelayHow, "router") {
			return "this kernel has no netem, so the testbed's userspace delay router holds the packets"
		}
	}
	return "netem"
}

// spliceSection replaces the part of doc between begin and end (markers included) by
// section, or appends section if doc has no such part.
func spliceSection(doc, begin, end, section string) string {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section
	}
	return doc[:i] + strings.TrimRight(section, "\n") + doc[j+len(end):]
}

// keepGridSection carries the grid section of the report at path, if any, into md, the
// other scenario's new report, with the text that follows the section there: notes written
// by hand on the grid runs would otherwise be lost with each rerun of the join scenario.
func keepGridSection(path, md string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return md
	}
	s := string(old)
	i, j := strings.Index(s, gridBegin), strings.Index(s, gridEnd)
	if i < 0 || j < i {
		return md
	}
	md = spliceSection(md, gridBegin, gridEnd, s[i:j+len(gridEnd)]+"\n")
	if tail := strings.TrimLeft(s[j+len(gridEnd):], "\n"); tail != "" {
		md = strings.TrimRight(md, "\n") + "\n\n" + tail
	}
	return md
}

// writeGrid writes the grid section into the report at cfg.doc (or stdout for "-").
func writeGrid(cfg *config, rep *report) error {
	sec := rep.gridMarkdown()
	if cfg.doc == "-" {
		_, err := os.Stdout.WriteString(sec)
		return err
	}
	old, err := os.ReadFile(cfg.doc)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(cfg.doc, []byte(spliceSection(string(old), gridBegin, gridEnd, sec)), 0o644)
}

// gridSummary is the short result printed at the end of a grid run.
func gridSummary(rep *report) string {
	var b strings.Builder
	for _, res := range rep.results {
		in, across, wide := stealShare(res)
		mi, ma := crossings(res)
		fmt.Fprintf(&b, "%-14s %-7s %7.1fs  steal requests inside %d, across %d, wide %d; migrations inside %d, across %d%s\n",
			res.Scenario.Name, res.Scenario.Policy, res.Total, in, across, wide, mi, ma,
			map[bool]string{true: "; error: " + res.Err, false: ""}[res.Err != ""])
	}
	return b.String()
}

// runGrid runs the grid scenario's runs and writes its section of the report.
func runGrid(ctx context.Context, cfg *config, rn *runner, logger *log.Logger) error {
	rep := &report{cfg: cfg, start: time.Now(), policyFlag: rn.bins.policyFlag, loadStart: loadAvg()}
	for _, sc := range gridScenarios(cfg) {
		res, err := rn.run(ctx, sc)
		if err != nil {
			return fmt.Errorf("%s run: %w", sc.Name, err)
		}
		rep.results = append(rep.results, res)
	}
	rep.end, rep.loadEnd = time.Now(), loadAvg()
	if err := saveData(cfg, rep); err != nil {
		return err
	}
	if err := writeGrid(cfg, rep); err != nil {
		return err
	}
	logger.Printf("wrote the grid section of %s", cfg.doc)
	fmt.Print(gridSummary(rep))
	return nil
}
