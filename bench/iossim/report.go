package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/mpios/mpios/iosbridge/iossim"
)

type benchTable struct {
	Topology iossim.Topology
	Rows     []outcome
}

type report struct {
	date  string
	seed  uint64
	bench []benchTable
	heat  []outcome
	scale []scaleRow
	// bustos is the Bustos section, markers included (bustosMarkdown).
	bustos string
	// rasOnly: the Figs. 3.4–3.9 section is spliced alone (-only ras) and says so.
	rasOnly bool
}

// The markers around Figs. 3.4–3.9, which -only ras replaces.
const (
	rasBegin = "<!-- ras: written by go run ./bench/iossim -only ras -->"
	rasEnd   = "<!-- ras end -->"
)

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func last(d time.Duration) string {
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`# Simulations

The IOS agents of mpios — `+"`iosbridge.Node`"+` with its stability guard and policies, the code
pcmd runs — on a simulated grid (package `+"`iosbridge/iossim`"+`). This file, its plots and
[iossim.csv](iossim.csv) (every run, a sample every 5 s) are written by `+"`bench/iossim`"+`; rerun it
rather than editing them.

**Date:** %s. **Command** (from the module root; seed %d, every run is deterministic):

    go run ./bench/iossim -date %s

## The model

Nodes have a capacity in cores, a clock speed and a background load; ranks (the thesis's
actors) compute a fixed amount of work per iteration and send one message to each of their
neighbours in the application topology per iteration. A rank's iteration takes its work over
(speed × its fair share of the node's cores) plus, per neighbour, nothing on the same node or
latency + size / bandwidth over the link (one figure inside a cluster, one between clusters).
The agents are fed what pcmd's profiler would measure: a node's availability is what its
background and its ranks' *busy* time (their share while computing, not while waiting for
messages) leave; ranks report CPU use, iteration time, messages processed and sent per peer,
computation per message. Agents tick every 500 ms, profiles are sampled every second,
protocol messages arrive after the link's latency, and a migration takes latency + state /
bandwidth, during which the rank does nothing. ATS-RAS's agents time their heartbeats'
echoes (pcmd's always do) and price the messages a move makes cross with that round trip
and the link's bandwidth, which the node a migration lands on measures from its state
(state / the transfer's time, as pcmd measures buddy copies) and tells the giver in its
heartbeats; MPI-IOS prices migrations with it. Until a link carried a migration, MPI-IOS's
default 12.5 MB/s stands in, which is also the LAN of Figs. 3.4–3.9. Every node joins through three random earlier
nodes (a peer-server overlay, not pcmd's full heartbeat table). What the model leaves out:
profiling and decision overhead (the thesis's explanation of the gaps between S-RAS, ATS-RAS
and round robin), the CPU a waiting rank would leave to the others, and jitter.

`, r.date, r.seed, r.date)

	b.WriteString(r.rasSection())
	b.WriteString(r.bustos)
	if r.bustos != "" {
		w("\n")
	}
	w("## Scale: 100 to 10,000 nodes\n\n")
	w("n nodes of 2 cores in clusters of 100 (100 µs, 1 GB/s inside; 20 ms, 10 MB/s between), 2n ranks in jobs of 8 (a chain, 100 ms per iteration, 4 KB halos, 8 MB of state), all started on the first quarter of the nodes (4 ranks per core there, three quarters of the grid idle), policy `mpiios`, 300 virtual seconds. Converged: the first time from which throughput stays within 5%% of its final value, in seconds and in rounds (sampling periods of 1 s). Throughput is relative to a static balanced placement (2 ranks per node, each job on 4 neighbouring nodes). Wall time is this 2-core machine, shared with other work while measured.\n\n")
	w("| nodes | ranks | wall time | CPU time | migrations | per rank | last migration | converged | rounds | messages / node / s | of which heartbeats | steal requests / node / s | throughput of balanced | halos across clusters (balanced) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.scale {
		w("| %d | %d | %.0f s | %.0f s | %d | %.2f | %s | %s | %.0f | %.1f | %.0f%% | %.2f | %.0f%% | %.0f%% (%.0f%%) |\n", s.Nodes, s.Ranks, s.Wall.Seconds(), s.CPU.Seconds(), s.Migrations, s.PerRank,
			last(s.Last), last(s.Converged), s.Converged.Seconds(), s.MsgsPerNodeS, 100*s.HeartbeatShare, s.StealsPerNodeS, s.ThroughputPct, 100*s.WideEdges, 100*s.IdealWide)
	}
	w("\n![scale](iossim-scale.svg)\n\n")
	b.WriteString(r.scaleVerdict())
	return b.String()
}

