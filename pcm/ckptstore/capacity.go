package ckptstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// The store's bytes are counted, not measured: walking the store before every piece cost
// the ranks of a 4-rank job about a millisecond of CPU per checkpoint (docs/PERFORMANCE.md),
// and the receiving pcmd walked it again for every buddy copy. The count is
// in usageFile at the root, shared by every process that uses the store (the ranks of a
// node and its pcmd), and changed under an exclusive lock on that file (flock) by whoever
// adds or removes a piece or manifest, in the same locked step as the rename or removal
// itself. Temporary files of writes in progress are not counted (Reserve is asked before
// one starts), nor removed checkpoints awaiting deletion. A missing or unreadable count is
// set by a walk of the store (Recount), as is the count of a store that would refuse a
// piece, so that a count left wrong by a crash never refuses one wrongly; pcmd recounts its
// store when it starts.
const usageFile = ".usage"

// Usage returns the bytes of the pieces and manifests in the store, committed or not: the
// count kept as they are written and removed (a walk sets it first if there is none).
func (s *Store) Usage() (int64, error) {
	u, err := s.lockUsage()
	if err != nil {
		return 0, err
	}
	defer u.unlock()
	return u.get()
}

// Recount sets the store's byte count (Usage) from a walk of the store, and returns it.
func (s *Store) Recount() (int64, error) {
	u, err := s.lockUsage()
	if err != nil {
		return 0, err
	}
	defer u.unlock()
	return u.recount()
}

// Reserve checks that need more bytes fit under capacity (0: no cap), returning a
// *FullError if not. Concurrent writers may each pass: the cap bounds, it does not account.
func (s *Store) Reserve(need, capacity int64) error {
	if capacity <= 0 {
		return nil
	}
	u, err := s.lockUsage()
	if err != nil {
		// No count to use: measure.
		used, werr := bytesUnder(s.root)
		if werr != nil {
			return errors.Join(err, werr)
		}
		if used+need > capacity {
			return &FullError{Used: used, Need: need, Cap: capacity}
		}
		return nil
	}
	defer u.unlock()
	used, err := u.get()
	if err == nil && used+need > capacity {
		// Refuse only on a fresh count: a process killed between a removal and its
		// count leaves the count too high.
		used, err = u.recount()
	}
	if err != nil {
		return err
	}
	if used+need > capacity {
		return &FullError{Used: used, Need: need, Cap: capacity}
	}
	return nil
}

// usageLock is the locked count of a store's bytes.
type usageLock struct {
	s *Store
	f countFile
}

// lockUsage opens the store's count and locks it exclusively.
func (s *Store) lockUsage() (*usageLock, error) {
	f, err := openCount(filepath.Join(s.root, usageFile))
	if err != nil {
		return nil, fmt.Errorf("ckptstore: usage of %s: %w", s.root, err)
	}
	return &usageLock{s: s, f: f}, nil
}

// unlock releases the lock (closing the file does).
func (u *usageLock) unlock() { u.f.close() }

// get returns the count, setting it from a walk if there is none.
func (u *usageLock) get() (int64, error) {
	var b [8]byte
	if _, err := u.f.readAt(b[:], 0); err == nil {
		if n := int64(binary.LittleEndian.Uint64(b[:])); n >= 0 {
			return n, nil
		}
	} else if !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("ckptstore: usage of %s: %w", u.s.root, err)
	}
	return u.recount()
}

// add sets the count to n (as get returned it before the change) plus delta. A count that
// cannot be written is marked unknown, so that the next use walks the store; if even that
// fails, the count is off by delta until the next recount.
func (u *usageLock) add(n, delta int64) {
	if delta == 0 {
		return
	}
	if err := u.set(max(n+delta, 0)); err != nil {
		u.set(-1)
	}
}

func (u *usageLock) set(n int64) error {
	return u.f.writeAt(binary.LittleEndian.AppendUint64(nil, uint64(n)), 0)
}

// recount sets the count from a walk of the store.
func (u *usageLock) recount() (int64, error) {
	n, err := bytesUnder(u.s.root)
	if err != nil {
		return 0, fmt.Errorf("ckptstore: usage of %s: %w", u.s.root, err)
	}
	if err := u.set(max(n, 0)); err != nil {
		return 0, fmt.Errorf("ckptstore: usage of %s: %w", u.s.root, err)
	}
	return n, nil
}

// counted reports whether the usage count includes a store file of that name.
func counted(name string) bool {
	return name != usageFile && !isTemp(name) && !strings.HasPrefix(name, trashPrefix)
}

// bytesUnder returns the bytes of the counted files under dir: pieces and manifests, not
// temporary files, removed checkpoints or the count itself.
func bytesUnder(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if path != dir && !counted(d.Name()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

// sizeOf returns the size of the regular file at path, 0 if there is none.
func sizeOf(path string) int64 {
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() {
		return st.Size()
	}
	return 0
}

// renameCounted renames the temporary file tmp, of size bytes, to final, replacing any file
// there, and counts the difference.
func (s *Store) renameCounted(tmp, final string, size int64) error {
	u, err := s.lockUsage()
	if err != nil {
		// The store still takes the piece; Reserve measures while there is no count.
		return os.Rename(tmp, final)
	}
	defer u.unlock()
	used, err := u.get() // before the change, which a walk must not count twice
	if err != nil {
		return err
	}
	old := sizeOf(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	u.add(used, size-old)
	return nil
}

// removeCounted removes path, a counted file or a directory of them, with remove (which
// may rename it out of sight instead), and takes its bytes off the count.
func (s *Store) removeCounted(path string, remove func(string) error) error {
	u, err := s.lockUsage()
	if err != nil {
		return remove(path)
	}
	defer u.unlock()
	used, err := u.get()
	if err != nil {
		return err
	}
	var n int64
	if counted(filepath.Base(path)) {
		if n, err = bytesUnder(path); err != nil {
			return err
		}
	}
	if err := remove(path); err != nil {
		return err
	}
	u.add(used, -n)
	return nil
}
