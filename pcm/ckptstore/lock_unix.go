//go:build unix

package ckptstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile locks f exclusively (flock), against other processes too, until f is closed.
func lockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}
