//go:build unix

package ckptstore

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestTryLockExcludesUntilUnlock: a held lock refuses another taker at once, with
// ErrLocked, and is free again once unlocked.
func TestTryLockExcludesUntilUnlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owner")
	l, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := TryLock(path); !errors.Is(err, ErrLocked) {
		if l2 != nil {
			l2.Unlock()
		}
		t.Fatalf("second TryLock while held: %v; want ErrLocked", err)
	}
	l.Unlock()
	l, err = TryLock(path)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	l.Unlock()
}
