package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/iosbridge/iossim"
)

func TestParseRejectsBadSizes(t *testing.T) {
	for _, bad := range []string{"x", "2", "100,,300"} {
		if _, err := parse([]string{"-sizes", bad}, io.Discard); err == nil {
			t.Errorf("-sizes %q accepted", bad)
		}
	}
	o, err := parse([]string{"-sizes", "8, 16", "-seed", "3"}, io.Discard)
	if err != nil || len(o.sizes) != 2 || o.sizes[1] != 16 || o.seed != 3 {
		t.Fatalf("%+v %v", o, err)
	}
}

func TestRunWritesReportPlotsAndCSV(t *testing.T) {
	dir := t.TempDir()
	if err := run(options{out: dir, date: "2026-01-01", sizes: []int{8}, bustos: []int{4}, seed: 1, log: io.Discard}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "SIMULATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### hypercube", "| `sras` | one node |", "| 8 | 16 |", "optimal blocks", "| 4×4 | `rhns` |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, f := range []string{"iossim-unconnected.svg", "iossim-heat.svg", "iossim-scale.svg", "iossim.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) < 100 {
			t.Errorf("%s: %d bytes, %v", f, len(b), err)
		}
	}
}

func TestOnlyBustosReplacesItsSection(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "SIMULATIONS.md")
	if err := os.WriteFile(p, []byte("# Simulations\n\nbefore\n\n## Scale: 100 to 10,000 nodes\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md := runTwice(t, p, "-out", dir, "-only", "bustos", "-bustos", "3,4")
	if strings.Count(md, bustosBegin) != 1 || strings.Count(md, bustosEnd) != 1 || !strings.Contains(md, "| 3×3 | `sheriff` |") ||
		strings.Index(md, "before") > strings.Index(md, bustosBegin) || strings.Index(md, "## Scale") < strings.Index(md, bustosEnd) ||
		!strings.HasSuffix(md, "after\n") {
		t.Fatalf("report:\n%s", md)
	}
	if _, err := parse([]string{"-only", "heat"}, io.Discard); err == nil {
		t.Error("-only heat accepted")
	}
}

func TestOnlyRASReplacesFigs34To39AndKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "SIMULATIONS.md")
	// A report from before the markers: the old section runs from its heading to Bustos'.
	old := "# Simulations\n\nmodel\n\n## Figs. 3.4–3.7: old\n\nold table\n\n" + bustosBegin + "\nbustos\n" + bustosEnd + "\n\n## Scale: x\n\nafter\n"
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parse([]string{"-out", dir, "-only", "ras", "-date", "2026-01-02"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.log = io.Discard
	for range 2 { // the second run replaces the first's section, between the markers
		if err := run(o); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if strings.Contains(md, "old table") || strings.Count(md, rasBegin) != 1 || strings.Count(md, rasEnd) != 1 ||
		!strings.Contains(md, "| `ars` | round robin |") || !strings.Contains(md, "`go run ./bench/iossim -only ras`") ||
		!strings.HasPrefix(md, "# Simulations\n\nmodel\n\n"+rasBegin) || !strings.Contains(md, rasEnd+"\n"+bustosBegin+"\nbustos\n") ||
		!strings.HasSuffix(md, "after\n") {
		t.Fatalf("report:\n%s", md)
	}
	for _, f := range []string{"iossim-heat.svg", "iossim-tree.svg", "iossim.csv"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "iossim-scale.svg")); err == nil {
		t.Error("-only ras wrote the scaling plot")
	}
}

func TestBustosSectionSaysWhenRHNSHadNotSettled(t *testing.T) {
	rows := []bustosRow{{Policy: "rhns", BustosResult: iossim.BustosResult{Nodes: 100, OPT: 9, Used: 35, ALOP: 3.89, MigrationsPerObject: 5.9, MaxMigrations: 10}}}
	md := bustosMarkdown(rows, "2026-01-01", 1, []int{100})
	for _, want := range []string{"**3.89**", "**RHNS misses a target**", "At 100×100 RHNS ends on 35 nodes for OPT 9, but not settled", "last 60 s of the 600 s"} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "were not run") {
		t.Errorf("100×100 was run:\n%s", md)
	}
}

// -bustos-until writes the settled runs into a subsection of their own, after Bustos'
// section, which it leaves as it was; -only bustos and a full run keep the subsection.
func TestBustosUntilWritesASettledSubsectionAndKeepsTheSection(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "SIMULATIONS.md")
	old := "# Simulations\n\n" + bustosBegin + "\nthe 600 s rows\n" + bustosEnd + "\n\n## Scale: x\n\nafter\n"
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	md := runTwice(t, p, "-out", dir, "-only", "bustos", "-bustos", "4", "-bustos-until", "20m", "-bustos-quiet", "2m")
	if !strings.HasPrefix(md, "# Simulations\n\n"+bustosBegin+"\nthe 600 s rows\n"+bustosEnd+"\n\n"+bustosSettledBegin) ||
		strings.Count(md, bustosSettledBegin) != 1 || strings.Count(md, bustosSettledEnd) != 1 ||
		!strings.Contains(md, "| 4×4 | `rhns` |") || !strings.Contains(md, "-bustos 4 -bustos-until 20m0s -bustos-quiet 2m0s`") ||
		!strings.HasSuffix(md, bustosSettledEnd+"\n\n## Scale: x\n\nafter\n") {
		t.Fatalf("report:\n%s", md)
	}
	settled := md[strings.Index(md, bustosSettledBegin) : strings.Index(md, bustosSettledEnd)+len(bustosSettledEnd)]
	o, err := parse([]string{"-out", dir, "-only", "bustos", "-bustos", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.log = io.Discard
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || !strings.Contains(string(b), "| 3×3 | `rhns` |") || !strings.Contains(string(b), bustosEnd+"\n\n"+settled) {
		t.Fatalf("-only bustos lost the settled subsection (%v):\n%s", err, b)
	}
	if got := keptSettled(dir); got != "\n"+settled+"\n" {
		t.Errorf("a full run would keep %q", got)
	}
	for _, bad := range [][]string{{"-bustos-until", "1h"}, {"-only", "bustos", "-bustos-until", "-1s"}, {"-only", "bustos", "-bustos-quiet", "0s"}} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBustosSettledSubsectionMarksARunStoppedByTheCap(t *testing.T) {
	o := options{date: "2026-01-01", seed: 1, bustos: []int{100}, bustosUntil: 40 * time.Minute, bustosQuiet: 5 * time.Minute}
	rows := []bustosRow{{Policy: "rhns", BustosResult: iossim.BustosResult{Nodes: 100, OPT: 9, Used: 20, ALOP: 2.22, MigrationsPerObject: 7,
		MaxMigrations: 30, End: 40 * time.Minute, LastMigration: 39 * time.Minute}}}
	md := bustosSettledMarkdown(rows, o)
	for _, want := range []string{"| 100×100 | `rhns` | 9 | 20 | **2.22** | **7.00** | 30 | 0 | 2340 s | 2400 s | **no** (cap) |", "at most 40m0s"} {
		if !strings.Contains(md, want) {
			t.Errorf("subsection lacks %q:\n%s", want, md)
		}
	}
}

// runTwice runs the tool twice with args (the second run must replace what the first wrote)
// and returns the document at p afterwards.
func runTwice(t *testing.T, p string, args ...string) string {
	t.Helper()
	o, err := parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.log = io.Discard
	for range 2 {
		if err := run(o); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
