//go:build unix

package rankproc

import (
	"errors"
	"os"
	"syscall"
)

// signalGroup signals the process group led by p; an already empty group is not an error.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func exitOf(st *os.ProcessState) Exit {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: st.ExitCode()}
}