// rasSection is Figs. 3.4–3.9, markers included.
func (r *report) rasSection() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## Figs. 3.4–3.7: the benchmarks against round robin\n\n", rasBegin)
	if r.rasOnly {
		w("**Date:** %s, seed %d: `go run ./bench/iossim -only ras` (this section, its plots and iossim.csv).\n\n", r.date, r.seed)
	}
	w("32 actors on the thesis's Solaris cluster (4 nodes × 2 cores at 0.8 GHz, 1 ms + 100 Mbit/s LAN); each actor computes 20 ms (at 1 GHz) and sends 32 KB to each neighbour per iteration. Round robin is static (`none`); every policy starts with all actors on one node, as in the thesis, and ARS also from round robin, as in the IO paper (seed 003 §4). Throughput is the mean from 200 s to 300 s; stable means no migration in the second half.\n\n")
	for _, t := range r.bench {
		rr := t.Rows[0].Throughput
		w("### %s ([plot](iossim-%s.svg))\n\n| policy | start | msg/s | of round robin | migrations | last migration | stable | most actors on a node | edges between nodes |\n| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n", t.Topology, t.Topology)
		for _, o := range t.Rows {
			w("| `%s` | %s | %.1f | %.1f%% | %d | %s | %s | %d | %.0f%% |\n", o.Policy, o.Start, o.Throughput, 100*o.Throughput/rr, o.Migrations, last(o.Last), yes(o.Stable), o.MostOnANode, 100*o.RemoteEdges)
		}
		w("\n")
	}
	w("![unconnected](iossim-unconnected.svg)\n\n")
	b.WriteString(r.benchVerdict())

	w("## Figs. 3.8–3.9: heat against the optimal placement\n\n")
	w("The heat application as 16 bulk-synchronous slices (each talks to its two neighbours, 64 KB halos, 50 ms per iteration at 1 GHz) on the thesis's AIX cluster (4 nodes × 4 cores at 1.7 GHz). Optimal is one contiguous block of 4 slices per node. `flcras` uses communication cutoffs of ±32 MiB per profile window (`iossim.HeatFLCRAS`: the thesis tunes them per application); the default cutoffs (±2 shares of each slice's own traffic, the same for every application) are shown too.\n\n")
	w("| policy | start | slice it/s | optimal / this | migrations | three-way exchanges | last migration | stable | halos between nodes |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n")
	opt := r.heat[0].Throughput
	for _, o := range r.heat {
		w("| `%s` | %s | %.2f | %.2f× | %d | %d | %s | %s | %d of 15 |\n", o.Policy, o.Start, o.Throughput, opt/o.Throughput, o.Migrations, o.Rotations, last(o.Last), yes(o.Stable), int(o.RemoteEdges*15+0.5))
	}
	w("\n![heat](iossim-heat.svg)\n\n")
	b.WriteString(r.heatVerdict())
	w("%s\n", rasEnd)
	return b.String()
}

