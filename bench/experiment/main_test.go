package main

import (
	"encoding/xml"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseMigration(t *testing.T) {
	for _, tc := range []struct {
		line string
		want migration
		ok   bool
	}{
		{"mpirun: migrated rank 1 from n1 to n3 at iteration 120 in 240ms, 8.4 MB of state (ios mpiios: node n3 steals, gain 0.4)",
			migration{Rank: 1, From: "n1", To: "n3", Iteration: 120, Pause: 0.24, Reason: "ios mpiios: node n3 steals, gain 0.4"}, true},
		{"mpirun: migrated rank 1 from n2 to n4 at iteration 1764 in 161ms, 2.0 MiB of state (ios mpiios: node n4 steals, gain 2.263: Σw·Δ=0.8582 × ln(L=17.02s)=2.834 − cost 0.1694s)",
			migration{Rank: 1, From: "n2", To: "n4", Iteration: 1764, Pause: 0.161, Reason: "ios mpiios: node n4 steals, gain 2.263: Σw·Δ=0.8582 × ln(L=17.02s)=2.834 − cost 0.1694s"}, true},
		{"mpirun: migrated rank 3 from n2 to n4 at iteration 7 in 1.5s, 2 KiB of state",
			migration{Rank: 3, From: "n2", To: "n4", Iteration: 7, Pause: 1.5}, true},
		{"mpirun: migrated rank 0 from n1 to n2", migration{Rank: 0, From: "n1", To: "n2", Iteration: -1, Pause: -1}, true},
		{"mpirun: migrated rank 2 from n1 to n2, 3 MiB of state", migration{Rank: 2, From: "n1", To: "n2", Iteration: -1, Pause: -1}, true},
		{"mpirun: migration of rank 1 to n3 aborted, it continues on n1: timeout", migration{}, false},
		{"residual 10 1.0e-01", migration{}, false},
	} {
		got, ok := parseMigration(tc.line)
		if ok != tc.ok || got.Rank != tc.want.Rank || got.From != tc.want.From || got.To != tc.want.To ||
			got.Iteration != tc.want.Iteration || math.Abs(got.Pause-tc.want.Pause) > 1e-9 || got.Reason != tc.want.Reason {
			t.Errorf("parseMigration(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
	if !abortedRE.MatchString("mpirun: migration of rank 1 to n3 aborted, it continues on n1: timeout") {
		t.Error("aborted migration not recognized")
	}
}

func TestParseResidual(t *testing.T) {
	if it, ok := parseResidual("residual 250 3.141593e-02"); !ok || it != 250 {
		t.Errorf("got %d, %v", it, ok)
	}
	for _, l := range []string{"residual x 1", "[0] residual 10 1", "checksum 1"} {
		if _, ok := parseResidual(l); ok {
			t.Errorf("parseResidual(%q) accepted", l)
		}
	}
}

func TestRates(t *testing.T) {
	// 100 iterations per second for 2 s, then 10 per second.
	var samples []sample
	for i := 1; i <= 20; i++ {
		samples = append(samples, sample{At: float64(i) * 0.1, Iter: 10 * i})
	}
	for i := 1; i <= 20; i++ {
		samples = append(samples, sample{At: 2 + float64(i), Iter: 200 + 10*i})
	}
	rs := rates(samples, 1)
	if len(rs) != len(samples) {
		t.Fatalf("%d rates for %d samples", len(rs), len(samples))
	}
	if r := rs[15].Rate; math.Abs(r-100) > 1e-6 {
		t.Errorf("rate at %.1fs = %v, want 100", rs[15].At, r)
	}
	if r := rs[len(rs)-1].Rate; math.Abs(r-10) > 1e-6 {
		t.Errorf("final rate %v, want 10", r)
	}
	if got := phaseRate(samples, 0, 2); math.Abs(got-100) > 1e-6 {
		t.Errorf("phase rate %v, want 100", got)
	}
	if got := phaseRate(samples, 100, 200); got != -1 {
		t.Errorf("phase rate without samples %v, want -1", got)
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ span, want float64 }{{35, 10}, {30, 5}, {500, 100}, {1, 0.2}, {0, 1}} {
		if got := niceStep(tc.span, 6); got != tc.want {
			t.Errorf("niceStep(%v) = %v, want %v", tc.span, got, tc.want)
		}
	}
}

func fakeReport(t *testing.T) *report {
	t.Helper()
	cfg, err := parseFlags([]string{"--quick", "--policies", "mpiios,atsras"})
	if err != nil {
		t.Fatal(err)
	}
	ads, s, idle := scenarios(cfg)
	// rates: iterations per second in each phase (start, n3 joins, n4 joins, load).
	mk := func(sc scenario, rates []float64, migs []migration) *result {
		res := &result{Scenario: sc, Isolated: true, CgroupVersion: 1, Checksum: "1.0e+00", Migrations: migs}
		bounds := []int{0, sc.Iters}
		if sc.loaded() {
			bounds = []int{0, sc.Joins[0].At, sc.Joins[1].At, sc.LoadAt, sc.Iters}
		}
		at := 0.0
		for ph := range len(bounds) - 1 {
			for it := bounds[ph] + sc.ResidualEvery; it <= bounds[ph+1]; it += sc.ResidualEvery {
				at += float64(sc.ResidualEvery) / rates[ph]
				res.Samples = append(res.Samples, sample{At: at, Iter: it})
			}
			if ph < len(bounds)-2 {
				res.Events = append(res.Events, event{At: at, Label: sc.eventLabels()[ph], Iter: bounds[ph+1]})
			}
		}
		res.Total = at
		return res
	}
	return &report{cfg: cfg, start: time.Unix(0, 0), end: time.Unix(90, 0), policyFlag: true, results: []*result{
		mk(ads[0], []float64{100, 150, 200, 100}, []migration{{At: 11, Rank: 0, From: "n1", To: "n3", Iteration: 1300, Pause: 0.2, Reason: "a <b> & c"}, {At: 12, Rank: 2, From: "n2", To: "n4", Iteration: -1, Pause: -1}}),
		mk(ads[1], []float64{100, 100, 200, 100}, []migration{{At: 13, Rank: 1, From: "n1", To: "n4", Iteration: 1000, Pause: 0.1}}),
		mk(s, []float64{100, 100, 100, 20}, nil),
		mk(idle, []float64{100, 100, 100, 100}, nil),
	}}
}

func TestReport(t *testing.T) {
	r := fakeReport(t)
	// quick: 2400 iterations, n3 at 480, n4 at 960, load at 1440.
	want := 480/100.0 + 480/100.0 + 480/100.0 + 960/20.0
	if got := r.find("static").Total; math.Abs(got-want) > 1e-6 {
		t.Fatalf("static total %v, want %v", got, want)
	}
	mp := 480/100.0 + 480/150.0 + 480/200.0 + 960/100.0
	if sp := r.speedup(r.find("mpiios")); math.Abs(sp-want/mp) > 1e-9 {
		t.Errorf("speedup %v, want %v", sp, want/mp)
	}
	md := r.markdown("experiment.svg")
	for _, want := range []string{
		"**Date:** 2026-11-22", "go run ./bench/experiment --quick --policies mpiios,atsras",
		"starts as 8 ranks on nodes n1 and n2, 4 ranks",
		"As rank 0 reports its iterations, at iteration 480 n3 joins;\nat iteration 960 n4 joins;\nat iteration 1440 a competing",
		"| it/s at the start | it/s after n3 joins | it/s after n4 joins | it/s after load 80% on n1,n2 | checksum |",
		"| adaptive | `mpiios` | 20.0 | 3.12 | 2 | 0.08 | 100 | 150 | 200 | 100 | `1.0e+00` |",
		"| adaptive | `atsras` | 21.6 | 2.89 | 1 | 0.04 | 100 | 100 | 200 | 100 |",
		"| static | `none` | 62.4 | 1.00 | 0 | 0.00 | 100 | 100 | 100 | 20 |",
		"| `mpiios` finishes ≥ 1.8 × faster than static | 3.12 × | met |",
		"| `atsras` finishes ≥ 1.8 × faster than static | 2.89 × | met |",
		"| no migration in 200 iterations on 4 idle, equal nodes | 0 | met |",
		"| throughput rises (≥ 10%) at each join (`mpiios`) | 100 → 150 → 200 it/s | met |",
		"| throughput rises (≥ 10%) at each join (`atsras`) | 100 → 100 → 200 it/s | **not met** |",
		"![iterations per second over time, adaptive and static](experiment.svg)",
		"### Migrations of the `mpiios` run", "### Migrations of the `atsras` run",
		"| 11.0 | 0 | n1 | n3 | 1300 | 200 ms |", "| 13.0 | 1 | n1 | n4 | 1000 | 100 ms |",
		"Under load the `atsras` run went 5.00 × as fast as the static one (100 vs 20 it/s).",
		"Every run printed the same checksum: the migrations did not change the result.",
		"What the experiment expects of mpirun and pcmd",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// The plot is well-formed XML with the three runs and the migrations.
	svg := r.svg()
	dec := xml.NewDecoder(strings.NewReader(svg))
	polylines, dashed := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed: %v\n%s", err, svg)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				polylines++
			case "line":
				for _, a := range se.Attr {
					if a.Name.Local == "stroke-dasharray" && a.Value == "6,4" {
						dashed++
					}
				}
			}
		}
	}
	if polylines != 3 || dashed != 3 {
		t.Errorf("SVG has %d polylines and %d migration lines, want 3 and 3", polylines, dashed)
	}
}

func TestReportWithoutAdaptation(t *testing.T) {
	r := fakeReport(t)
	r.results[1].Migrations = nil
	r.results[2].Err = "mpirun: exit status 124"
	r.policyFlag = false
	md := r.markdown("experiment.svg")
	for _, want := range []string{"`mpiios` finishes ≥ 1.8 × faster than static | a run did not complete | **not met**",
		"no `--policy` flag", "no migration in the `atsras` run", "The static run failed"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.n != 2048 || cfg.iters != 3000 || cfg.idleIters != 200 || cfg.date != "2026-11-22" || cfg.slots != 4 ||
		!slices.Equal(cfg.policies, []string{"mpiios", "atsras", "flcras"}) || !slices.Equal(cfg.joinAt, floatList{0.2, 0.45}) {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, bad := range [][]string{{"--join-at", "0.7", "--load-at", "0.5"}, {"--join-at", "0.4,0.3"}, {"--join-at", "0.1,0.2,0.3"},
		{"--join-at", "x"}, {"--load", "2"}, {"--slots", "3"}, {"--ranks-per-node", "0"}, {"--policies", "mpiios,atsras,mpiios"},
		{"--policies", ","}, {"--policies", "static"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	ads, s, idle := scenarios(cfg)
	if len(ads) != 3 || ads[1].Name != "atsras" || ads[1].Policy != "atsras" || s.Policy != "none" || idle.Policy != "mpiios" {
		t.Errorf("scenarios: %+v %+v %+v", ads, s, idle)
	}
	if a := ads[0]; a.ranks() != 8 || a.loadChanges() != 3 || idle.ranks() != 4 || idle.loadChanges() != 0 ||
		a.Joins[0].At != 600 || a.Joins[0].label() != "n3 joins" || a.Joins[1].At != 1350 || a.Joins[1].label() != "n4 joins" || a.LoadAt != 2100 {
		t.Errorf("scenarios: %+v %+v", a, idle)
	}
	// The command line of the reports up to 2026-11-23: 4 ranks, n3 and n4 join together.
	old, err := parseFlags([]string{"--ranks-per-node", "2", "--join-at", "0.3", "--load-at", "0.55", "--adaptive", "atsras"})
	if err != nil {
		t.Fatal(err)
	}
	ads, _, idle = scenarios(old)
	if len(ads) != 1 || ads[0].Policy != "atsras" || idle.Policy != "atsras" || old.slots != 2 || ads[0].ranks() != 4 ||
		len(ads[0].Joins) != 1 || ads[0].Joins[0].At != 900 || ads[0].Joins[0].label() != "n3,n4 join" || ads[0].loadChanges() != 2 {
		t.Errorf("old command line: %+v %+v", old, ads)
	}
}

func TestRender(t *testing.T) {
	r := fakeReport(t)
	dir := t.TempDir()
	cfg := *r.cfg
	cfg.doc, cfg.svg, cfg.data = filepath.Join(dir, "E.md"), filepath.Join(dir, "e.svg"), filepath.Join(dir, "d.json")
	r.cfg = &cfg
	logger := log.New(io.Discard, "", 0)
	if err := writeOutputs(&cfg, r, logger); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(cfg.doc)
	if err != nil {
		t.Fatal(err)
	}
	again := cfg
	again.render, again.data = cfg.data, ""
	again.doc, again.svg = filepath.Join(dir, "E2.md"), filepath.Join(dir, "e.svg")
	if err := render(&again, logger); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(again.doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) {
		t.Errorf("rendered report differs from the original:\n%s\n----\n%s", first, second)
	}
}

// A data file written before staggered joins (one "join" at "join_at") renders with that join.
func TestRenderOldData(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "old.json")
	old := `{"args": ["-date", "2026-11-23"], "results": [{"scenario": {"name": "adaptive", "policy": "mpiios",
		"nodes": [{"Name": "n1", "CPUs": 0.5}, {"Name": "n2", "CPUs": 0.5}], "hosts": "n1:2,n2:2",
		"join": [{"Name": "n3", "CPUs": 0.5}, {"Name": "n4", "CPUs": 0.5}], "join_at": 900,
		"load_nodes": ["n1", "n2"], "load_at": 1650, "load": 0.8, "n": 2048, "iters": 3000, "residual_every": 10},
		"total": 52.2, "samples": [{"at": 1, "iter": 10}, {"at": 2, "iter": 100}], "events": []}]}`
	if err := os.WriteFile(data, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--render", data, "--doc", filepath.Join(dir, "E.md"), "--svg", filepath.Join(dir, "e.svg")})
	if err != nil {
		t.Fatal(err)
	}
	if err := render(cfg, log.New(io.Discard, "", 0)); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "E.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"starts as 4 ranks on nodes n1 and n2, 2 ranks", "at iteration 900 n3,n4 join;\nat iteration 1650",
		"| it/s at the start | it/s after n3,n4 join | it/s after load 80% on n1,n2 |", "| adaptive | `mpiios` | 52.2 (stopped at iteration 100"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
