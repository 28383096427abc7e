package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := run(options{out: dir, date: "2026-01-01", sizes: []int{8}, seed: 1, log: io.Discard}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "SIMULATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### hypercube", "| `sras` | one node |", "| 8 | 16 |", "optimal blocks"} {
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
