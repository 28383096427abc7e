// Command iossim runs the simulations of docs/SIMULATIONS.md with package
// iosbridge/iossim — the deployed IOS agents (iosbridge.Node and its policies) on a
// simulated grid — and writes the report, its plots and a CSV of the samples into a
// directory (docs/ by default):
//
//	go run ./bench/iossim -date 2026-11-23
//	go run ./bench/iossim -sizes 100,1000   # a quicker scaling table
//	go run ./bench/iossim -only bustos      # only Bustos' ALOP section, spliced in
//	go run ./bench/iossim -only bustos -bustos 100 -bustos-until 40m
//	                                        # until settled, in a subsection of its own
//
// Every run is deterministic from -seed; only the wall times in the scaling table vary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/iosbridge/iossim"
)

type options struct {
	out, date string
	only      string
	sizes     []int
	bustos    []int
	// bustosUntil, if positive, makes -only bustos a settled run: up to this much virtual
	// time, ending once no migration has happened for bustosQuiet; its rows go to a
	// subsection of their own (bustosSettledBegin) and the 600 s section is left as it is.
	bustosUntil, bustosQuiet time.Duration
	seed                     uint64
	log                      io.Writer
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("iossim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{log: stderr}
	fs.StringVar(&o.out, "out", "docs", "directory for SIMULATIONS.md, the plots and iossim.csv")
	fs.StringVar(&o.date, "date", time.Now().UTC().Format("2006-01-02"), "date printed in the report")
	sizes := fs.String("sizes", "100,300,1000,3000,10000", "node counts of the scaling table")
	bustosSizes := fs.String("bustos", "10,20,50", "sides n of Bustos' n×n ALOP simulations")
	fs.DurationVar(&o.bustosUntil, "bustos-until", 0, "with -only bustos: run Bustos' simulations until no migration has happened for -bustos-quiet, at most this virtual time (e.g. 40m), and write them to a subsection of their own; 0: the standard 600 s section")
	fs.DurationVar(&o.bustosQuiet, "bustos-quiet", 5*time.Minute, "with -bustos-until: the virtual time without a migration after which a run counts as settled and ends")
	fs.StringVar(&o.only, "only", "", `"bustos": rerun only Bustos' section and replace it in the existing report; "ras": only Figs. 3.4–3.9 (the section, its plots and iossim.csv)`)
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 4 {
			return o, fmt.Errorf("iossim: -sizes: %q is not a node count of at least 4", f)
		}
		o.sizes = append(o.sizes, n)
	}
	for _, f := range strings.Split(*bustosSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 3 {
			return o, fmt.Errorf("iossim: -bustos: %q is not a side of at least 3", f)
		}
		o.bustos = append(o.bustos, n)
	}
	if o.bustosUntil < 0 || o.bustosQuiet <= 0 {
		return o, errors.New("iossim: -bustos-until must not be negative and -bustos-quiet must be positive")
	}
	if o.bustosUntil > 0 && o.only != "bustos" {
		return o, errors.New("iossim: -bustos-until writes a subsection of its own and needs -only bustos")
	}
	if o.only != "" && o.only != "bustos" && o.only != "ras" {
		return o, fmt.Errorf("iossim: -only %q: the sections that can be rerun alone are bustos and ras", o.only)
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		// The simulation allocates short-lived messages by the million; collecting less
		// often roughly halves the wall time of the 10,000-node run.
		debug.SetGCPercent(400)
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.only == "bustos" {
		rows, err := bustos(o)
		if err != nil {
			return err
		}
		if o.bustosUntil > 0 {
			return splice(o.out, bustosSettledBegin, bustosSettledEnd, "", "", bustosSettledMarkdown(rows, o))
		}
		return splice(o.out, bustosBegin, bustosEnd, "", "", bustosMarkdown(rows, o.date, o.seed, o.bustos))
	}
	var csv strings.Builder
	csv.WriteString("scenario,policy,start,t_s,throughput,migrations,messages\n")
	rep := &report{date: o.date, seed: o.seed, rasOnly: o.only == "ras"}
	files := map[string]string{}
	bench, err := benchmarks(o, &csv, rep)
	if err != nil {
		return err
	}
	for name, svg := range bench {
		files[name] = svg
	}
	svg, err := heat(o, &csv, rep)
	if err != nil {
		return err
	}
	files["iossim-heat.svg"] = svg
	files["iossim.csv"] = csv.String()
	if o.only == "ras" {
		if err := splice(o.out, rasBegin, rasEnd, "## Figs. 3.4–3.7", bustosBegin, rep.rasSection()); err != nil {
			return err
		}
		return writeFiles(o, files)
	}
	rows, err := bustos(o)
	if err != nil {
		return err
	}
	rep.bustos = bustosMarkdown(rows, o.date, o.seed, o.bustos) + keptSettled(o.out)
	svg, err = scale(o, rep)
	if err != nil {
		return err
	}
	files["iossim-scale.svg"] = svg
	files["SIMULATIONS.md"] = rep.markdown()
	return writeFiles(o, files)
}

func writeFiles(o options, files map[string]string) error {
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(o.out, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.log, "wrote %d files to %s\n", len(files), o.out)
	return nil
}

// outcome is one run in a table.
type outcome struct {
	Policy, Start string
	Throughput    float64
	Migrations    int
	Last          time.Duration
	Stable        bool
	// MostOnANode is the largest number of ranks any node ended with; RemoteEdges the share
	// of the topology's edges that ended between two nodes.
	MostOnANode int
	RemoteEdges float64
	// Rotations is how many three-way exchanges were carried out (relays sent their rank).
	Rotations uint64
}

func summarize(policy, start string, res iossim.Result) outcome {
	n := len(res.Samples)
	// Stable: no migration in the second half of the run.
	stable := n == 0 || res.Samples[n-1].Migrations == res.Samples[n/2].Migrations
	count := map[string]int{}
	most := 0
	for _, node := range res.Placement {
		count[node]++
		most = max(most, count[node])
	}
	return outcome{Policy: policy, Start: start, Throughput: res.Throughput(200 * time.Second),
		Migrations: res.Migrations, Last: res.LastMigration, Stable: stable, MostOnANode: most, RemoteEdges: res.RemoteEdges,
		Rotations: res.Rotations}
}

// csvEvery thins the CSV to a sample every 5 virtual seconds (and the last one): every
// sample of every run made a file of half a megabyte in the repository.
const csvEvery = 5 * time.Second

func record(csv *strings.Builder, scenario, policy, start string, res iossim.Result) []point {
	var pts []point
	for i, s := range res.Samples {
		if s.At%csvEvery == 0 || i == len(res.Samples)-1 {
			fmt.Fprintf(csv, "%s,%s,%s,%.0f,%.3f,%d,%d\n", scenario, policy, start, s.At.Seconds(), s.Throughput, s.Migrations, s.Messages)
		}
		pts = append(pts, point{s.At.Seconds(), s.Throughput})
	}
	return pts
}

func runChecked(cfg iossim.Config) (iossim.Result, error) {
	res, err := iossim.Run(cfg)
	if err == nil && res.StepErrors > 0 {
		err = fmt.Errorf("iossim: %d messages rejected, first: %w", res.StepErrors, res.FirstError)
	}
	return res, err
}

var benchPolicies = []string{"sras", "atsras", "flcras", "ars", "mpiios"}

// benchmarks runs Figs. 3.4–3.7: round robin, then every policy from a single node.
func benchmarks(o options, csv *strings.Builder, rep *report) (map[string]string, error) {
	svgs := map[string]string{}
	for _, top := range []iossim.Topology{iossim.Unconnected, iossim.Sparse, iossim.Tree, iossim.Hypercube} {
		var lines []line
		var rows []outcome
		type variant struct {
			pol, start string
			place      iossim.Placement
		}
		vs := []variant{{"none", "round robin", iossim.RoundRobin}}
		for _, pol := range benchPolicies {
			vs = append(vs, variant{pol, "one node", iossim.OnFirstNode})
		}
		// The IO paper's ARS runs start from round robin (seed 003 §4).
		vs = append(vs, variant{"ars", "round robin", iossim.RoundRobin})
		for _, v := range vs {
			pol, place, start := v.pol, v.place, v.start
			cfg, err := iossim.BenchmarkConfig(top, pol, place, o.seed)
			if err != nil {
				return nil, err
			}
			res, err := runChecked(cfg)
			if err != nil {
				return nil, err
			}
			rows = append(rows, summarize(pol, start, res))
			lines = append(lines, line{Label: pol + " (" + start + ")", Points: record(csv, string(top), pol, start, res)})
		}
		rep.bench = append(rep.bench, benchTable{Topology: top, Rows: rows})
		svgs["iossim-"+string(top)+".svg"] = chart(fmt.Sprintf("%s benchmark: 32 actors, 4 dual 0.8 GHz nodes", top), "virtual time (s)", "messages processed per second", lines, false)
	}
	return svgs, nil
}

// heat runs Figs. 3.8–3.9: the optimal placement, the two starts, and the policies.
func heat(o options, csv *strings.Builder, rep *report) (string, error) {
	var lines []line
	type variant struct {
		policy, start string
		place         iossim.Placement
		tuned         bool
	}
	vs := []variant{{"none", "optimal blocks", iossim.Blocks, false}}
	for _, st := range []struct {
		name  string
		place iossim.Placement
	}{{"one node", iossim.OnFirstNode}, {"random", iossim.Random(o.seed + 2)}} {
		vs = append(vs, variant{"none", st.name, st.place, false}, variant{"atsras", st.name, st.place, false},
			variant{"flcras", st.name, st.place, true}, variant{"flcras", st.name + ", default cutoffs", st.place, false},
			variant{"mpiios", st.name, st.place, false}, variant{"sras", st.name, st.place, false})
	}
	for _, v := range vs {
		cfg, err := iossim.HeatConfig(v.policy, v.place, o.seed)
		if err != nil {
			return "", err
		}
		if v.tuned {
			if cfg.Tuned, err = iossim.HeatFLCRAS(); err != nil {
				return "", err
			}
		}
		res, err := runChecked(cfg)
		if err != nil {
			return "", err
		}
		rep.heat = append(rep.heat, summarize(v.policy, v.start, res))
		pts := record(csv, "heat", v.policy, v.start, res)
		if !strings.Contains(v.start, "default") {
			lines = append(lines, line{Label: v.policy + " (" + v.start + ")", Points: pts})
		}
	}
	return chart("heat: 16 slices, 4 quad 1.7 GHz nodes (bulk-synchronous)", "virtual time (s)", "slice iterations per second", lines, false), nil
}

// scaleRow is one size of the scaling table.
type scaleRow struct {
	Nodes, Ranks                  int
	Wall, CPU                     time.Duration
	WideEdges, IdealWide          float64
	Migrations                    int
	PerRank                       float64
	Last, Converged               time.Duration
	MsgsPerNodeS, HeartbeatShare  float64
	StealsPerNodeS, ThroughputPct float64
}

func scale(o options, rep *report) (string, error) {
	var conv, msgs []point
	for _, n := range o.sizes {
		cfg := iossim.ScaleConfig(n, "mpiios", o.seed)
		began, cpu0 := time.Now(), cpuTime()
		res, err := runChecked(cfg)
		if err != nil {
			return "", err
		}
		wall, cpu := time.Since(began), cpuTime()-cpu0
		ideal := iossim.ScaleIdeal(n, o.seed)
		ideal.Duration = time.Millisecond // rates are computed at the first sample
		ref, err := runChecked(ideal)
		if err != nil {
			return "", err
		}
		row := scaleRow{Nodes: n, Ranks: len(cfg.Ranks), Wall: wall, CPU: cpu, WideEdges: res.WideEdges, IdealWide: ref.WideEdges, Migrations: res.Migrations,
			PerRank: float64(res.Migrations) / float64(len(cfg.Ranks)), Last: res.LastMigration,
			Converged: res.Converged(0.05), MsgsPerNodeS: res.MessagesPerNodeSecond()}
		if res.Messages > 0 {
			row.HeartbeatShare = float64(res.ByKind["heartbeat"]) / float64(res.Messages)
		}
		row.StealsPerNodeS = float64(res.ByKind["steal_request"]) / res.NodeSeconds
		if t := ref.Throughput(0); t > 0 {
			row.ThroughputPct = 100 * res.Throughput(250*time.Second) / t
		}
		rep.scale = append(rep.scale, row)
		conv = append(conv, point{float64(n), row.Converged.Seconds()})
		msgs = append(msgs, point{float64(n), row.MsgsPerNodeS})
		fmt.Fprintf(o.log, "%d nodes: %v wall, %v CPU, converged at %v, %.1f msgs/node/s\n", n, wall.Round(time.Second), cpu.Round(time.Second), row.Converged, row.MsgsPerNodeS)
	}
	return chart("scaling: a quarter of the nodes loaded 4×, policy mpiios", "nodes (log scale)", "seconds / messages per node per second",
		[]line{{Label: "convergence (s, within 5%)", Points: conv}, {Label: "messages per node per s", Points: msgs}}, true), nil
}

// cpuTime is the CPU this process used so far: the wall time of a run on a shared 2-core
// machine says more about the neighbours than about the simulator.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
