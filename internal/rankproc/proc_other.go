//go:build !unix

package rankproc

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func waitExited(int) bool { return false }

// signalGroup can only kill the rank itself on this platform.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if sig == 0 {
		return nil
	}
	return p.Kill()
}

func exitOf(st *os.ProcessState) Exit { return Exit{Code: st.ExitCode()} }
