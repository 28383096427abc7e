package ckptstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// Spare piece files (stores in memory only). In a tmpfs every page a piece writes is
// allocated, and freed again when the checkpoint is pruned; for a page written once that
// costs several times the copy itself (docs/PERFORMANCE.md, issue 16). So a memory store
// keeps the piece files of the checkpoint Prune removes, one per job and rank, as spare
// files, and the next piece of that rank here (its own write or a buddy's copy) is written
// into the spare file in place: its pages are overwritten, not allocated, and the blocks the
// new piece has as zeros where the old one had data are punched out again (the file stays
// sparse: a zero block holds no memory).
//
// A spare file is a temporary file (not counted in Usage, like a write in progress); each
// prune first deletes the spare files it finds (a rank no longer written here, after a
// migration, keeps none for long), so a job holds at most one checkpoint's pieces as spares:
// the memory of the checkpoint that a write would otherwise allocate while the older ones are
// still kept. Taking a spare is a rename, atomic between the processes that share the store
// (its node's ranks and pcmd): one taker gets it, the others write a new file.
const sparePrefix = tmpPrefix + "spare-"

// sparePath is where job's spare file for rank's pieces lives.
func (s *Store) sparePath(job string, rank int) string {
	return filepath.Join(s.jobDir(job), sparePrefix+pieceName(rank))
}

// tmpSeq numbers the temporary names of this process's recycled files.
var tmpSeq atomic.Uint64

// takeSpare moves job's spare file for id.Rank into dir under a temporary name, opens it and
// cuts it to size bytes. It returns nil if there is none (or it cannot be used).
func (s *Store) takeSpare(id PieceID, dir string, size int64) *os.File {
	tmp := filepath.Join(dir, tmpPrefix+pieceName(id.Rank)+"-spare-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(tmpSeq.Add(1), 10))
	if err := os.Rename(s.sparePath(id.Job, id.Rank), tmp); err != nil {
		return nil
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err == nil {
		// Also marks it modified now: Prune deletes stale temporary files by age.
		if err = f.Truncate(size); err == nil {
			return f
		}
		f.Close()
	}
	os.Remove(tmp)
	return nil
}

// DropSpares deletes job's spare files (a memory store's piece files kept for reuse): for
// when the job will write no more checkpoints here, such as its end. Its checkpoints stay.
// Each prune also drops the spare files the last checkpoint did not use, so a job that
// never calls it holds at most one checkpoint's pieces as spares.
func (s *Store) DropSpares(job string) error {
	if err := validJob(job); err != nil {
		return fmt.Errorf("ckptstore: drop spare files: %w", err)
	}
	jobDir := s.jobDir(job)
	ents, err := os.ReadDir(jobDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ckptstore: drop spare files: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			// Another process may be dropping or taking it too.
			if err := os.Remove(filepath.Join(jobDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ckptstore: drop spare files: %w", err)
	}
	return nil
}

// keepSpares makes the pieces of the removed checkpoint in dir (renamed out of sight by
// removeCheckpoint) job's spare files, after deleting the spare files left from before.
func (s *Store) keepSpares(job, dir string) {
	s.DropSpares(job)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rank, ok := parsePieceName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		// A failure leaves the file to the directory's removal.
		os.Rename(filepath.Join(dir, e.Name()), s.sparePath(job, rank))
	}
}

// parsePieceName is the inverse of pieceName; ok is false for anything else.
func parsePieceName(name string) (int, bool) {
	const pre, suf = "rank-", ".piece"
	if len(name) <= len(pre)+len(suf) || name[:len(pre)] != pre || name[len(name)-len(suf):] != suf {
		return 0, false
	}
	r, err := strconv.Atoi(name[len(pre) : len(name)-len(suf)])
	if err != nil || r < 0 || r >= MaxRanks || pieceName(r) != name {
		return 0, false
	}
	return r, true
}

// oldData is the data a recycled file held before it was reused: the byte ranges that may
// hold non-zero bytes (holes read as zeros), in increasing order. A new file has none.
type oldData struct {
	f      *os.File
	ranges [][2]int64 // [start, end)
}

// clear makes [from, to) of the file read as zeros where old data may be, punching holes.
func (o *oldData) clear(from, to int64) error {
	if o == nil {
		return nil
	}
	for len(o.ranges) > 0 && o.ranges[0][1] <= from {
		o.ranges = o.ranges[1:] // pieces are written in increasing order
	}
	for _, r := range o.ranges {
		if r[0] >= to {
			break
		}
		if err := punchHole(o.f, max(r[0], from), min(r[1], to)); err != nil {
			return err
		}
	}
	return nil
}

// recycledData lists the data ranges of f, a spare file just cut to its new size.
func recycledData(f *os.File) (*oldData, error) {
	ranges, err := dataRanges(f)
	if err != nil {
		return nil, err
	}
	return &oldData{f: f, ranges: ranges}, nil
}

// errNoSparse is dataRanges' and punchHole's error where the system has neither.
var errNoSparse = errors.New("no sparse file support")
