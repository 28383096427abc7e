package ckptstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// setDirect turns direct I/O (O_DIRECT) on or off for f and reports whether it is now in
// that state. Turning it on fails on file systems that do not take it.
func setDirect(f *os.File, on bool) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	if cerr := rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		if on {
			flags |= unix.O_DIRECT
		} else {
			flags &^= unix.O_DIRECT
		}
		_, err = unix.FcntlInt(fd, unix.F_SETFL, flags)
		ok = err == nil
	}); cerr != nil {
		return false
	}
	return ok
}