func (r *report) benchVerdict() string {
	var b strings.Builder
	b.WriteString("What matched and what did not:\n\n")
	for _, t := range r.bench {
		rr := t.Rows[0]
		var parts []string
		row := map[string]outcome{}
		for _, o := range t.Rows[1:] {
			parts = append(parts, fmt.Sprintf("`%s` (%s) %.1f%%", o.Policy, o.Start, 100*o.Throughput/rr.Throughput))
			row[o.Policy+"/"+o.Start] = o
		}
		fmt.Fprintf(&b, "- **%s**: %s of round robin.", t.Topology, strings.Join(parts, ", "))
		if t.Topology == iossim.Unconnected {
			b.WriteString(" The thesis: S-RAS within 4%, ATS-RAS within 7%. Matched (the model has no profiling overhead, so the policies tie). Only 6 actors move: stealing stops once every stealer's cores are busy, and throughput is then CPU-bound whatever the placement; the actors send nothing, so there is nothing to exchange.\n")
			continue
		}
		ats, sras, ars := row["atsras/one node"], row["sras/one node"], row["ars/round robin"]
		ahead := func(o outcome) string {
			switch {
			case o.Throughput > 1.001*rr.Throughput:
				return "ahead of"
			case o.Throughput >= 0.999*rr.Throughput:
				return "level with"
			}
			return "behind"
		}
		fmt.Fprintf(&b, " The thesis has ATS-RAS ahead of round robin and S-RAS behind it (ATS-RAS unstable on the tree); the IO paper has ARS ahead. Here ATS-RAS ends %s round robin (%s), S-RAS %s it, ARS from round robin %s it with %d migrations.",
			ahead(ats), map[bool]string{true: "stable", false: "still migrating in the second half"}[ats.Stable], ahead(sras), ahead(ars), ars.Migrations)
		switch {
		case t.Topology == iossim.Hypercube:
			b.WriteString(" Round robin's cut is the least possible: by Harper's edge-isoperimetric theorem a set of 8 nodes of the 5-cube has at least 8 × (5 − 3) = 16 edges leaving it (a 3-subcube, which round robin's 4 nodes are, has exactly that), so four such sets cut at least 32 of the 80 edges, 40%; level with round robin is the best this model allows, and the thesis's ATS-RAS ahead of it cannot be reproduced here.")
			flc := row["flcras/one node"]
			if ats.Throughput >= 0.999*rr.Throughput {
				fmt.Fprintf(&b, " ATS-RAS reaches that least cut (%.0f%% of the edges between nodes), FLC-RAS %.0f%% (%.1f%% of round robin).", 100*ats.RemoteEdges, 100*flc.RemoteEdges, 100*flc.Throughput/rr.Throughput)
			} else {
				fmt.Fprintf(&b, " **Not reached** by ATS-RAS: the exchanges stop at a local optimum (%.0f%% of the edges between nodes).", 100*ats.RemoteEdges)
			}
		case ats.Throughput < 0.999*rr.Throughput && rr.RemoteEdges <= ats.RemoteEdges:
			fmt.Fprintf(&b, " **Not reproduced** for ATS-RAS: round robin already has %.0f%% of the edges between nodes; the exchanges stop at a local optimum (%.0f%%).", 100*rr.RemoteEdges, 100*ats.RemoteEdges)
		}
		var late []string
		for _, p := range []string{"atsras", "flcras"} {
			if o := row[p+"/one node"]; !o.Stable {
				late = append(late, fmt.Sprintf("%s (last at %s)", strings.ToUpper(p[:len(p)-3])+"-RAS", last(o.Last)))
			}
		}
		if len(late) > 0 {
			fmt.Fprintf(&b, " Still migrating after 150 s: %s; exchanges there are paced by the exchanges' cooldown and each strictly lowers the potential (below), so they are late improvements, not ping-pong, but the run had not settled by its midpoint.", strings.Join(late, ", "))
		}
		b.WriteString("\n")
	}
	b.WriteString(`
How: once every node is busy, the RAS protocol sends no steal request and the stability guard
moves a rank only towards more free CPU, so without more the actors left on the first node
stayed there (S-RAS and ` + "`mpiios`" + ` still do: see "most actors on a node"). ATS-RAS, FLC-RAS and ARS
also *exchange* ranks (iosbridge/exchange.go): a busy node whose actors talk to other nodes
keeps sending steal requests, offering its actor that sends most off the node and that
actor's neighbour on the node that sends most off it. The receiver,
when the ordinary guard declines, lets its policy judge a single move with the CPU share the
actor would get at the busy target (eq. 2.3, table 2.2, eq. 1–3 with a rank's fair share for
the free CPUs), allowed only when the target ends no denser in actors per CPU than the giver;
or it swaps one of its actors for the offered one, or two for the offered two, when that cuts
the bytes crossing nodes by more than a sixteenth of the actors' traffic, the free-CPU
difference staying below the guard's margin or no wider than it was (with an eighth, as
before, a hypercube actor could not trade a single one of its five links, and the exchanges
stopped with half the links between nodes). A node that declines and forwards the request adds a relay,
the actor it would give for the offered one, and a node further on may complete a three-way
exchange (offered actor to the relay, relay's actor to it, one of its actors to the
requester) when that cuts the bytes crossing nodes by more than a sixteenth of the three
actors' traffic. Each exchange lowers Σ k²/C (k actors on C CPUs) or, at equal k, the
traffic crossing nodes, so a sequence of exchanges never returns to a placement it left. An
exchange is carried out whole or not at all (iosbridge/exchange_commit.go): the other nodes
only promise their actors until the requester, whose request must still be outstanding,
commits, so a late or lost answer moves nothing and no half of an exchange (a single move
that no rule approved) slips in, and a node judges none while a steal of its own is
unanswered (the rank of a plain steal moves before its accept arrives, so such a node may
host an actor it does not know of yet). An actor that arrived is exchanged again after 10 s,
a sixth of the one-minute cooldown, which still holds for every other move: an exchange needs
no cooldown against ping-pong (the potential above), only a profile that shows where the
actor now is. With the whole minute every exchange waited for the actors of the first
spreading and each further one a minute more, and ATS-RAS and FLC-RAS were still exchanging
after 150 s (last at 204 s and 162 s on sparse, 223 s for FLC-RAS on the tree, 197 s for
ATS-RAS on the hypercube; over seeds 1–12, in 42 of the 72 runs of the two policies on the
three topologies). Now none of those 72 runs exchanges after 97 s, at about the same
throughput (mean over the seeds: sparse 105.0% and 105.2% of round robin, was 105.0% and
105.0%; tree 103.5% and 103.4%, was 103.5% and 103.6%). On the hypercube the exchanges stop
more often at a local optimum that no swap of one or two actors improves (45% or more of the
edges between nodes): in 10 of its 24 runs, against 7 before (mean 99.6% and 99.6% of round
robin, was 99.7% and 99.8%).
ARS started on one node never moves a connected actor (` + "`ars`" + `, one node): with all its
neighbours local Δc = −1 and Δp ≤ 1 (eq. 1–3), so Δ ≤ 0; the IO paper starts its actors round
robin, and from there ARS regroups them. FLC-RAS's communication gain is a share of the
actor's own traffic (default cutoffs ±2): with absolute cutoffs (2.5 MiB per window, as this
simulator used before) an actor with five local neighbours was definitely bad to move, the
best rule gave 0.5, not above the threshold, and FLC-RAS never started on the hypercube; the
thesis tunes the cutoffs per application and shows FLC-RAS only for heat.

`)
	return b.String()
}

