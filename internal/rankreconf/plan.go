// Package rankreconf is one rank's side of a reconfiguration: the part of the reconfiguration
// scenario of the MPI/IOS paper (El Maghraoui, Szymanski, Varela: "An architecture for
// reconfigurable iterative MPI applications in dynamic environments") that runs in every rank
// at an iteration boundary:
//
//   - Decide: which reconfiguration-log entries the ranks apply at an agreement point (the
//     prefix every rank has, so that all enter the reconfiguration at the same boundary),
//     whether a checkpoint is taken and finished there, and which ranks move where. It is a
//     pure function of what the ranks agreed on: every rank computes the same plan.
//   - Migration.Run: the migration protocol of one boundary. Each moving rank (the
//     predecessor) has the supervisor start its successor on the target node and hands it
//     the state; the ranks exchange the outcomes (the commit point); Judge, again pure,
//     says what they mean for each rank: every rank redirects the moved ranks to their
//     successors; each predecessor whose move happened retires and leaves, one whose
//     hand-over failed before the commit aborts it and goes on.
//   - TakeOver.Run: the successor's side: it receives the state, waits for the commit and
//     joins the data plane in the rank's place.
//
// The effects are behind small interfaces — World (the data plane: the agreement, the
// address table), Control (the link to the supervisor), Handover (the connection between
// predecessor and successor) — that package pcm implements with mpi, NATS and
// internal/rewire, and that tests fake. Time comes in through Migration.Now.
package rankreconf

import (
	"fmt"
	"slices"

	"github.com/mpios/mpios/internal/reconf"
)

// Point is what one rank knows at an agreement point, once the ranks have exchanged their
// requests. Everything in it but Rank is the same on every rank.
type Point struct {
	Rank, Size int
	// Known is the number of log entries every rank has: the agreed minimum.
	Known uint64
	// Applied is the number of entries acted on at earlier agreement points.
	Applied uint64
	// Asked: some rank asked for a checkpoint (RequestCheckpoint) since the last agreement.
	Asked bool
	// Scheduled: a checkpoint is due on the schedule at this boundary.
	Scheduled bool
	// Checkpointing: the process writes checkpoints (on a schedule or on demand).
	Checkpointing bool
	// SyncCheckpoints: a checkpoint is written and committed at its own boundary.
	SyncCheckpoints bool
	// InFlight: a checkpoint taken at an earlier boundary is not committed yet.
	InFlight bool
}

// Move is one rank moving to a node, by log entry Seq. Joint: the moves of its entry
// happen together or not at all (Judge).
type Move struct {
	Rank  int
	Seq   uint64
	To    string
	Joint bool
}

// Plan is what the ranks do at an agreement point, in this order: finish the checkpoint in
// flight, take a checkpoint, finish it, migrate.
type Plan struct {
	// Applied is the number of log entries acted on once this point is done.
	Applied uint64
	// Entries are the log entries applied at this point.
	Entries []reconf.Reconfiguration
	// SettleFirst finishes the checkpoint in flight first: at most one is in flight, and
	// none may span a migration.
	SettleFirst bool
	// Checkpoint takes a checkpoint of this boundary.
	Checkpoint bool
	// SettleCheckpoint finishes that checkpoint at this boundary: it is synchronous, or a
	// rank leaves here (a predecessor cannot finish it later, its successor never began it).
	SettleCheckpoint bool
	// Moves are the migrations of this boundary, in rank order.
	Moves []Move
	// Resize is the split or merge of this boundary, after the moves; nil if none.
	Resize *Resize
}

// MoveOf returns rank's move in p, if it moves.
func (p Plan) MoveOf(rank int) (Move, bool) {
	for _, m := range p.Moves {
		if m.Rank == rank {
			return m, true
		}
	}
	return Move{}, false
}

// Decide returns the plan of an agreement point. log is this rank's copy of the
// reconfiguration log; it must hold at least pt.Known entries. The plan depends only on
// the entries' requests (kind, ranks, target), never on the state the supervisor has since
// recorded for them: two ranks' copies may differ in the states, not in the requests, and
// the ranks must act alike.
func Decide(pt Point, log []reconf.Reconfiguration) (Plan, error) {
	if uint64(len(log)) < pt.Known {
		return Plan{}, fmt.Errorf("rankreconf: %d log entries agreed, rank %d has %d", pt.Known, pt.Rank, len(log))
	}
	p := Plan{Applied: max(pt.Applied, pt.Known)}
	if pt.Applied < pt.Known {
		p.Entries = log[pt.Applied:pt.Known]
	}
	asked := pt.Asked
	for _, e := range p.Entries {
		if e.Kind == reconf.Checkpoint {
			asked = true
		}
	}
	p.Moves = movesOf(p.Entries, pt.Size)
	rs, err := resizeOf(p.Entries, pt.Size)
	if err != nil {
		return Plan{}, err
	}
	p.Resize = rs
	// A checkpoint never spans a change of the world: it is finished at this boundary.
	changes := len(p.Moves) > 0 || rs != nil
	p.Checkpoint = pt.Scheduled || asked && pt.Checkpointing
	p.SettleFirst = pt.InFlight && (p.Checkpoint || changes)
	p.SettleCheckpoint = p.Checkpoint && (pt.SyncCheckpoints || changes)
	return p, nil
}

// movesOf returns the moves that entries ask for, in rank order; a rank named twice goes
// where the first entry sends it, and ranks outside the world are ignored.
func movesOf(entries []reconf.Reconfiguration, size int) []Move {
	var moves []Move
	seen := make(map[int]bool)
	for _, e := range entries {
		if e.Kind != reconf.Migrate {
			continue
		}
		for i, r := range e.Ranks {
			if r < 0 || r >= size || seen[r] {
				continue
			}
			seen[r] = true
			moves = append(moves, Move{Rank: r, Seq: e.Seq, To: e.TargetOf(i), Joint: e.Joint})
		}
	}
	slices.SortFunc(moves, func(a, b Move) int { return a.Rank - b.Rank })
	return moves
}
