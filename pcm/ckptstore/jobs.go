package ckptstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// JobUsage is what one job holds in a store, for choosing what to remove from a full one.
type JobUsage struct {
	Job string
	// Bytes are the job's pieces and manifests as the usage count counts them.
	Bytes int64
	// LastChange is when a checkpoint of the job last changed here (a piece, buddy copy or
	// manifest written): the newest modification time of its checkpoint directories, or of
	// the job's directory if it has none. Pruning and spare files do not count.
	LastChange time.Time
}

// Jobs lists the jobs that have checkpoints (or their beginnings) in the store, in no
// particular order. A directory that is not a job's is left out.
func (s *Store) Jobs() ([]JobUsage, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: list jobs: %w", err)
	}
	var jobs []JobUsage
	for _, e := range ents {
		if !e.IsDir() || validJob(e.Name()) != nil {
			continue
		}
		dir := s.jobDir(e.Name())
		st, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("ckptstore: list jobs: %w", err)
		}
		n, err := bytesUnder(dir)
		if err != nil {
			return nil, fmt.Errorf("ckptstore: list jobs: %w", err)
		}
		jobs = append(jobs, JobUsage{Job: e.Name(), Bytes: n, LastChange: lastChange(dir, st.ModTime())})
	}
	return jobs, nil
}

// RemoveJob removes every checkpoint of job from the store, committed or not, with its
// temporary and spare files, and takes their bytes off the usage count: for a job that will
// neither write nor read here again. Like Prune, it first renames the job's directory out of
// sight, so that a crash midway leaves no half-removed checkpoint under the job's name; the
// next RemoveJob finishes such leftovers.
func (s *Store) RemoveJob(job string) error {
	if err := validJob(job); err != nil {
		return fmt.Errorf("ckptstore: remove job: %w", err)
	}
	l := s.lockFor(job)
	l.Lock()
	defer l.Unlock()
	var errs []error
	// Leftovers of removals a crash interrupted.
	if ents, err := os.ReadDir(s.root); err == nil {
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), trashPrefix) {
				errs = append(errs, os.RemoveAll(filepath.Join(s.root, e.Name())))
			}
		}
	}
	jobDir := s.jobDir(job)
	trash, err := os.MkdirTemp(s.root, trashPrefix+job+"-")
	if err != nil {
		return fmt.Errorf("ckptstore: remove job %s: %w", job, errors.Join(append(errs, err)...))
	}
	err = s.removeCounted(jobDir, func(dir string) error { return os.Rename(dir, filepath.Join(trash, job)) })
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // nothing of it here
	}
	if err == nil {
		err = syncDir(s.root)
	}
	errs = append(errs, err, os.RemoveAll(trash))
	s.forget(job, func(uint64) bool { return true })
	// A directory made again later must be made, and made durable, again.
	s.mu.Lock()
	for dir := range s.durable {
		if dir == jobDir || strings.HasPrefix(dir, jobDir+string(filepath.Separator)) {
			delete(s.durable, dir)
		}
	}
	s.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ckptstore: remove job %s: %w", job, err)
	}
	return nil
}

// lastChange returns the newest modification time of the checkpoint directories in the job
// directory dir, or dirTime (the directory's own) if there are none.
func lastChange(dir string, dirTime time.Time) time.Time {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return dirTime
	}
	var newest time.Time
	for _, e := range ents {
		if _, ok := parseSeqName(e.Name()); !ok || !e.IsDir() {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	if newest.IsZero() {
		return dirTime
	}
	return newest
}