func (r *report) heatVerdict() string {
	opt := r.heat[0].Throughput
	find := func(policy, start string) outcome {
		for _, o := range r.heat {
			if o.Policy == policy && o.Start == start {
				return o
			}
		}
		return outcome{Throughput: opt}
	}
	f1, f2 := find("flcras", "one node"), find("flcras", "random")
	a1, a2 := find("atsras", "one node"), find("atsras", "random")
	r0 := find("none", "random")
	single := "**Not reproduced**"
	if opt/f1.Throughput <= 1.02 && f1.Stable {
		single = "Reproduced"
	}
	fd := find("flcras", "random, default cutoffs")
	var b strings.Builder
	fmt.Fprintf(&b, `What matched and what did not: the thesis's FLC-RAS reaches 1.02× (single node) and 1.01×
(random) of optimal; here tuned FLC-RAS reaches %.2f× and %.2f×, stable (%s, %s). ATS-RAS (thesis: 1.4× and
1.87×, stable sooner) reaches %.2f× and %.2f×; the random start is %.2f× (thesis 2.11×). %s from a
single node: after the first spreading every node is busy, and the exchanges (above) regroup
the slices by single moves and swaps.
`, opt/f1.Throughput, opt/f2.Throughput, yes(f1.Stable), yes(f2.Stable), opt/a1.Throughput, opt/a2.Throughput, opt/r0.Throughput, single)
	if opt/f2.Throughput <= 1.02 && opt/a2.Throughput <= 1.02 {
		fmt.Fprintf(&b, `From the random start it is reproduced, by ATS-RAS too. The exchanges used to stop there at
1.18×: a swap that cut the halos was refused because a slice waiting for remote halos uses
less CPU than one with local neighbours, so trading them looked like widening the free-CPU
difference beyond half the guard's margin. The guard now allows an exchange that leaves the
difference below the margin (the ordinary rule needs the rank's use plus the margin to move
anything) or no wider than it was. Three-way exchanges (a slice whose two neighbours sit on
two other nodes, which no swap of two brings home: a rotation of three slices over three
nodes does) completed in these runs: %d by FLC-RAS, %d by ATS-RAS. Every exchange strictly
cuts the halos crossing nodes, so none can be undone. Both end better than the thesis's
ATS-RAS and level with its FLC-RAS. 1.00× is the blocks' throughput, not their placement
(%d and %d halos of 15 cross nodes, against 3 for the blocks): an iteration is as slow as
its slowest slice, and a slice with one remote neighbour waits as long as one at a block's
edge.
`, f2.Rotations, a2.Rotations, int(f2.RemoteEdges*15+0.5), int(a2.RemoteEdges*15+0.5))
	} else {
		fmt.Fprintf(&b, `From the random start it is **not reproduced** (FLC-RAS %.2f×, ATS-RAS %.2f×): the exchanges,
three-way ones included, stop at a placement where none of them cuts the halos crossing
nodes, and every exchange must strictly cut them so that none can be undone.
`, opt/f2.Throughput, opt/a2.Throughput)
	}
	fd1 := find("flcras", "one node, default cutoffs")
	if opt/fd1.Throughput <= 1.02 && opt/fd.Throughput <= 1.02 {
		fmt.Fprintf(&b, `FLC-RAS with the default cutoffs, untuned, does as well (%.2f× and %.2f×): its communication
gain is a share of each slice's own traffic, so a slice whose neighbours are all local is
not "definitely bad" to move to an idle node, whatever the halos weigh. With the absolute
default this simulator used before (±2.5 MiB per window) it never moved a slice away from its
neighbours from a single node (3.30×), as the thesis warns of a communication-heavy weighting.

`, opt/fd1.Throughput, opt/fd.Throughput)
	} else {
		fmt.Fprintf(&b, `FLC-RAS with the default cutoffs reaches %.2f× from a single node and %.2f× from the random
start (**not** within 1.02× of optimal untuned).

`, opt/fd1.Throughput, opt/fd.Throughput)
	}
	return b.String()
}

