package mpi

// Pending returns the number of this process's nonblocking operations (Isend, Irecv,
// nonblocking collectives, and messages taken by Mprobe and not yet received) that have not
// completed yet, on any communicator of the process, not only c. Layers that need a quiescent
// process, such as the reconfiguration points of package pcm, check it before saving state.
// It returns 0 for a nil communicator.
func (c *Comm) Pending() int {
	if c == nil || c.e == nil {
		return 0
	}
	return c.e.pending()
}
