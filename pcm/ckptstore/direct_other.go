//go:build !linux

package ckptstore

import "os"

// setDirect reports that direct I/O is not used on this system: it cannot be turned on, and
// is always off.
func setDirect(_ *os.File, on bool) bool { return !on }
