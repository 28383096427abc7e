package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The grid scenario writes only its own section: a new section is appended after the
// rest, a rerun replaces it in place, and a rerun of the join scenario keeps it.
func TestGridSectionReplacesOnlyItself(t *testing.T) {
	sec := func(body string) string { return gridBegin + "\n" + body + "\n" + gridEnd + "\n" }
	doc := "# Experiments\n\njoin scenario\n"
	doc = spliceSection(doc, gridBegin, gridEnd, sec("first"))
	if !strings.HasPrefix(doc, "# Experiments\n\njoin scenario\n\n"+gridBegin) || !strings.Contains(doc, "first") {
		t.Fatalf("appended:\n%s", doc)
	}
	doc = spliceSection(doc+"tail\n", gridBegin, gridEnd, sec("second"))
	if strings.Contains(doc, "first") || !strings.Contains(doc, "second") || !strings.HasSuffix(doc, "tail\n") {
		t.Fatalf("replaced:\n%s", doc)
	}
	path := filepath.Join(t.TempDir(), "EXPERIMENTS.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	md := keepGridSection(path, "# Experiments\n\nnew join results\n")
	if !strings.Contains(md, "new join results") || !strings.Contains(md, "second") || strings.Count(md, gridBegin) != 1 {
		t.Fatalf("the join scenario's report lost or doubled the grid section:\n%s", md)
	}
}

func TestGridScenariosPutRanksInBothClustersAndLoadOne(t *testing.T) {
	cfg, err := parseFlags([]string{"-scenario", "grid", "-grid-policies", "crs,rs"})
	if err != nil {
		t.Fatal(err)
	}
	scs := gridScenarios(cfg)
	if len(scs) != 3 || scs[0].Policy != "crs" || scs[1].Policy != "rs" || scs[2].Name != "grid-static" || scs[2].NodePolicy != "" {
		t.Fatalf("runs: %+v", scs)
	}
	sc := scs[0]
	if sc.Hosts != "a1:2,a2:2,b1:2,b2:2" || len(sc.Nodes) != 6 || strings.Join(sc.LoadNodes, ",") != "a1,a2,a3" {
		t.Fatalf("hosts %q, %d nodes, load on %v", sc.Hosts, len(sc.Nodes), sc.LoadNodes)
	}
	if a := sc.nodeArgs()["b3"]; strings.Join(a, " ") != "--cluster b --policy crs" {
		t.Fatalf("b3's pcmd arguments: %q", a)
	}
	res := &result{Scenario: sc, Migrations: []migration{{From: "a1", To: "a3"}, {From: "a2", To: "b3"}},
		Agents: []agentState{{Stats: map[string]int64{"steal_requests_in_cluster": 3, "steal_requests_across": 1, "wide_steals_sent": 1}},
			{Stats: map[string]int64{"steal_requests_in_cluster": 2}}}}
	if in, across, wide := stealShare(res); in != 5 || across != 1 || wide != 1 {
		t.Fatalf("steal share %d %d %d", in, across, wide)
	}
	if in, across := crossings(res); in != 1 || across != 1 {
		t.Fatalf("migrations inside %d, across %d", in, across)
	}
	if _, err := parseFlags([]string{"-scenario", "grid", "-grid-nodes", "2"}); err == nil {
		t.Error("2 nodes per cluster accepted")
	}
}
