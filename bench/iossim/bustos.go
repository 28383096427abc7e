package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/iosbridge/iossim"
)

// The section of SIMULATIONS.md on Bustos' simulations. "-only bustos" reruns just it and
// replaces it between these markers in the existing report, so the long runs of the other
// sections need not be repeated.
const (
	bustosBegin = "<!-- bustos: written by go run ./bench/iossim -only bustos -->"
	bustosEnd   = "<!-- bustos end -->"
	// The subsection of the settled runs (-bustos-until), which only they rewrite: a full
	// run of the tool keeps it as it is.
	bustosSettledBegin = "<!-- bustos settled: written by go run ./bench/iossim -only bustos -bustos-until -->"
	bustosSettledEnd   = "<!-- bustos settled end -->"
)

// bustosPolicies are compared up to bustosCompareUpTo nodes a side: the combination Bustos
// recommends and its two halves; larger sizes run rhns alone (each run costs minutes).
// bustosPlain (RHNS as Bustos describes it, without the agents' gathering) runs up to
// bustosPlainUpTo.
var bustosPolicies = []string{"rhns", bustosPlain, "sheriff", "robinhood"}

const (
	bustosCompareUpTo = 20
	bustosPlainUpTo   = 50
	bustosPlain       = "rhns-bustos"
)

type bustosRow struct {
	Policy string
	iossim.BustosResult
	CPU time.Duration
}

// label is the row's policy column.
func (r bustosRow) label() string {
	if r.Policy == bustosPlain {
		return "`rhns`, Bustos' own"
	}
	return "`" + r.Policy + "`"
}

// bustos runs the ALOP simulations at the given sizes (n for n×n nodes).
func bustos(o options) ([]bustosRow, error) {
	var rows []bustosRow
	for _, n := range o.bustos {
		pols := bustosPolicies
		switch {
		case n > bustosPlainUpTo:
			pols = pols[:1]
		case n > bustosCompareUpTo:
			pols = pols[:2]
		}
		for _, pol := range pols {
			cpu0 := cpuTime()
			cfg := iossim.BustosConfig(n, pol, o.seed)
			if pol == bustosPlain {
				plain, err := iossim.BustosSheriff()
				if err != nil {
					return nil, err
				}
				cfg = iossim.BustosConfig(n, iosbridge.PolicyRHNS, o.seed)
				cfg.Tuned = plain
			}
			if o.bustosUntil > 0 {
				cfg.Duration, cfg.QuietStop = o.bustosUntil, o.bustosQuiet
				// These runs take CPU hours at 100×100: say where they are every 5 virtual minutes.
				cfg.OnSample = func(s iossim.Sample) {
					if s.At > 0 && s.At%(5*time.Minute) == 0 {
						fmt.Fprintf(o.log, "bustos %d×%d %s: %v virtual, %d migrations, %v CPU\n", n, n, pol, s.At, s.Migrations, (cpuTime() - cpu0).Round(time.Second))
					}
				}
			}
			r, err := iossim.RunBustos(cfg)
			if err != nil {
				return nil, err
			}
			rows = append(rows, bustosRow{Policy: pol, BustosResult: r, CPU: cpuTime() - cpu0})
			fmt.Fprintf(o.log, "bustos %d×%d %s: ALOP %.2f (%d of OPT %d), %.2f migrations per object, last at %v, ended at %v\n",
				n, n, pol, r.ALOP, r.Used, r.OPT, r.MigrationsPerObject, r.LastMigration, r.End)
		}
	}
	return rows, nil
}

