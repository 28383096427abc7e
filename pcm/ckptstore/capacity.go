package ckptstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// ErrFull is matched by every *FullError.
var ErrFull = errors.New("checkpoint store full")

// FullError reports a piece refused because the store would exceed its capacity (a memory
// store's cap, pcmd serve --ckpt-mem-cap).
type FullError struct {
	Used, Need, Cap int64 // bytes in the store, bytes the piece needs, the cap
}

// Error says how full the store is and what the piece needs.
func (e *FullError) Error() string {
	return fmt.Sprintf("ckptstore: store full: %d MiB of its %d MiB cap in use, a piece needs %d MiB more",
		e.Used>>20, e.Cap>>20, (e.Need+(1<<20)-1)>>20)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Usage returns the bytes of the files under the store's root: every piece, manifest and
// leftover, committed or not.
func (s *Store) Usage() (int64, error) {
	var n int64
	err := filepath.WalkDir(s.root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by a concurrent prune
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("ckptstore: usage of %s: %w", s.root, err)
	}
	return n, nil
}

// Reserve checks that need more bytes fit under capacity (0: no cap), returning a
// *FullError if not. Concurrent writers may each pass: the cap bounds, it does not account.
func (s *Store) Reserve(need, capacity int64) error {
	if capacity <= 0 {
		return nil
	}
	used, err := s.Usage()
	if err != nil {
		return err
	}
	if used+need > capacity {
		return &FullError{Used: used, Need: need, Cap: capacity}
	}
	return nil
}
