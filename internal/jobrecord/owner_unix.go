//go:build unix

package jobrecord

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwner fails unless fi belongs to the current user.
func checkOwner(fi os.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("owned by uid %d, not by us", st.Uid)
	}
	return nil
}
