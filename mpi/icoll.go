package mpi

// Nonblocking collectives (MPI_Ibarrier, MPI_Ibcast, ...).
//
// Each runs the algorithm of its blocking counterpart on a goroutine of its own and completes
// its Request when that returns; the caller overlaps the collective with computation (a
// pipelined solver's global reduction with its matrix-vector product) and completes the
// Request with Wait, Test, WaitAll, WaitAny or the other completion calls.
//
// Collectives on a communicator must run in the order they were started, on every rank, or
// the messages of two of them would meet. So a nonblocking collective first waits for the one
// started before it on the same communicator, and a blocking collective waits for every
// nonblocking one started before it (one atomic load when there is none). Work that should run
// concurrently with a collective belongs on another communicator (Dup).

// afterNonblocking waits until the nonblocking collectives started on c have completed.
func (c *Comm) afterNonblocking() {
	if c == nil {
		return
	}
	if last := c.lastNonblocking.Load(); last != nil {
		<-*last
	}
}

// startCollective runs fn on a goroutine once the nonblocking collectives started before it
// on c have completed, and returns the Request that completes with fn's error.
func (c *Comm) startCollective(fn func() error) *Request {
	r := &Request{comm: c, from: AnySource}
	finished := make(chan struct{})
	prev := c.lastNonblocking.Swap(&finished)
	c.e.nonblockingColls.Add(1)
	go func() {
		defer close(finished)
		if prev != nil {
			<-*prev
		}
		err := fn()
		c.e.nonblockingColls.Add(-1)
		r.complete(Status{Source: ProcNull, Tag: AnyTag}, err)
	}()
	return r
}

// Ibarrier starts a Barrier: the Request completes once every rank of c has started it.
func (c *Comm) Ibarrier() (r *Request, err error) {
	if t := observe("Ibarrier"); t != nil {
		defer func() { t.done(c, -1, 0, err) }()
	}
	if err := c.valid("Ibarrier"); err != nil {
		return nil, err
	}
	return c.startCollective(c.barrierImpl), nil
}

// Ibcast starts a Bcast of buf from root. buf must not be used until the Request completes.
func Ibcast[T Elem](c *Comm, buf []T, root int) (r *Request, err error) {
	if t := observe("Ibcast"); t != nil {
		defer func() { t.done(c, -1, len(buf)*sizeOf[T](), err) }()
	}
	if err := c.valid("Ibcast"); err != nil {
		return nil, err
	}
	return c.startCollective(func() error { return bcastImpl(c, buf, root) }), nil
}

// Ireduce starts a Reduce. send and recv must not be used until the Request completes.
func Ireduce[T Number](c *Comm, send, recv []T, op Op, root int) (r *Request, err error) {
	if t := observe("Ireduce"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("Ireduce"); err != nil {
		return nil, err
	}
	return c.startCollective(func() error { return reduceImpl(c, send, recv, op, root) }), nil
}

// Iallreduce starts an Allreduce; its result is bitwise the same as Allreduce's. send and recv
// must not be used until the Request completes.
func Iallreduce[T Number](c *Comm, send, recv []T, op Op) (r *Request, err error) {
	if t := observe("Iallreduce"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("Iallreduce"); err != nil {
		return nil, err
	}
	return c.startCollective(func() error { return allreduceImpl(c, send, recv, op) }), nil
}

// Iallgather starts an Allgather. send and recv must not be used until the Request completes.
func Iallgather[T Elem](c *Comm, send, recv []T) (r *Request, err error) {
	if t := observe("Iallgather"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("Iallgather"); err != nil {
		return nil, err
	}
	return c.startCollective(func() error { return allgatherImpl(c, send, recv) }), nil
}

// Ialltoall starts an Alltoall. send and recv must not be used until the Request completes.
func Ialltoall[T Elem](c *Comm, send, recv []T) (r *Request, err error) {
	if t := observe("Ialltoall"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("Ialltoall"); err != nil {
		return nil, err
	}
	return c.startCollective(func() error { return alltoallImpl(c, send, recv) }), nil
}
