package pcmd

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
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

// openMemStore creates the directory of node's memory store, checking that it is memory
// indeed. pcmd removes it when it stops.
func openMemStore(node string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(memRoot, &st); err != nil {
		return "", fmt.Errorf("pcmd: --ckpt-store mem: %s: %w", memRoot, err)
	}
	if int64(st.Type) != unix.TMPFS_MAGIC {
		return "", fmt.Errorf("pcmd: --ckpt-store mem: %s is not a tmpfs (memory file system): keep the pieces on disk with --store", memRoot)
	}
	dir, err := os.MkdirTemp(memRoot, "mpios-ckpt-"+node+"-")
	if err != nil {
		return "", fmt.Errorf("pcmd: --ckpt-store mem: %w", err)
	}
	return dir, nil
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
