// Package mpi is the message-passing interface of mpios: MPI's model and calls, in Go, for
// iterative SPMD programs whose ranks may be checkpointed, migrated and resized while a job
// runs.
//
// A program calls Init, which returns the world communicator (every rank of the job, or a
// single rank when the program was not started by mpirun), communicates, and calls Finalize:
//
//	world, err := mpi.Init()
//	...
//	err = mpi.Allreduce(world, local, global, mpi.Sum)
//	...
//	err = mpi.Finalize()
//
// Messages are slices of fixed-size numbers (the Elem set), sent as raw bytes without
// per-element encoding; SendValue and RecvValue carry any other Go value. Point-to-point calls
// (Send, Recv, Isend, Irecv, Sendrecv, Probe) match by source, tag and communicator as in MPI;
// collectives (Barrier, Bcast, Reduce, Allreduce, Gather, Scatter, Allgather, Alltoall, their
// vector forms, Scan, Exscan, ReduceScatter and the nonblocking Ibarrier, Ibcast, Ireduce,
// Iallreduce, Iallgather, Ialltoall) are called by every rank of a communicator in the same
// order. Split and Dup make new communicators. Reductions combine with an Op: the predefined
// arithmetic, logical, bitwise and location operations, or one made with NewOp; their results
// are bitwise reproducible. "In place" (MPI_IN_PLACE) is expressed by passing overlapping
// slices, where a call's documentation allows it.
//
// Every call returns an error; callers branch with errors.Is on the sentinels (ErrCount,
// ErrTruncate, ErrProcFailed, ...) or errors.As on the typed errors (*TruncationError,
// *ProcFailedError, ...). A rank that dies makes the calls waiting on it fail within a bounded
// time instead of hanging. SetInterceptor installs a profiler that sees every call, as MPI's
// PMPI layer does.
//
// Ranks can also run as goroutines of one process over an in-process transport (Attach,
// Detach), which is how this package's examples and tests run; under mpirun each rank is a
// process and the code is the same. docs/api.md in the repository lists every call with the
// MPI function it corresponds to.
package mpi
