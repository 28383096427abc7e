package main

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// What the experiment reads from mpirun's output. heat2d's rank 0 prints, on stdout,
//
//	residual ITER VALUE        every -residual-every iterations
//	checksum VALUE             at the end
//	sec_per_iter VALUE         at the end
//
// and mpirun logs on stderr, among others,
//
//	mpirun: job JOBID nats URL
//	mpirun: migrated rank R from NODE to NODE at iteration I in PAUSE, SIZE of state (REASON)
//	mpirun: migration of rank R to NODE aborted, it continues on NODE: ERROR
//
// Only "migrated rank R from A to B" is required of a migration line; the iteration and
// the pause are read when present.
var (
	residualRE = regexp.MustCompile(`^residual (\d+) (\S+)$`)
	checksumRE = regexp.MustCompile(`^checksum (\S+)$`)
	secIterRE  = regexp.MustCompile(`^sec_per_iter (\S+)$`)
	jobRE      = regexp.MustCompile(`mpirun: job (\S+)`)
	migratedRE = regexp.MustCompile(`migrated rank (\d+) from (\S+) to (\S+?),?(?: at iteration (\d+))?(?: in ([0-9.]+[a-zµ]+))?(?:[ ,]|$)`)
	abortedRE  = regexp.MustCompile(`migration of rank (\d+) to (\S+?),? aborted`)
)

// migration is one migration mpirun reported.
type migration struct {
	At        float64 `json:"at"` // seconds since mpirun started
	Rank      int     `json:"rank"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	Iteration int     `json:"iteration"` // -1 if not reported
	Pause     float64 `json:"pause"`     // seconds; -1 if not reported
	Reason    string  `json:"reason,omitempty"`
}

// parseResidual reads a "residual ITER VALUE" line.
func parseResidual(line string) (iter int, ok bool) {
	m := residualRE.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	iter, err := strconv.Atoi(m[1])
	return iter, err == nil
}

// parseMigration reads a "migrated rank ..." line of mpirun.
func parseMigration(line string) (migration, bool) {
	m := migratedRE.FindStringSubmatch(line)
	if m == nil {
		return migration{}, false
	}
	mg := migration{Iteration: -1, Pause: -1, From: m[2], To: m[3]}
	mg.Rank, _ = strconv.Atoi(m[1])
	if m[4] != "" {
		mg.Iteration, _ = strconv.Atoi(m[4])
	}
	if m[5] != "" {
		if d, err := time.ParseDuration(m[5]); err == nil {
			mg.Pause = d.Seconds()
		}
	}
	// The reason is the trailing parenthesis, which may itself contain parentheses.
	if rest := line[migratedRE.FindStringIndex(line)[1]:]; strings.HasSuffix(rest, ")") {
		if i := strings.Index(rest, "("); i >= 0 {
			mg.Reason = rest[i+1 : len(rest)-1]
		}
	}
	return mg, true
}
