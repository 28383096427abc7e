//go:build unix

package ckptstore

import (
	"errors"
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
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without flock (some network file systems): the count is kept
		// unlocked, and may be skewed by concurrent writers; Reserve recounts before it
		// refuses a piece.
		err = nil
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return countFile(fd), nil
}

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
