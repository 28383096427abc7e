package main

import (
	"encoding/xml"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
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
	cfg, err := parseFlags([]string{"--quick"})
	if err != nil {
		t.Fatal(err)
	}
	a, s, idle := scenarios(cfg)
	mk := func(sc scenario, total float64, migs []migration) *result {
		res := &result{Scenario: sc, Total: total, Isolated: true, CgroupVersion: 1, Checksum: "1.0e+00", Migrations: migs}
		for i := 1; i <= sc.Iters/sc.ResidualEvery; i++ {
			res.Samples = append(res.Samples, sample{At: total * float64(i) / float64(sc.Iters/sc.ResidualEvery), Iter: i * sc.ResidualEvery})
		}
		res.Events = []event{{At: total * 0.25, Label: "n3,n4 join", Iter: sc.JoinAt}, {At: total * 0.5, Label: "load 80% on n1,n2", Iter: sc.LoadAt}}
		return res
	}
	return &report{cfg: cfg, start: time.Unix(0, 0), end: time.Unix(90, 0), policyFlag: true, results: []*result{
		mk(a, 20, []migration{{At: 11, Rank: 0, From: "n1", To: "n3", Iteration: 1300, Pause: 0.2, Reason: "a <b> & c"}, {At: 12, Rank: 2, From: "n2", To: "n4", Iteration: -1, Pause: -1}}),
		mk(s, 50, nil),
		mk(idle, 5, nil),
	}}
}

func TestReport(t *testing.T) {
	r := fakeReport(t)
	if sp := r.speedup(); math.Abs(sp-2.5) > 1e-9 {
		t.Errorf("speedup %v, want 2.5", sp)
	}
	md := r.markdown("experiment.svg")
	for _, want := range []string{
		"**Date:** 2026-11-22", "go run ./bench/experiment --quick",
		"| adaptive | `mpiios` | 20.0 | 2.50 | 2 | 0.25 |",
		"| static | `none` | 50.0 | 1.00 | 0 | 0.00 |",
		"| adaptive finishes ≥ 1.8 × faster than static | 2.50 × | met |",
		"| no migration in 200 iterations on 4 idle, equal nodes | 0 | met |",
		"![iterations per second over time, adaptive and static](experiment.svg)",
		"| 11.0 | 0 | n1 | n3 | 1300 | 200 ms |",
		"What the experiment expects of mpirun and pcmd",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// The plot is well-formed XML with both runs and the migrations.
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
	if polylines != 2 || dashed != 2 {
		t.Errorf("SVG has %d polylines and %d migration lines, want 2 and 2", polylines, dashed)
	}
}

func TestReportWithoutAdaptation(t *testing.T) {
	r := fakeReport(t)
	r.results[0].Migrations = nil
	r.results[0].Total = 50
	r.results[1].Err = "mpirun: exit status 124"
	r.policyFlag = false
	md := r.markdown("experiment.svg")
	for _, want := range []string{"a run did not complete | **not met**", "no `--policy` flag", "reported no migration", "The static run failed"} {
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
	if cfg.n != 2048 || cfg.iters != 3000 || cfg.idleIters != 200 || cfg.date != "2026-11-22" {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, bad := range [][]string{{"--join-at", "0.7", "--load-at", "0.5"}, {"--load", "2"}, {"--slots", "1"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	a, _, idle := scenarios(cfg)
	if a.ranks() != 4 || a.loadChanges() != 2 || idle.ranks() != 4 || idle.loadChanges() != 0 {
		t.Errorf("scenarios: %+v %+v", a, idle)
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
