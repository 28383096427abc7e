//go:build unix && !linux

package rankproc

import "syscall"

// sysProcAttr puts a rank in its own process group so it and its children can be signalled
// together, and a terminal's Ctrl-C reaches only mpirun.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// waitExited is not available here; the rank's group is then only killed on job stop.
func waitExited(int) bool { return false }
