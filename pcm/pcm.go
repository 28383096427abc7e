package pcm

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
	"github.com/mpios/mpios/profiler"
)

// Status says how a process began.
type Status int

const (
	// New: a fresh start; Load restores nothing.
	New Status = iota
	// Migrated: the process took over the rank of a process that migrated; Load restores
	// the state the predecessor handed over.
	Migrated
	// Restarted: the job was restarted from a checkpoint (Options.Restart); Load restores it.
	Restarted
	// Joined: the process joined a running job at a resize (a split); Load takes part in
	// the resize and restores the replicated values and this rank's distributed data.
	Joined
)

// String returns "new", "migrated" or "restarted".
func (s Status) String() string {
	switch s {
	case New:
		return "new"
	case Migrated:
		return "migrated"
	case Restarted:
		return "restarted"
	case Joined:
		return "joined"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Action tells the application what to do after Reconfigure.
type Action int

const (
	// Continue with the next iteration.
	Continue Action = iota
	// Leave: this process has handed its rank to a successor (migration): it must leave its
	// loop and end without touching the world again except to finalize (mpi.Finalize then
	// only releases resources).
	//
	// After a resize that merged this rank away, too: its data went to the ranks that stay.
	Leave
	// Resized: the world changed size at this boundary; World returns the new world, the
	// distributed data holds the new parts. Communicators derived from the old world fail
	// with mpi.ErrRevoked: re-create them from World. After a rebalance requested through
	// the launcher (pcmd resize with the job's own size and weights) the world stays, only
	// the distributed data's parts changed: take Local and Range again.
	Resized
)

// String returns "continue" or "leave".
func (a Action) String() string {
	switch a {
	case Continue:
		return "continue"
	case Leave:
		return "leave"
	case Resized:
		return "resized"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Process is one rank's handle on the PCM service. Its methods, except RequestCheckpoint, must
// be called from one goroutine.
type Process struct {
	world  *mpi.Comm
	opts   Options
	reg    *state.Registry
	store  *ckptstore.Store // nil unless checkpointing or restarting
	status Status
	leader bool                   // this rank commits and prunes for its store
	seq    uint64                 // number of the next checkpoint
	flight *flight                // the checkpoint in flight, if any
	snap   *ckptstore.PieceBuffer // the state copied at a checkpoint's boundary, reused; nil until needed
	// capture holds the values a checkpoint's background write reads (ChangedOnlyByFlip
	// blocks by reference), reused; snapRead is closed once that write has read them, nil
	// when nothing is pending (awaitSnapshot). copyAtBoundary turns the deferred read off.
	capture        *state.Capture
	snapRead       chan struct{}
	copyAtBoundary bool

	loaded   bool
	lastIter int  // the last iteration seen (Reconfigure or restored checkpoint)
	haveIter bool // lastIter is set
	restored ckptstore.Manifest

	want atomic.Bool // RequestCheckpoint was called since the last agreement

	launched *rewire.Launched // nil unless world is a launched process's world (mpi.Launched)
	// restartAuth speaks as a process of the job restarted from (Options.RestartSecret);
	// nil without that secret.
	restartAuth *ctlauth.JobChannel
	ctl         *control // the launcher's reconfiguration log; nil when not launched
	applied     uint64   // log entries acted upon
	left        bool     // Reconfigure returned Leave
	inherited   []byte   // hand-over state of a Migrated process, until Load
	storeID     [2]uint64
	prof        *profiler.JobProfiler // nil when not profiling
	total       int                   // planned iterations (SetIterations), 0 if unknown
	dist        distSet               // distributed objects (NewBlock)

	// Poll schedule of on-demand requests, in Reconfigure calls.
	calls, nextPoll int64
	pollEvery       int64
	callsAtSync     int64
	lastSyncEnd     time.Time
	lastSyncCost    time.Duration
	warnedOneNode   bool        // a one-node job was told its checkpoints have no buddy copy
	buddy           buddyChoice // the buddy node of this rank's checkpoint pieces, once chosen
}

// Init joins the job's PCM service with the configuration the launcher put in the environment
// (OptionsFromEnv). It is InitWith(world, options from the environment).
func Init(world *mpi.Comm) (*Process, error) {
	opts, err := OptionsFromEnv(nil)
	if err != nil {
		return nil, err
	}
	return InitWith(world, opts)
}

// InitWith joins the PCM service with explicit options instead of the MPIOS_ variables. When
// opts checkpoints or restarts, InitWith opens the checkpoint store and is collective over
// world (every rank must call it, with the same options); otherwise it does no
// communication.
func InitWith(world *mpi.Comm, opts Options) (*Process, error) {
	if world == nil {
		return nil, fmt.Errorf("pcm: init: nil communicator: %w", ErrConfig)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &Process{world: world, opts: opts, reg: state.NewRegistry(), seq: 1, nextPoll: 0, pollEvery: 1, applied: opts.ReconfBase}
	if opts.Restart != "" {
		p.status = Restarted
	}
	p.launched = mpi.Launched(world)
	if p.launched != nil {
		if in := p.launched.TakeInherited(); in != nil && in.Rank == world.Rank() {
			p.status, p.inherited = Migrated, in.State
		}
		if p.launched.Joined != 0 {
			p.status = Joined
		}
	}
	if p.launched != nil {
		var err error
		if p.restartAuth, err = restartChannel(opts, world.Rank(), time.Now()); err != nil {
			return nil, err
		}
	}
	if opts.PollEvery > 0 {
		p.pollEvery = int64(opts.PollEvery)
	}
	if opts.Control && p.launched != nil {
		var err error
		if p.ctl, err = startControl(p.launched, opts.Log); err != nil {
			return nil, err
		}
	}
	if p.ctl != nil && opts.ProfileEvery > 0 {
		p.startProfiler()
	}
	if !opts.usesStore() {
		return p, nil
	}
	if p.status == Migrated || p.status == Joined {
		// The other ranks are not here to agree: the store is opened alone and the
		// checkpoint numbering comes with the state.
		if err := p.openLocalStore(); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	}
	if err := p.openStore(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close finishes the checkpoint in flight, if there is one, and releases the process's
// subscriptions on the control plane (the connection is mpi's: mpi.Finalize closes it). The
// registered values are untouched.
//
// A checkpoint is committed a little after the boundary where it was taken (see
// Options.SyncCheckpoints). When one is still in flight, which is typical after a
// checkpoint at the last iteration, Close is collective: every rank must call it, after its
// last Reconfigure, and it waits until the checkpoint is committed. The error is a
// *CheckpointError if that checkpoint failed.
func (p *Process) Close() error {
	p.awaitSnapshot()
	var err error
	if p.flight != nil && !p.left {
		err = p.settle()
	}
	if p.store != nil && !p.left && p.world != nil {
		// The job ends: a memory store's spare piece files will not be reused.
		if derr := p.store.DropSpares(p.opts.JobID); derr != nil {
			fmt.Fprintf(p.opts.Log, "pcm: rank %d: warning: %v\n", p.world.Rank(), derr)
		}
	}
	if p.prof != nil {
		if err := p.prof.Close(); err != nil {
			fmt.Fprintf(p.opts.Log, "pcm: rank %d: profiler: %v\n", p.world.Rank(), err)
		}
		p.prof = nil
	}
	if p.ctl != nil {
		p.ctl.close()
		p.ctl = nil
	}
	return err
}

// Abandon gives up the checkpoint in flight, if any, without waiting: it is never committed,
// and a restart uses the one before. It is for error paths, where the other ranks may not
// reach Close: call it, then Close, which then only releases resources.
func (p *Process) Abandon() {
	if p.flight != nil {
		p.flight = nil
		// Its writer may still be reading the buffer: the next checkpoint gets a new one.
		p.snap, p.capture, p.snapRead = nil, nil, nil
	}
}

// openLocalStore opens the checkpoint store without agreeing with the other ranks.
func (p *Process) openLocalStore() error {
	store, err := ckptstore.Open(p.opts.Dir, p.storeOptions())
	if err != nil {
		return fmt.Errorf("pcm: init: checkpoint store: %w", err)
	}
	p.store, p.storeID = store, storeIdentity(store)
	return nil
}

// storeOptions configure the checkpoint store. CRC-32C (hardware-assisted, ~20 GB/s)
// rather than SHA-256 (~1.5 GB/s): the piece checksum guards against damage, not forgery,
// and it is computed on every checkpoint. The committing rank trusts the other ranks'
// checksums, which they computed while writing and every load verifies.
func (p *Process) storeOptions() *ckptstore.Options {
	return &ckptstore.Options{Node: p.opts.Node, Checksum: ckptstore.CRC32C, CommitSizeOnly: true}
}

// storeIdentity names a store: ranks with the same identity share it.
func storeIdentity(s *ckptstore.Store) [2]uint64 {
	h := sha256.Sum256([]byte(s.Node() + "\x00" + s.Dir()))
	return [2]uint64{binary.LittleEndian.Uint64(h[:]), binary.LittleEndian.Uint64(h[8:])}
}

// openStore opens the store on every rank and agrees on which rank commits for which store
// and on the number of the first checkpoint.
func (p *Process) openStore() error {
	// Per rank: store identity (2 words of a hash of node and directory), next free
	// checkpoint number, failure flag.
	local := make([]uint64, 4)
	store, err := ckptstore.Open(p.opts.Dir, p.storeOptions())
	if err == nil {
		id := storeIdentity(store)
		local[0], local[1] = id[0], id[1]
		if p.opts.checkpointing() {
			// Past every existing directory, committed or not: a number is never reused,
			// even if this job id was used before (PutPiece refuses committed ones).
			var seqs []uint64
			if seqs, err = listSeqs(store, p.opts.JobID); err == nil {
				local[2] = 1
				if len(seqs) > 0 {
					local[2] = slices.Max(seqs) + 1
				}
			}
		}
	}
	if err != nil {
		local[3] = 1
		err = fmt.Errorf("pcm: init: checkpoint store: %w", err)
	}
	n, rank := p.world.Size(), p.world.Rank()
	all := make([]uint64, 4*n)
	if cerr := mpi.Allgather(p.world, local, all); cerr != nil {
		return fmt.Errorf("pcm: init: %w", cerr)
	}
	if err != nil {
		return err
	}
	var failed []int
	for r := range n {
		if all[4*r+3] != 0 {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("pcm: init: checkpoint store unusable on rank(s) %v: %w", failed, ErrPeer)
	}
	for r := range n {
		p.seq = max(p.seq, all[4*r+2])
	}
	for r := range n {
		if all[4*r] == local[0] && all[4*r+1] == local[1] {
			p.leader = r == rank
			break
		}
	}
	p.store, p.storeID = store, [2]uint64{local[0], local[1]}
	return nil
}

// Register adds the value ptr points to to the process's state under name (see
// state.Registry.Register: numeric slices and scalars are saved raw, other values with
// msgpack). Every rank registers the same names in the same order, before Load.
func (p *Process) Register(name string, ptr any) error {
	if p.loaded {
		return fmt.Errorf("pcm: register %q after Load: the value would not be restored: %w", name, ErrCallOrder)
	}
	if err := p.reg.Register(name, ptr); err != nil {
		return fmt.Errorf("pcm: %w", err)
	}
	return nil
}

// Status says how this process began: New, Restarted or Migrated.
func (p *Process) Status() Status { return p.status }

// Restored returns the manifest of the checkpoint Load restored, and whether there is one.
func (p *Process) Restored() (ckptstore.Manifest, bool) {
	return p.restored, p.status == Restarted && p.loaded
}

// Load restores the registered values from the checkpoint this process restarts from (see
// Restart in the package documentation); for a New process it does nothing. Call it once,
// after registering everything and before the first Reconfigure. For a restarted process it is
// collective. On error the registered values may have been partly replaced: the application
// must not continue.
func (p *Process) Load() error {
	if p.loaded {
		return fmt.Errorf("pcm: Load called twice: %w", ErrCallOrder)
	}
	if p.status == Migrated {
		if err := p.loadInherited(); err != nil {
			return err
		}
	}
	if p.status == Joined {
		if err := p.join(); err != nil {
			return err
		}
	}
	if p.status == Restarted {
		m, err := p.restore()
		if err != nil {
			p.reportUnrestorable(err)
			return err
		}
		p.restored = m
		p.lastIter, p.haveIter = int(m.Iteration), true
		p.noteIteration(p.lastIter)
		p.reportRestored(m)
	}
	if p.opts.checkpointing() && !p.opts.SyncCheckpoints {
		// The memory of background checkpoints, allocated once, here rather than in the loop.
		p.snap = new(ckptstore.PieceBuffer)
		p.snap.Grow(p.snapshotSize())
	}
	p.loaded = true
	p.announceMalleable()
	p.lastSyncEnd = time.Now()
	p.annotate()
	return nil
}

// SetIterations tells PCM how many iterations the application plans in total (0: unknown).
// The IOS agents use it to weigh a migration's cost against the rank's remaining life.
func (p *Process) SetIterations(total int) {
	if total >= 0 {
		p.total = total
		p.annotate()
	}
}

// startProfiler publishes this rank's profile on the job's profile subject (best effort:
// a process that cannot profile still computes).
func (p *Process) startProfiler() {
	nc, auth, subj := p.ctl.nc, p.ctl.auth, job.ProfileSubject(p.opts.JobID)
	jp, err := profiler.StartJob(p.world, profiler.JobOptions{
		// Under the job key: the IOS agents act on profiles (a job's policy among them),
		// so a forged one must not count.
		Publish: func(data []byte) error {
			if auth != nil {
				var err error
				if data, err = auth.Wrap(subj, data, time.Now()); err != nil {
					return err
				}
			}
			return nc.Publish(subj, data)
		},
		JobID: p.opts.JobID, Node: p.opts.Node, Every: p.opts.ProfileEvery, Policy: p.opts.Policy,
	})
	if err != nil {
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: profiling off: %v\n", p.world.Rank(), err)
		return
	}
	p.prof = jp
}

func (p *Process) annotate() {
	if p.prof != nil && p.loaded {
		p.prof.Annotate(profiler.Annotation{StateBytes: p.reg.Size(), Iterations: p.total})
	}
}

// RequestCheckpoint asks for a checkpoint at the next on-demand agreement point (see
// Options.PollEvery). One rank asking suffices; every rank then checkpoints the same
// iteration. It may be called from any goroutine (a control-plane handler, a signal handler).
func (p *Process) RequestCheckpoint() error {
	if !p.opts.OnDemand {
		return ErrNotConfigured
	}
	p.want.Store(true)
	return nil
}

// Reconfigure is the reconfiguration point at an iteration boundary, where iter iterations
// have been completed (see Iteration semantics in the package documentation). It is
// collective: every rank calls it at the same boundaries with the same iter. It takes a
// checkpoint when one is due or was requested, and otherwise, on most calls, does no
// communication at all.
//
// Errors: a *CheckpointError (matching ErrCheckpointFailed) when a checkpoint was abandoned,
// which the application may ignore; an error matching mpi.ErrPending when nonblocking
// operations are pending (on this rank, or on another if the call was an agreement point);
// ErrIteration or ErrCallOrder on misuse; mpi errors when a peer fails.
func (p *Process) Reconfigure(iter int) (Action, error) {
	p.awaitSnapshot()
	if !p.loaded {
		return Continue, fmt.Errorf("pcm: Reconfigure(%d) before Load: %w", iter, ErrCallOrder)
	}
	if p.left {
		return Leave, fmt.Errorf("pcm: Reconfigure(%d) after Leave: this process handed its rank over: %w", iter, ErrCallOrder)
	}
	if p.haveIter && iter <= p.lastIter {
		if p.calls == 0 && p.status == Restarted {
			return Continue, fmt.Errorf("pcm: Reconfigure(%d) after restarting from iteration %d: the restored counter must count completed iterations, advance it before Reconfigure: %w",
				iter, p.lastIter, ErrIteration)
		}
		return Continue, fmt.Errorf("pcm: Reconfigure(%d) after Reconfigure(%d): iterations must increase: %w", iter, p.lastIter, ErrIteration)
	}
	p.lastIter, p.haveIter = iter, true
	p.prof.Iteration(iter)
	p.noteIteration(iter)
	pending := p.world.Pending()
	scheduled := p.opts.Every > 0 && iter%p.opts.Every == 0
	poll := (p.opts.OnDemand || p.ctl != nil || p.flight != nil) && p.calls >= p.nextPoll
	p.calls++
	if !scheduled && !poll {
		// The common path: no communication.
		if pending > 0 {
			return Continue, p.pendingError(iter, p.world.Rank(), pending)
		}
		return Continue, nil
	}
	return p.sync(iter, scheduled, pending)
}

func (p *Process) pendingError(iter, rank, n int) error {
	if rank == p.world.Rank() {
		return fmt.Errorf("pcm: Reconfigure(%d): %w: %d on this rank (complete them before the iteration boundary)", iter, mpi.ErrPending, n)
	}
	return fmt.Errorf("pcm: Reconfigure(%d): %w on rank %d", iter, mpi.ErrPending, rank)
}

// errorsAs is errors.As for a target type, returning the match.
func errorsAs[T error](err error) (T, bool) {
	var t T
	ok := errors.As(err, &t)
	return t, ok
}

// restartChannel returns the channel of rank as a process of the job opts restarts from,
// under that job's key (Options.RestartSecret); nil when opts restarts from no other job or
// carries no secret of it.
func restartChannel(opts Options, rank int, now time.Time) (*ctlauth.JobChannel, error) {
	if opts.Restart == "" || opts.Restart == opts.JobID || len(opts.RestartSecret) == 0 {
		return nil, nil
	}
	ch, err := ctlauth.NewJobChannel(opts.Restart, opts.RestartSecret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: rank}, now)
	if err != nil {
		return nil, fmt.Errorf("pcm: %s: %w", job.EnvRestartSecret, err)
	}
	return ch, nil
}
