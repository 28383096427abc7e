//go:build linux

package testbed

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machineLock is the file lock that lets one isolated testbed at a time own the bridge,
// the subnet and the mpios-* names of a machine.
type machineLock struct{ f *os.File }

// acquireLock waits for the machine-wide testbed lock until ctx is done.
func acquireLock(ctx context.Context, logger *log.Logger) (*machineLock, error) {
	path := lockPath()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testbed: lock %s: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("testbed: lock %s: %w", path, err)
		}
		if !told {
			holder, _ := os.ReadFile(path)
			logger.Printf("waiting for the testbed of pid %s to finish (lock %s)", strings.TrimSpace(string(holder)), path)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testbed: waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &machineLock{f: f}, nil
}

// lockPath is the machine-wide lock file: in /run, which every root process shares whatever
// its TMPDIR, else in the temporary directory.
func lockPath() string {
	if st, err := os.Stat("/run"); err == nil && st.IsDir() && syscall.Access("/run", 2) == nil {
		return filepath.Join("/run", lockFileName)
	}
	return filepath.Join(os.TempDir(), lockFileName)
}

func (l *machineLock) release() {
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}

// setDeathSignal makes the kernel send sig to cmd's process when this process dies, so a
// crashed testbed does not leave nodes running.
func setDeathSignal(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}

// Cleanup removes what a crashed isolated testbed left behind: the mpios-* network
// namespaces (killing their processes), the mpios-* links in this namespace (veths and the
// bridge) and the mpios cgroups (killing their processes). It waits, until ctx is done, for
// a running testbed to finish first, so it never tears down a live cluster; a cluster of
// this process must be closed before (or Cleanup waits for ctx). Start does the same
// cleanup itself. Without root or cgroups there is nothing to clean and it returns nil.
func Cleanup(ctx context.Context, logger *log.Logger) error {
	if logger == nil {
		logger = log.New(os.Stderr, "testbed: ", log.LstdFlags)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	lock, err := acquireLock(ctx, logger)
	if err != nil {
		return err
	}
	defer lock.release()
	fs, _ := detectCgroups()
	return cleanupLocked(logger, fs)
}

// cleanupLocked is Cleanup with the lock held; fs may be nil (no cgroups).
func cleanupLocked(logger *log.Logger, fs *cgroupFS) error {
	var removed []string
	var errs []error
	if _, err := exec.LookPath("ip"); err == nil {
		r, err := cleanupNetwork()
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	if fs != nil {
		r, err := cleanupCgroups(fs)
		for _, d := range r {
			removed = append(removed, "cgroup "+d)
		}
		errs = append(errs, err)
	}
	if len(removed) > 0 {
		logger.Printf("removed leftovers of an earlier run: %s", strings.Join(removed, ", "))
	}
	return errors.Join(errs...)
}