// bustosMarkdown is the section, markers included.
func bustosMarkdown(rows []bustosRow, date string, seed uint64, sizes []int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var sz []string
	for _, n := range sizes {
		sz = append(sz, fmt.Sprint(n))
	}
	w("%s\n## Bustos: ALOP and migrations per object, %s nodes a side\n\n", bustosBegin, strings.Join(sz, ", "))
	w(`**Date:** %s, seed %d: `+"`go run ./bench/iossim -only bustos -bustos %s`"+`.

Bustos' large-scale simulation (seed 001 §6.1): n×n nodes whose capacities μ follow
N(1, 1/9), m = %d active objects of load λ = %.2f each, started on the 3×3 corner of the
network. Here a node has μ/λ cores and an object is a rank that wants one core, so a node is
overloaded exactly when jλ ≥ μ; the objects form a 10×10 Jacobi mesh and each waits for its
four neighbours every iteration (lockstep). The agents are the deployed `+"`iosbridge.Node`"+`
with its stability guard (one-minute cooldown); an underloaded node is one with at least 30%%
of its cores idle (T = 0.7), Robin-Hood asks 3 acquaintances with RB = 0.7 and the Sheriff
steals with RS = 1.0, Bustos' recommended values. 600 virtual seconds. OPT (eq. 6.3) is the
number of best nodes whose capacities exceed mλ; ALOP (eq. 6.4) is the nodes hosting an object
at the end over OPT. Bustos' targets: ALOP below 2 and fewer than 6.5 migrations per object.

| nodes | policy | OPT | nodes used | ALOP | migrations per object | most by one object | overloaded nodes | CPU time |
| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
`, date, seed, strings.Join(sz, ","), iossim.BustosObjects, iossim.BustosLambda)
	for _, r := range rows {
		alop := fmt.Sprintf("%.2f", r.ALOP)
		if r.Policy == "rhns" && r.ALOP >= 2 {
			alop = "**" + alop + "**"
		}
		w("| %d×%d | %s | %d | %d | %s | %.2f | %d | %d | %.0f s |\n", r.Nodes, r.Nodes, r.label(), r.OPT, r.Used, alop,
			r.MigrationsPerObject, r.MaxMigrations, r.Overloaded, r.CPU.Seconds())
	}
	met := true
	for _, r := range rows {
		if r.Policy == "rhns" && (r.ALOP >= 2 || r.MigrationsPerObject >= 6.5) {
			met = false
		}
	}
	var late []string
	duration, cooldown := iossim.BustosConfig(3, "rhns", 1).Duration, iosbridge.DefaultStability().Cooldown
	for _, r := range rows {
		if r.Policy == "rhns" && r.ALOP >= 2 && time.Duration(r.MaxMigrations)*cooldown >= duration {
			late = append(late, fmt.Sprintf(`At %d×%d RHNS ends on %d nodes for OPT %d, but not settled: an object moved
%d times, once per cooldown from the start, so its last move came in the last %.0f s of the %.0f s
simulated (this one took %.0f s of CPU; -bustos-until runs on until the agents settle and
writes a subsection of its own).`, r.Nodes, r.Nodes, r.Used, r.OPT, r.MaxMigrations, cooldown.Seconds(), duration.Seconds(), r.CPU.Seconds()))
		}
	}
	notRun := ""
	if len(late) > 0 {
		notRun = "\n" + strings.Join(late, "\n")
	}
	if largest := slices.Max(sizes); largest < 100 {
		notRun += fmt.Sprintf(" Sides above %d were not run here (100×100 takes several CPU minutes).", largest)
	}
	if met {
		w("\nRHNS meets both targets at every size. ")
	} else {
		w("\n**RHNS misses a target** (bold above). ")
	}
	w(`Robin-Hood alone spreads the objects off the overloaded corner and
stops at the first placement without an overloaded node (Bustos' "local optimum"), using
several times OPT; the Sheriff's ranked stealing then gathers them on the best nodes, as
Bustos found.

The agents' Sheriff departs from Bustos' (`+"`iosbridge/hints.go`"+`). His Sheriff steals one
object from one acquaintance at a time; on a large grid the objects then climb one node at a
time to scattered better nodes, each move paced by the cooldown, and seldom meet. So (i) heartbeats pass on, up to 4 hops, the 3 best-ranked
underloaded nodes and the 3 lowest-ranked hosts of movable objects their senders know of
(his acquaintance lists, kept up to date by heartbeats, seen a few steps further); (ii) a
stealer sends its request straight to a lower-ranked host so named (else to acquaintances
whose heartbeats show objects on a node of lower rank, else to a random one); (iii) a host
gives an object only to a stealer among the 3 best underloaded nodes it knows of, so objects
wait for the best nodes rather than stop on the way; (iv) a stealer takes in one steal as many
objects as it holds without becoming overloaded; (v) an overloaded node's balance request goes
to one of the best nodes it knows of first; (vi) neither step moves an object to a node it would
overload. The rows "Bustos' own" run without (i) and (iii)–(v): their Sheriff steals one object
at a time from an acquaintance (one whose heartbeat shows objects on a node of lower rank, if
any).%s Before these changes RHNS at 100×100 ended at ALOP 3.89 after 600 s and, run on, had not
settled at 2,400 s (ALOP 2.22, 6.95 migrations per object).
The most moves by one object is bounded by the one-minute cooldown (600 s / 1 min).%s
%s
`, bustosCompared(rows), notRun, bustosEnd)
	return b.String()
}

