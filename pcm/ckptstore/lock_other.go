//go:build !unix

package ckptstore

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// countFile is the store's open usageFile. Without flock it is not locked: processes
// sharing a store may then skew its byte count, which Reserve recounts before it refuses a
// piece.
type countFile struct{ f *os.File }

func openCount(path string) (countFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	return countFile{f}, err
}

func (f countFile) readAt(b []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(b, off)
	if err == io.EOF {
		err = io.EOF
	}
	return n, err
}

func (f countFile) writeAt(b []byte, off int64) error {
	_, err := f.f.WriteAt(b, off)
	return err
}

func (f countFile) close() { f.f.Close() }

// TryLock cannot lock without flock: it fails with errors.ErrUnsupported.
func TryLock(path string) (*FileLock, error) {
	return nil, fmt.Errorf("ckptstore: lock %s: %w", path, errors.ErrUnsupported)
}

// Unlock does nothing: no FileLock is ever taken on this system.
func (l *FileLock) Unlock() {}
