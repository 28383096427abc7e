package ckptstore

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidName: a job id, node name or rank is not acceptable.
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidManifest: a Manifest or PieceInfo is malformed (missing fields, ranks out of
	// order, unparsable checksum, unsupported version).
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrNotFound: the piece, manifest or job does not exist in this store.
	ErrNotFound = errors.New("not found")
	// ErrNotLocal: the piece is recorded as stored on another node; fetch it from there.
	ErrNotLocal = errors.New("piece is stored on another node")
	// ErrCommitted: the checkpoint is already committed and cannot be changed.
	ErrCommitted = errors.New("checkpoint already committed")
	// ErrNoCheckpoint: no committed checkpoint of the job verifies.
	ErrNoCheckpoint = errors.New("no valid checkpoint")
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrLocked: TryLock found the file locked by another holder, alive.
	ErrLocked = errors.New("locked by another holder")
)

// CorruptError reports a piece or manifest whose content does not match what was recorded.
type CorruptError struct {
	Job    string
	Seq    uint64
	Rank   int    // -1: the manifest itself
	Reason string // e.g. "checksum mismatch", "truncated: 10 of 20 bytes"
	Err    error  // underlying error, if any
}

// Error names the job, checkpoint and rank (or manifest) and the reason.
func (e *CorruptError) Error() string {
	s := fmt.Sprintf("ckptstore: job %s checkpoint %d", e.Job, e.Seq)
	if e.Rank >= 0 {
		s += fmt.Sprintf(" rank %d", e.Rank)
	} else {
		s += " manifest"
	}
	s += ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Skipped describes a committed checkpoint that LatestValid passed over, and why.
type Skipped struct {
	Seq    uint64
	Rank   int    // the offending rank, or -1 when the manifest itself is bad
	Reason string // short, e.g. "checksum mismatch", "piece missing"
	Err    error  // the full error
}

// String formats s as "checkpoint 7 rank 2: checksum mismatch".
func (s Skipped) String() string {
	if s.Rank < 0 {
		return fmt.Sprintf("checkpoint %d: %s", s.Seq, s.Reason)
	}
	return fmt.Sprintf("checkpoint %d rank %d: %s", s.Seq, s.Rank, s.Reason)
}

// skippedFrom converts a verification error into a Skipped.
func skippedFrom(seq uint64, rank int, err error) Skipped {
	s := Skipped{Seq: seq, Rank: rank, Err: err, Reason: err.Error()}
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		s.Rank, s.Reason = ce.Rank, ce.Reason
	case errors.Is(err, ErrNotFound):
		s.Reason = "piece missing"
		if rank < 0 {
			s.Reason = "manifest missing"
		}
	}
	return s
}