// bustosCompared is a sentence comparing rhns with Bustos' own RHNS at the largest size
// where both ran; "" if none.
func bustosCompared(rows []bustosRow) string {
	var mine, his *bustosRow
	for i := range rows {
		r := &rows[i]
		for j := range rows {
			if o := &rows[j]; r.Policy == "rhns" && o.Policy == bustosPlain && o.Nodes == r.Nodes && (mine == nil || r.Nodes > mine.Nodes) {
				mine, his = r, o
			}
		}
	}
	if mine == nil {
		return ""
	}
	return fmt.Sprintf(" At %d×%d this takes ALOP from %.2f to %.2f and migrations per object from %.2f to %.2f.",
		mine.Nodes, mine.Nodes, his.ALOP, mine.ALOP, his.MigrationsPerObject, mine.MigrationsPerObject)
}

// bustosSettledMarkdown is the subsection of the settled runs, markers included.
func bustosSettledMarkdown(rows []bustosRow, o options) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var sz []string
	for _, n := range o.bustos {
		sz = append(sz, fmt.Sprint(n))
	}
	w("%s\n### Bustos once settled: %s nodes a side\n\n", bustosSettledBegin, strings.Join(sz, ", "))
	w("**Date:** %s, seed %d: `go run ./bench/iossim -only bustos -bustos %s -bustos-until %v -bustos-quiet %v`.\n\n",
		o.date, o.seed, strings.Join(sz, ","), o.bustosUntil, o.bustosQuiet)
	w(`The scenario above, but each run goes on until no migration has happened for %v of virtual
time (it then counts as settled; the agents' cooldown is %v), at most %v. Bustos measures
ALOP once the system has converged; the 600 s runs above may stop while objects still move.

| nodes | policy | OPT | nodes used | ALOP | migrations per object | most by one object | overloaded nodes | last migration | ended | settled | CPU time |
| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |
`, o.bustosQuiet, iosbridge.DefaultStability().Cooldown, o.bustosUntil)
	for _, r := range rows {
		alop := fmt.Sprintf("%.2f", r.ALOP)
		if r.Policy == "rhns" && r.ALOP >= 2 {
			alop = "**" + alop + "**"
		}
		mig := fmt.Sprintf("%.2f", r.MigrationsPerObject)
		if r.Policy == "rhns" && r.MigrationsPerObject >= 6.5 {
			mig = "**" + mig + "**"
		}
		last := "none"
		if r.LastMigration >= 0 {
			last = fmt.Sprintf("%.0f s", r.LastMigration.Seconds())
		}
		settled := "yes"
		if r.End >= o.bustosUntil {
			settled = "**no** (cap)"
		}
		w("| %d×%d | %s | %d | %d | %s | %s | %d | %d | %s | %.0f s | %s | %.0f s |\n", r.Nodes, r.Nodes, r.label(), r.OPT, r.Used, alop,
			mig, r.MaxMigrations, r.Overloaded, last, r.End.Seconds(), settled, r.CPU.Seconds())
	}
	w("\n%s\n", bustosSettledEnd)
	return b.String()
}

// keptSettled is the settled subsection of the report in dir, markers included, set off by
// blank lines to follow Bustos' section in a full report; "" if there is none.
func keptSettled(dir string) string {
	old, err := os.ReadFile(filepath.Join(dir, "SIMULATIONS.md"))
	if err != nil {
		return ""
	}
	s := string(old)
	i, j := strings.Index(s, bustosSettledBegin), strings.Index(s, bustosSettledEnd)
	if i < 0 || j < i {
		return ""
	}
	return "\n" + s[i:j+len(bustosSettledEnd)] + "\n"
}

// splice replaces the section between the markers begin and end of the report in dir with
// section. In a report written before the markers existed the section replaces the text
// from the heading from (if not empty) up to to (or the end); failing that it goes before
// the heading "## Scale:", or at the end.
func splice(dir, begin, end, from, to, section string) error {
	p := filepath.Join(dir, "SIMULATIONS.md")
	old, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("iossim: -only updates an existing report: %w", err)
	}
	s := string(old)
	if i, j := strings.Index(s, begin), strings.Index(s, end); i >= 0 && j > i {
		s = s[:i] + section + strings.TrimPrefix(s[j+len(end):], "\n")
	} else if i := strings.Index(s, from); from != "" && i >= 0 {
		j := len(s)
		if k := strings.Index(s[i:], to); to != "" && k >= 0 {
			j = i + k
		}
		s = s[:i] + section + s[j:]
	} else if k := strings.Index(s, "## Scale:"); k >= 0 {
		s = s[:k] + section + "\n" + s[k:]
	} else {
		s += "\n" + section
	}
	return os.WriteFile(p, []byte(s), 0o644)
}
