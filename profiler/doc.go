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
// Limits imposed by what mpi reports (see mpi.CallEvent):
//   - Sendrecv reports only its send side: its receive counts as a received message of
//     unknown source and size (RankProfile.ReceivedMessages), not in Received.
//   - SendValue reports 0 bytes: its messages are counted, its bytes are not.
//   - WaitAll reports no communicator and no bytes; Wait on an eager send request reports no
//     communicator. Such events are attributed to the only rank the profiler knows (the
//     normal one-rank-per-process case) and dropped (Dropped) when it knows several.
//   - A receive completed by Wait is counted when it carried at least one byte: a Wait on a
//     send request reports 0 bytes and cannot otherwise be told apart from an empty receive.
package profiler
