// Package profiler is the application-level profiling component of MPI/IOS: a PMPI-style
// interceptor (mpi.Interceptor) that records, per rank, what the IOS decision policies need:
// the weighted communication graph (messages and bytes per peer), per-call statistics, the
// split between time inside mpi calls (communication) and outside them (computation), and
// iteration times.
//
// One Profiler serves one job in one process. With mpirun each process hosts one rank; in
// goroutine-rank tests every rank of a world shares the process-wide interceptor, so events
// are attributed to ranks through the communicator they carry and kept in per-rank shards.
//
// Iteration boundaries are not visible to mpi: the checkpointing layer (pcm) reports them with
// Iteration. Snapshot returns plain RankProfile values for pcmd and the IOS agent; WriteJSONL
// and Reporter publish them periodically through a Sink.
//
// StartJob is what a rank under mpirun uses: it installs the process's profiler, and its
// JobProfiler publishes the rank's profile (JSON, with the rank's pid, its job's policy, its
// state size and planned iterations) every period to the IOS agent of the rank's node.
//
// What mpi reports (see mpi.CallEvent) and how it is counted:
//   - Sendrecv reports its send half (Peer, Bytes) and its receive half (RecvPeer, RecvBytes).
//   - WaitAll reports one Wait per request, each with its communicator, peer and size.
//   - Events without a communicator (none today) are attributed to the only rank the profiler
//     knows (the normal one-rank-per-process case) and dropped (Dropped) when it knows several.
//   - A receive completed by Wait is counted when it carried at least one byte: a Wait on a
//     send request reports 0 bytes and cannot otherwise be told apart from an empty receive.
package profiler