func (r *report) scaleVerdict() string {
	if len(r.scale) == 0 {
		return ""
	}
	a, z := r.scale[0], r.scale[len(r.scale)-1]
	return fmt.Sprintf(`How it grows: from %d to %d nodes, convergence goes from %s to %s and the protocol's
traffic from %.1f to %.1f messages per node per second (heartbeats are %.0f%% of it at %d nodes).
Random stealing needs no global knowledge: once the grid is larger than one cluster, the time
to converge depends on how far the load must spread and on the steal back-off, not on the
grid's size, and a node's traffic is set by its overlay degree (a few tens of neighbours,
heartbeated every 2 s). That degree stays bounded only since this simulator's first runs:
a node used to make every node whose steal traffic reached it a neighbour, and its
neighbourhood grew towards the whole grid (50 messages per node per second at 1,000 nodes
and rising); now only Join, Announce and Heartbeat create neighbours.

What does not scale is placement quality: the balancing ends at %.0f%% of the balanced
throughput at %d nodes because %.0f%% of the halos end up crossing clusters (20 ms instead of
100 µs). Random stealing does not know clusters. Satin's cluster-aware stealing (crs) and
NRS's latency locales (nrs) were added after these runs (not run here): they keep a steal's
search inside a cluster, not a job's ranks together, so they are not expected to cut these
cross-cluster halos by themselves.

The %d-node run took %.0f s of CPU time (%.0f s of wall time on this shared machine).
`, a.Nodes, z.Nodes, last(a.Converged), last(z.Converged), a.MsgsPerNodeS, z.MsgsPerNodeS, 100*z.HeartbeatShare, z.Nodes,
		z.ThroughputPct, z.Nodes, 100*z.WideEdges, z.Nodes, z.CPU.Seconds(), z.Wall.Seconds())
}
