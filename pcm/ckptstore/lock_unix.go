//go:build unix

package ckptstore

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// countFile is the store's open, locked usageFile. It is a bare descriptor: the count is
// read and written several times per checkpoint, and an os.File's set-up (poller,
// finalizer) cost as much as the system calls.
type countFile int

// openCount opens (creating it) and locks the count at path exclusively (flock, which
// excludes other processes and other openings in this one) until close, where the file
// system allows.
func openCount(path string) (countFile, error) {
	fd, err := lockFile(path, true)
	if errors.Is(err, errNoFlock) {
		// A file system without flock (some network file systems): the count is kept
		// unlocked, and may be skewed by concurrent writers; Reserve recounts before it
		// refuses a piece.
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return -1, err
	}
	return countFile(fd), nil
}

// errNoFlock: the file system does not support flock.
var errNoFlock = errors.New("file system without flock")

// lockFile opens (creating it) the file at path and locks it exclusively with flock:
// against other processes and other openings in this one, until the descriptor is closed
// or its process dies, however it dies (the kernel drops the lock). If wait is false and
// another holder has it, it fails with ErrLocked at once. errNoFlock if the file system
// cannot lock.
func lockFile(path string, wait bool) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		err = unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		err = ErrLocked
	case errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		err = errNoFlock
	}
	unix.Close(fd)
	return -1, err
}

// TryLock opens (creating it) the file at path and locks it exclusively, failing with
// ErrLocked if another process, or another opening in this one, holds it. The lock lasts
// until Unlock or the holder's death, however it dies: a lock that can be taken means its
// last holder is gone.
func TryLock(path string) (*FileLock, error) {
	fd, err := lockFile(path, false)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: lock %s: %w", path, err)
	}
	return &FileLock{fd: fd}, nil
}

// Unlock releases the lock. The file stays.
func (l *FileLock) Unlock() { unix.Close(l.fd) }

// readAt reads len(b) bytes at off; io.EOF if the file is shorter.
func (f countFile) readAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(f), b, off)
	if err == nil && n < len(b) {
		err = io.EOF
	}
	return n, err
}

func (f countFile) writeAt(b []byte, off int64) error {
	n, err := unix.Pwrite(int(f), b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// close unlocks.
func (f countFile) close() { unix.Close(int(f)) }
