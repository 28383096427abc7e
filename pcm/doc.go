// Package pcm is Process Checkpointing and Migration: the MPI/IOS library that lets an
// iterative MPI application be checkpointed, restarted, and migrated rank by rank between
// nodes while it runs.
//
// PCM is semi-transparent: instead of saving a process image, the application registers the
// data structures that make up its state (Register), and PCM saves and restores exactly those
// (see package pcm/state for how values are encoded). Reconfiguration happens only at
// iteration boundaries, where the application calls Reconfigure; between two calls PCM does
// nothing, so it never interrupts communication.
//
// # Use
//
//	p, err := pcm.Init(world)     // join the job's PCM service (configured by the launcher)
//	p.Register("u", &u)           // the state: any value, by pointer
//	p.Register("iter", &iter)     // including the iteration counter
//	err = p.Load()                // restore the state if this process was restarted
//	for iter < T {
//		step()
//		iter++                    // iter now counts the completed iterations
//		act, err := p.Reconfigure(iter)
//		if act == pcm.Leave { return nil }
//	}
//
// # Iteration semantics
//
// A checkpoint taken in Reconfigure(iter) holds the registered values exactly as they are at
// that call, and Load puts them back exactly so: a restarted process continues as if that
// Reconfigure call had just returned. The one rule is therefore that the registered counter
// must already count the iteration that has just finished when Reconfigure is called (advance
// it before the call, as above, not in a for statement's post clause after it); then the
// restored counter is the index of the next iteration to run and the loop simply goes on.
// Reconfigure's argument is that same count of completed iterations. It must increase from
// call to call, and after a restart it must exceed the checkpoint's iteration, so a loop that
// would repeat the checkpointed iteration fails with ErrIteration instead of silently
// computing a different result.
//
// # Checkpoints
//
// Reconfigure is collective: every rank of the world calls it at the same iteration
// boundaries with the same iteration. A checkpoint is taken when it is due on the schedule
// (Options.Every: the completed iteration count is a multiple of K) or when some rank asked
// for one with RequestCheckpoint (or pcmd checkpoint). At that boundary every rank copies its
// registered state (its serialized registry) into memory, which takes milliseconds, and goes
// on computing while a goroutine writes the copy to the checkpoint store (package
// pcm/ckptstore) and makes it durable. At a later agreement point, once every rank's piece is
// durable, the ranks exchange the results and one rank per store commits the manifest and
// prunes old checkpoints (Options.Keep), again in the background; a checkpoint is therefore
// committed a few agreement points after its boundary, and only if every piece is durable.
// While pieces are being written the ranks agree at least every 50 ms, so the commit follows
// the last durable piece closely, whatever the ordinary schedule below.
// At most one checkpoint is in flight: the next one, a migration, and Close first finish it.
// Close is collective when a checkpoint is in flight (typically after the last iteration);
// on an error path, where the other ranks may not reach Close, call Abandon first.
// Options.SyncCheckpoints (MPIOS_CKPT_SYNC=1, mpirun --ckpt-sync) instead writes and commits
// at the boundary itself, straight from the registered values: no second copy of the state
// in memory, but the job waits for the disk.
//
// If any rank fails to write, the checkpoint is abandoned by all ranks (no manifest) and
// Reconfigure (or Close) returns a *CheckpointError on every rank, naming the checkpoint's
// iteration; the application may ignore it and go on, the next checkpoint will be tried as
// scheduled.
//
// Reconfigure must be cheap when nothing is due: the scheduled checkpoints are a pure function
// of the iteration, so no agreement is needed for them, and on-demand requests are agreed
// (one small Allreduce) only every M calls (Options.PollEvery; by default M adapts so that the
// agreement costs about 0.2% of the run time). Other calls do no communication at all. Every
// call checks that the process has no nonblocking operations pending (an error wrapping
// mpi.ErrPending): their buffers are not part of any consistent state.
//
// # Restart
//
// A process started with Options.Restart (MPIOS_RESTART) set to a job id has Status
// Restarted. Load then restores the newest checkpoint of that job that every rank can read
// and verify, falling back to older ones and reporting why on Options.Log ("pcm: checkpoint 7
// rank 2: checksum mismatch, falling back to checkpoint 6"). The world may have another size
// than the checkpointed one if the distributed data is in blocks (NewBlock): each rank then
// reads its new rows from the old pieces that hold them. Without blocks the sizes must agree
// (*SizeMismatchError otherwise). The restarted job writes its own
// checkpoints under its own job id, which may differ from the one it restarted from.
//
// # Environment
//
// Init reads its configuration from the environment the launcher passes to every rank
// (see OptionsFromEnv); InitWith takes explicit Options instead.
//
//	MPIOS_JOB_ID      job id the checkpoints are stored under (a singleton: its program name)
//	MPIOS_CKPT_EVERY  checkpoint every K iterations; 0: on demand only; unset: checkpointing off
//	MPIOS_CKPT_DIR    store root; default $XDG_STATE_HOME/mpios/ckpt or ~/.local/state/mpios/ckpt
//	MPIOS_CKPT_KEEP   committed checkpoints kept per job; default 2
//	MPIOS_CKPT_POLL   agree on on-demand requests every M iterations; 0 (default): adaptive
//	MPIOS_CKPT_SYNC   1: write and commit checkpoints at the boundary (default: in the background)
//	MPIOS_RESTART     job id to restart from; unset: a new run
//	MPIOS_RECONF_BASE set by mpirun for ranks it restarts to recover the job: log entries of the failed run, not acted on
//
// # Migration
//
// A migration order (pcmd migrate, or an IOS agent's decision) reaches the ranks through
// mpirun's reconfiguration log and is agreed at an agreement point like an on-demand
// request. The migrating rank streams its registered state straight to its successor, which
// mpirun started on the target node; Reconfigure returns Leave to the old process, which must
// return from its loop, and the successor starts with Status Migrated, Load restoring the
// state it was handed. See docs/migration.md.
//
// # Distributed data and malleability
//
// A Block (NewBlock) is a distributed array that pcm owns: rows split over the ranks in
// contiguous blocks, checkpointed with their global layout, restartable into another number
// of ranks, and moved between ranks by Rebalance (new shares by weight) and when the job is
// resized. Malleable (RegisterMalleable) lets pcm redistribute an application's own
// structures the same way. Package redist holds the planners (Desell's thesis, algorithms
// 1–4). See docs/malleability.md.
package pcm
