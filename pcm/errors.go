package pcm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mpios/mpios/pcm/ckptstore"
)

// Sentinel errors; test with errors.Is. Pending nonblocking operations at a reconfiguration
// point give an error matching mpi.ErrPending.
var (
	// ErrConfig: an option or environment variable is malformed.
	ErrConfig = errors.New("pcm: invalid configuration")
	// ErrCallOrder: the API was used out of order (Register after Load, Reconfigure before
	// Load, Load twice).
	ErrCallOrder = errors.New("pcm: call out of order")
	// ErrIteration: Reconfigure was called with an iteration that does not increase, that
	// does not exceed the restored checkpoint's, or that differs between ranks.
	ErrIteration = errors.New("pcm: bad iteration")
	// ErrNotConfigured: RequestCheckpoint on a process without on-demand checkpointing.
	ErrNotConfigured = errors.New("pcm: on-demand checkpointing not configured")
	// ErrCheckpointFailed is matched by every *CheckpointError.
	ErrCheckpointFailed = errors.New("pcm: checkpoint failed")
	// ErrSizeMismatch is matched by every *SizeMismatchError.
	ErrSizeMismatch = errors.New("pcm: world size differs from the checkpoint's")
	// ErrNoCheckpoint: restart found no checkpoint that every rank can read. It is
	// ckptstore.ErrNoCheckpoint, so either can be tested.
	ErrNoCheckpoint = ckptstore.ErrNoCheckpoint
	// ErrPeer: the operation failed on another rank; the error names it and says why.
	ErrPeer = errors.New("pcm: failed on another rank")
)

// RankFailure is one rank's part in a failed collective operation.
type RankFailure struct {
	Rank   int
	Reason string
}

// CheckpointError reports a checkpoint that was abandoned: some rank could not write its
// piece, or the manifest could not be committed (with several stores, some may then hold
// the manifest; restart passes over a checkpoint missing from any rank's store). Reconfigure
// returns it on every rank (with the same Failures); the application may ignore it and go on,
// the next checkpoint is attempted as scheduled.
type CheckpointError struct {
	Job          string
	Seq          uint64
	Iteration    int
	CommitFailed bool          // the pieces were written, committing the manifest failed
	Failures     []RankFailure // the ranks that failed, in rank order
	Err          error         // this rank's own error, if it is one of them
}

// Error names the checkpoint and each failing rank with its reason.
func (e *CheckpointError) Error() string {
	var b strings.Builder
	what := "abandoned"
	if e.CommitFailed {
		what = "not committed"
	}
	fmt.Fprintf(&b, "pcm: checkpoint %d of job %s at iteration %d %s", e.Seq, e.Job, e.Iteration, what)
	for i, f := range e.Failures {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%srank %d: %s", sep, f.Rank, f.Reason)
	}
	return b.String()
}

// Unwrap returns this rank's own error, if any.
func (e *CheckpointError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCheckpointFailed.
func (e *CheckpointError) Is(target error) bool { return target == ErrCheckpointFailed }

// SizeMismatchError reports a restart into a world whose size differs from the
// checkpointed job's when the application has no distributed data (NewBlock): its state is
// one opaque piece per rank, which cannot be split or merged, so the sizes must agree.
type SizeMismatchError struct {
	Job         string // the job restarted from
	Seq         uint64
	Checkpoint  int  // ranks in the checkpoint
	World       int  // ranks in this world
	Distributed bool // the checkpoint holds distributed data, but this process registered none
}

// Error says both sizes and how to fix it.
func (e *SizeMismatchError) Error() string {
	why := "the job has no distributed data (pcm.NewBlock) to split over another number of ranks"
	if e.Distributed {
		why = "the checkpoint holds distributed data, but this process registered no block (pcm.NewBlock)"
	}
	return fmt.Sprintf("pcm: restart from job %s checkpoint %d: the checkpoint has %d ranks, this world has %d, and %s (run with -np %d)",
		e.Job, e.Seq, e.Checkpoint, e.World, why, e.Checkpoint)
}

// Is reports whether target is ErrSizeMismatch.
func (e *SizeMismatchError) Is(target error) bool { return target == ErrSizeMismatch }
