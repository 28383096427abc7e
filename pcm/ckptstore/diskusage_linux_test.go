package ckptstore

import (
	"syscall"
	"testing"
)

// diskBytes returns the bytes the file at path occupies on disk.
func diskBytes(t *testing.T, path string) (int64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512, true
}
