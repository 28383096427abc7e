package nodeclient

import "github.com/mpios/mpios/internal/rankproc"

// Finished returns the channel closed when p, a process of a Remote, has ended.
func Finished(p rankproc.Process) <-chan struct{} { return p.(*remoteProcess).done }
