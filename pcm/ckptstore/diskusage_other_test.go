//go:build !linux

package ckptstore

import "testing"

// diskBytes is not known on this system.
func diskBytes(*testing.T, string) (int64, bool) { return 0, false }
