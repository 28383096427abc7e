package ckptstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultKeep is the number of committed checkpoints Prune keeps when asked for keep <= 0:
// two, so that a damaged newest checkpoint still leaves one to fall back to.
const DefaultKeep = 2

// Prune removes all but the newest keep committed checkpoints of job (DefaultKeep if
// keep <= 0), together with leftovers of crashed or abandoned writes: uncommitted checkpoints
// older than the newest committed one, temporary files in kept checkpoints, files a kept
// manifest does not reference, and temporary files of newer, still uncommitted checkpoints
// that are older than the newest commit. Checkpoints newer than the newest commit are
// otherwise left alone: they may be in progress. The newest committed checkpoint is never
// removed; if none of the kept ones has all its local pieces at their recorded sizes, the
// newest committed one that does is kept too. Removal is crash-safe: a checkpoint is first
// renamed out of sight, then deleted.
func (s *Store) Prune(job string, keep int) error {
	if err := validJob(job); err != nil {
		return fmt.Errorf("ckptstore: prune: %w", err)
	}
	if keep <= 0 {
		keep = DefaultKeep
	}
	l := s.lockFor(job)
	l.Lock()
	defer l.Unlock()
	if err := s.prune(job, keep); err != nil {
		return fmt.Errorf("ckptstore: prune job %s: %w", job, err)
	}
	return nil
}

func (s *Store) prune(job string, keep int) error {
	jobDir := s.jobDir(job)
	var errs []error
	// Finish removals interrupted by a crash.
	if ents, err := os.ReadDir(jobDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), trashPrefix) {
				errs = append(errs, os.RemoveAll(filepath.Join(jobDir, e.Name())))
			}
		}
	}
	cs, err := s.candidates(job)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	seqs, committed, err := s.seqDirs(job)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if len(cs) == 0 {
		return errors.Join(errs...) // nothing committed: everything may be in progress
	}
	newest := cs[0].seq
	var newestCommit time.Time
	if st, err := os.Stat(filepath.Join(s.seqDir(job, newest), manifestFile)); err == nil {
		newestCommit = st.ModTime() // local clock, unlike Manifest.Time
	}

	kept := make(map[uint64]*Manifest)
	anyIntact := false
	for i := range cs {
		c := &cs[i]
		if i < keep {
			kept[c.seq] = &c.m
			anyIntact = anyIntact || c.err == nil && s.intact(&c.m)
		} else if !anyIntact && c.err == nil && s.intact(&c.m) {
			kept[c.seq], anyIntact = &c.m, true
		}
	}

	for _, seq := range seqs {
		dir := s.seqDir(job, seq)
		switch m, isKept := kept[seq]; {
		case isKept:
			if m.Job == "" {
				break // unreadable manifest: keep the directory as it is for inspection
			}
			errs = append(errs, s.removeUnreferenced(dir, m))
		case committed[seq] || seq < newest:
			errs = append(errs, s.removeCheckpoint(job, seq))
		default: // newer than the newest commit: possibly in progress
			errs = append(errs, removeTempsBefore(dir, newestCommit))
		}
	}
	s.forget(job, func(seq uint64) bool { _, k := kept[seq]; return !k && seq < newest })
	return errors.Join(errs...)
}

// intact reports whether all of m's local pieces exist with their recorded sizes: a cheap
// check, without reading the data.
func (s *Store) intact(m *Manifest) bool {
	for _, p := range m.Pieces {
		if p.Node != s.node {
			continue
		}
		st, err := os.Stat(s.piecePath(PieceID{Job: m.Job, Seq: m.Seq, Rank: p.Rank}))
		if err != nil || st.Size() != p.Size {
			return false
		}
	}
	return true
}

// removeCheckpoint renames a checkpoint directory out of sight (atomically un-listing it),
// makes that durable, then deletes it.
func (s *Store) removeCheckpoint(job string, seq uint64) error {
	jobDir := s.jobDir(job)
	trash, err := os.MkdirTemp(jobDir, trashPrefix+seqName(seq)+"-")
	if err != nil {
		return err
	}
	// Into a fresh directory, so the name is unique (os.Rename refuses to replace one).
	if err := s.removeCounted(s.seqDir(job, seq), func(dir string) error {
		return os.Rename(dir, filepath.Join(trash, seqName(seq)))
	}); err != nil {
		os.Remove(trash)
		return err
	}
	if err := syncDir(jobDir); err != nil {
		return err
	}
	if s.mem {
		s.keepSpares(job, filepath.Join(trash, seqName(seq)))
	}
	return os.RemoveAll(trash)
}

// removeUnreferenced deletes from a kept checkpoint directory every file other than its
// manifest and the pieces it lists: temporary files and stale pieces of crashed attempts.
func (s *Store) removeUnreferenced(dir string, m *Manifest) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	want := map[string]bool{manifestFile: true}
	for _, p := range m.Pieces {
		want[pieceName(p.Rank)] = true
	}
	var errs []error
	for _, e := range ents {
		if !want[e.Name()] && !e.IsDir() {
			errs = append(errs, s.removeCounted(filepath.Join(dir, e.Name()), os.Remove))
		}
	}
	return errors.Join(errs...)
}

// removeTempsBefore deletes temporary files in dir last modified before t.
func removeTempsBefore(dir string, t time.Time) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !isTemp(e.Name()) {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(t) {
			errs = append(errs, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}
