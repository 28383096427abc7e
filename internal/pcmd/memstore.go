package pcmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mpios/mpios/pcm/ckptstore"
)

// Checkpoint store kinds (Config.CkptStore, pcmd serve --ckpt-store).
const (
	StoreDisk = "disk" // pieces under --store, on disk
	StoreMem  = "mem"  // pieces in memory, for as long as pcmd runs
)

// DefaultMemCap is the default cap of a memory store (Config.CkptMemCap).
const DefaultMemCap = 4 << 30

// memRoot is where memory stores live: a tmpfs, whose files are pages of memory. The
// store's format, checks and piece transfers are thus the disk store's, one implementation,
// without a disk under them (fsync returns at once).
const memRoot = "/dev/shm"

// A memory store is the directory memRoot/mpios-ckpt-NODE-RANDOM. Its pcmd holds an
// exclusive flock on the store's ownerFile for its whole life: the kernel drops the lock
// when the process dies, however it dies (SIGKILL, a crash), so a store whose lock can be
// taken belongs to nobody and its pages can be reclaimed (reclaimMemStores). A store is
// created under memTempPrefix, locked, then renamed into place: a store under its final
// name is always locked by its live owner or not at all.
const (
	memPrefix     = "mpios-ckpt-"
	memTempPrefix = "." + memPrefix
	ownerFile     = ".owner"
)

// reclaimAge is how long nothing in a store must have changed for it to be reclaimed
// without a lock to take: one under its temporary name (its pcmd may still be creating it)
// or one with no ownerFile (made by a pcmd from before the owner lock, which may still run).
const reclaimAge = time.Minute

// memStore is this pcmd's memory store, locked for as long as it runs.
type memStore struct {
	dir   string
	owner *ckptstore.FileLock
}

// openMemStore creates and locks the directory of node's memory store, checking that it is
// memory indeed. close removes it.
func openMemStore(node string) (*memStore, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(memRoot, &st); err != nil {
		return nil, fmt.Errorf("pcmd: --ckpt-store mem: %s: %w", memRoot, err)
	}
	if int64(st.Type) != unix.TMPFS_MAGIC {
		return nil, fmt.Errorf("pcmd: --ckpt-store mem: %s is not a tmpfs (memory file system): keep the pieces on disk with --store", memRoot)
	}
	m, err := createMemStore(memRoot, node)
	if err != nil {
		return nil, fmt.Errorf("pcmd: --ckpt-store mem: %w", err)
	}
	return m, nil
}

// createMemStore creates node's store under root: a temporary directory, locked, renamed to
// its final name without replacing anything.
func createMemStore(root, node string) (*memStore, error) {
	for {
		tmp, err := os.MkdirTemp(root, memTempPrefix+node+"-")
		if err != nil {
			return nil, err
		}
		owner, err := ckptstore.TryLock(filepath.Join(tmp, ownerFile))
		if err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		dir := filepath.Join(root, strings.TrimPrefix(filepath.Base(tmp), "."))
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
		if err == nil {
			return &memStore{dir: dir, owner: owner}, nil
		}
		owner.Unlock()
		os.RemoveAll(tmp)
		if !errors.Is(err, unix.EEXIST) {
			return nil, &os.LinkError{Op: "rename", Old: tmp, New: dir, Err: err}
		}
		// Another store took that name meanwhile: another random one.
	}
}

// close removes the store, then lets go of it.
func (m *memStore) close() error {
	err := os.RemoveAll(m.dir)
	m.owner.Unlock()
	return err
}

// reclaimMemStores removes from root the memory stores of this user whose pcmd is gone:
// those whose owner lock can be taken, and those without a lock (temporary or from an
// older pcmd) in which nothing changed for reclaimAge before now. The stores of live pcmds
// (other nodes emulated on this machine, a pcmd being started) stay. It returns the
// directories removed and the bytes of memory they held, and what it could not remove.
func reclaimMemStores(root string, now time.Time) (dirs []string, bytes int64, err error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, 0, err
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		temp := strings.HasPrefix(name, memTempPrefix)
		if !e.IsDir() || !temp && !strings.HasPrefix(name, memPrefix) {
			continue // symbolic links too: never followed
		}
		dir := filepath.Join(root, name)
		n, done, err := reclaimMemStore(dir, temp, now)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			dirs = append(dirs, dir)
			bytes += n
		}
	}
	return dirs, bytes, errors.Join(errs...)
}

// reclaimMemStore removes the store at dir if its pcmd is gone (see reclaimMemStores),
// returning the bytes it held and whether it removed it.
func reclaimMemStore(dir string, temp bool, now time.Time) (int64, bool, error) {
	info, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = nil // reclaimed by another pcmd meanwhile
		}
		return 0, false, err
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() || !info.IsDir() {
		return 0, false, nil // another user's: not ours to judge
	}
	lock := filepath.Join(dir, ownerFile)
	_, err = os.Lstat(lock)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, false, err
	}
	if (temp || err != nil) && !idle(dir, now) {
		return 0, false, nil // being created, or an older pcmd's (no lock) maybe in use
	}
	if err == nil {
		owner, err := ckptstore.TryLock(lock)
		if errors.Is(err, ckptstore.ErrLocked) {
			return 0, false, nil // its pcmd lives
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = nil // reclaimed by another pcmd meanwhile
			}
			return 0, false, err
		}
		defer owner.Unlock()
	}
	n := allocatedUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		return 0, false, fmt.Errorf("reclaim %s: %w", dir, err)
	}
	return n, true, nil
}

// idle reports whether nothing under dir, itself included, was modified for reclaimAge
// before now.
func idle(dir string, now time.Time) bool {
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed meanwhile, or unreadable: no sign of use
		}
		if info, err := d.Info(); err == nil && now.Sub(info.ModTime()) < reclaimAge {
			return errInUse
		}
		return nil
	})
	return err == nil
}

// errInUse stops idle's walk at the first recent change.
var errInUse = errors.New("modified recently")

// allocatedUnder returns the bytes allocated to the files under dir: on a tmpfs, the memory
// they hold (holes hold none).
func allocatedUnder(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed meanwhile, or unreadable: counted as nothing
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// checkStoreConfig checks the checkpoint store settings of c.
func (c *Config) checkStoreConfig() error {
	switch c.CkptStore {
	case "", StoreDisk:
		c.CkptStore = StoreDisk
		if c.CkptMemCap != 0 {
			return errors.New("pcmd: --ckpt-mem-cap applies to --ckpt-store mem only")
		}
	case StoreMem:
		if c.Store != "" {
			return errors.New("pcmd: --ckpt-store mem keeps the pieces in memory: give no --store")
		}
		if c.CkptMemCap < 0 {
			return fmt.Errorf("pcmd: --ckpt-mem-cap %d: want a positive number of bytes", c.CkptMemCap)
		}
		if c.CkptMemCap == 0 {
			c.CkptMemCap = DefaultMemCap
		}
	default:
		return fmt.Errorf("pcmd: --ckpt-store %q: want %s or %s", c.CkptStore, StoreDisk, StoreMem)
	}
	return nil
}
