package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The grid scenario writes only its own section: a new section is appended after the
// rest, a rerun replaces it in place, and a rerun of the join scenario keeps it and the
// notes that follow it.
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
	if !strings.Contains(md, "new join results") || !strings.Contains(md, "second") || strings.Count(md, gridBegin) != 1 ||
		!strings.HasSuffix(md, gridEnd+"\n\ntail\n") {
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
	if st := sc.sites(); strings.Join(st["a"], ",") != "a1,a2,a3" || strings.Join(st["b"], ",") != "b1,b2,b3" {
		t.Fatalf("sites %v: want each cluster its own NATS server", st)
	}
	one, err := parseFlags([]string{"-scenario", "grid", "-grid-one-nats"})
	if err != nil {
		t.Fatal(err)
	}
	if st := gridScenarios(one)[0].sites(); st != nil {
		t.Fatalf("-grid-one-nats: sites %v", st)
	}
	if _, err := parseFlags([]string{"-scenario", "grid", "-grid-nodes", "2"}); err == nil {
		t.Error("2 nodes per cluster accepted")
	}
}

// NRS's locales against the clusters: a peer of the agent's own cluster agrees when it is
// local (round trip at most 10 ms), a peer of the other cluster when it is not.
func TestLocalesCompareRoundTripsWithClusters(t *testing.T) {
	ms := time.Millisecond
	res := &result{Scenario: scenario{Clusters: map[string]string{"a1": "a", "a2": "a", "b1": "b"}},
		Agents: []agentState{
			{Node: "a1", PeerRTT: map[string]time.Duration{"a2": 2 * ms, "b1": 31 * ms}},
			{Node: "a2", PeerRTT: map[string]time.Duration{"a1": 12 * ms, "b1": 33 * ms}},         // a1 measured while throttled
			{Node: "b1", PeerRTT: map[string]time.Duration{"a1": 30 * ms, "a2": 8 * ms, "x": ms}}, // x: no cluster
		}}
	lc := localesOf(res)
	if lc.in != 2 || lc.localIn != 1 || lc.across != 4 || lc.farAcross != 3 || lc.pairs != 6 {
		t.Fatalf("locales %+v", lc)
	}
	if lc.medianIn != 12*ms || lc.medianAcross != 31*ms {
		t.Fatalf("medians inside %v, across %v", lc.medianIn, lc.medianAcross)
	}
	// Agents that report base round trips are classified by those; the smoothed ones are
	// kept apart.
	res.Agents[1].PeerBaseRTT = map[string]time.Duration{"a1": 3 * ms, "b1": 31 * ms}
	lc = localesOf(res)
	if lc.localIn != 2 || lc.medianIn != 3*ms || lc.smoothIn != 12*ms {
		t.Fatalf("with base round trips: %+v", lc)
	}
}
