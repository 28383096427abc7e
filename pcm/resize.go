package pcm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rankreconf"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/mpios/mpios/mpi"
	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// A resize at an agreement point (split or merge, Desell's thesis §2.1.2) is the plan
// rankreconf.Decide made (rankreconf.Resize); this file gives it its effects. Every process
// of the new world says hello to the launcher and gets the new world's address table
// (rewire.AskResizeTable); the new world is connected beside the old one (mpi.ListenResize,
// Build); the old one is quiesced (mpi.Quiesce); the distributed data moves (resizeData):
// over the new world for a grow, the old one for a shrink; the processes exchange their
// outcomes (the commit point, rankreconf.JudgeResize); on commit the new world replaces the
// old one (mpi.SwitchWorld), on abort the old one goes on with the old data.

// World returns the process's world communicator: the one Init was given, or the one the
// last resize made.
func (p *Process) World() *mpi.Comm { return p.world }

// resizeHeader starts the state rank 0 sends the joiners.
type resizeHeader struct {
	Seq     uint64    `msgpack:"seq"`
	OldSize int       `msgpack:"old_size"`
	NewSize int       `msgpack:"new_size"`
	Weights []float64 `msgpack:"weights,omitempty"` // the new ranks' shares, nil for equal
}

// resize runs the resize rs at the boundary after iteration iter. It is collective over the
// old world (and, for a grow, the joiners, in their Load).
func (p *Process) resize(iter int, rs rankreconf.Resize) (Action, error) {
	began := time.Now()
	var watch *resizeWatch
	old, me := p.world, p.world.Rank()
	// The job's nodes change, and the joiners know no buddy: all choose again.
	p.forgetBuddy()
	if p.launched == nil || p.ctl == nil {
		// The same on every rank (it depends on how the job was started).
		if me == 0 {
			fmt.Fprintf(p.opts.Log, "pcm: ignoring resize request %d: %v\n", rs.Seq, rewire.ErrUnsupported)
		}
		return Continue, nil
	}
	abort := func(why string) (Action, error) {
		if me == 0 {
			p.reportResize(job.ResizeReport{Seq: rs.Seq, Error: why, Iteration: iter, Pause: time.Since(began)})
			fmt.Fprintf(p.opts.Log, "pcm: resize %d -> %d ranks aborted at iteration %d: %s\n", rs.OldSize, rs.NewSize, iter, why)
		}
		return Continue, nil
	}
	if !p.hasDistributed() {
		return abort("the job has no distributed data to redistribute (register it with pcm.NewBlock)")
	}
	if rs.Rebalance() {
		return p.rebalanceAt(iter, rs, began, abort)
	}
	nr := rs.NewRank[me]
	if rs.Grow() {
		// A joiner that ends before the commit leaves the new world waiting in vain.
		w := p.watchResize(rs.Seq)
		defer w.stop()
		watch = w
	}
	var ln *mpi.ResizeListener
	var table []string
	var err error
	if nr >= 0 {
		if ln, err = mpi.ListenResize(old); err == nil {
			table, err = rewire.AskResizeTable(p.launched.Conn, p.launched.Auth, p.launched.Env.JobID, job.ResizeHello{
				Seq: rs.Seq, Rank: nr, OldRank: me, Addr: ln.Addr(), PID: os.Getpid(), Iteration: iter})
			if err == nil && len(table) != rs.NewSize {
				err = fmt.Errorf("resize: table has %d addresses for %d ranks", len(table), rs.NewSize)
			}
		}
	}
	bad, why, aerr := firstFailure(old, err)
	if aerr != nil {
		return Continue, fmt.Errorf("pcm: Reconfigure(%d): resize: %w", iter, aerr)
	}
	if bad >= 0 {
		if ln != nil {
			ln.Close()
		}
		return abort(fmt.Sprintf("rank %d: %s", bad, why))
	}
	var nw *mpi.Comm
	if nr >= 0 {
		if nw, err = ln.Connect(nr, table); err == nil {
			watch.attach(nw)
			err = mpi.AgreeContexts(nw, old)
		}
	}
	// The old ranks agree on the new world before any of them quiesces the old one: a joiner
	// lost during AgreeContexts fails it on some old ranks only (those whose part of the
	// Allreduce waited for it), and those must not enter firstFailure's collective over old
	// while the others enter Quiesce's.
	agreed := func(err error) (bool, Action, error) {
		bad, why, aerr := firstFailure(old, err)
		if aerr == nil && bad < 0 {
			return true, Continue, nil
		}
		mpi.Abandon(nw)
		if aerr != nil {
			return false, Continue, fmt.Errorf("pcm: Reconfigure(%d): resize: %w", iter, aerr)
		}
		act, err := abort(fmt.Sprintf("rank %d: %s", bad, why))
		return false, act, err
	}
	if ok, act, err := agreed(err); !ok {
		return act, err
	}
	if ok, act, err := agreed(mpi.Quiesce(old, rs.NewRank)); !ok {
		return act, err
	}

	var commit bool
	var moved int64
	if rs.Grow() {
		commit, moved, err = p.growData(nw, iter, rs)
		// The old ranks agree among themselves: the new world may have lost a joiner.
		var bad int
		if bad, why, aerr = firstFailure(old, verdictError(commit, err)); aerr != nil {
			return Continue, fmt.Errorf("pcm: Reconfigure(%d): resize: %w", iter, aerr)
		}
		commit = bad < 0
	} else {
		var derr error
		moved, derr = p.resizeData(old, rs.OldSize, rs.NewRank, rs.NewSize, rs.Weights)
		var failed int
		commit, failed, moved, err = exchangeOutcomes(old, derr, moved)
		if err != nil {
			p.resizeDone(false)
			mpi.Abandon(nw)
			return Continue, fmt.Errorf("pcm: Reconfigure(%d): resize: %w", iter, err)
		}
		why = fmt.Sprintf("rank %d could not move its data", failed)
	}
	if !commit {
		p.resizeDone(false)
		mpi.Abandon(nw)
		return abort(why)
	}
	p.resizeDone(true)
	if err := mpi.SwitchWorld(old, nw, rs.NewRank); err != nil {
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: closing the old world: %v\n", me, err)
	}
	if nr < 0 {
		p.left = true
		return Leave, nil
	}
	p.world = nw
	p.restartProfiler()
	if nr == 0 {
		p.reportResize(job.ResizeReport{Seq: rs.Seq, OK: true, Iteration: iter, Pause: time.Since(began), Bytes: moved})
	}
	return Resized, nil
}

// rebalanceAt is a resize to the job's own size with weights: every rank stays and the rows
// move to their new shares over the world, as Rebalance moves them; no new world is built.
func (p *Process) rebalanceAt(iter int, rs rankreconf.Resize, began time.Time, abort func(string) (Action, error)) (Action, error) {
	n := p.world.Size()
	moved, derr := p.resizeData(p.world, n, identity(n), n, rs.Weights)
	commit, _, total, err := exchangeOutcomes(p.world, derr, moved)
	if err != nil {
		p.resizeDone(false)
		return Continue, fmt.Errorf("pcm: Reconfigure(%d): rebalance: %w", iter, err)
	}
	if !commit {
		p.resizeDone(false)
		bad, why, aerr := firstFailure(p.world, derr)
		if aerr != nil {
			return Continue, fmt.Errorf("pcm: Reconfigure(%d): rebalance: %w", iter, aerr)
		}
		return abort(fmt.Sprintf("rank %d: %s", bad, why))
	}
	p.resizeDone(true)
	if p.world.Rank() == 0 {
		p.reportResize(job.ResizeReport{Seq: rs.Seq, OK: true, Iteration: iter, Pause: time.Since(began), Bytes: total})
	}
	return Resized, nil
}

// growData sends the joiners pcm's bookkeeping and moves the distributed data over the new
// world (resizeData gives the joiners the replicated values); it returns the verdict of the
// new world's commit point and the bytes moved.
func (p *Process) growData(nw *mpi.Comm, iter int, rs rankreconf.Resize) (bool, int64, error) {
	var blob []byte
	if nw.Rank() == 0 {
		var buf bytes.Buffer
		hdr, err := msgpack.Marshal(&resizeHeader{Seq: rs.Seq, OldSize: rs.OldSize, NewSize: rs.NewSize, Weights: rs.Weights})
		if err == nil {
			buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(hdr))))
			buf.Write(hdr)
			// Only the bookkeeping: rank 0's registry holds its own rows too, which a joiner
			// has no use for.
			err = p.writeMeta(&buf, iter)
		}
		if err != nil {
			return false, 0, err
		}
		blob = buf.Bytes()
	}
	if _, err := bcastBlob(nw, blob); err != nil {
		return false, 0, err
	}
	moved, derr := p.resizeData(nw, rs.OldSize, identity(rs.NewSize), rs.NewSize, rs.Weights)
	commit, _, total, err := exchangeOutcomes(nw, derr, moved)
	return commit, total, err
}

// join is a joiner's part of the resize it joined at, in Load: it takes pcm's bookkeeping
// and the replicated values from rank 0, receives its part of the distributed data and
// waits for the commit.
func (p *Process) join() error {
	w := p.watchResize(p.launched.Joined)
	defer w.stop()
	w.attach(p.world)
	blob, err := bcastBlob(p.world, nil)
	if err != nil {
		return fmt.Errorf("pcm: Load: resize: %w", err)
	}
	if len(blob) < 4 || int(binary.LittleEndian.Uint32(blob)) > len(blob)-4 {
		return fmt.Errorf("pcm: Load: resize state of %d bytes is malformed", len(blob))
	}
	n := int(binary.LittleEndian.Uint32(blob))
	var hdr resizeHeader
	if err := msgpack.Unmarshal(blob[4:4+n], &hdr); err != nil || hdr.NewSize != p.world.Size() || hdr.OldSize < 1 {
		return fmt.Errorf("pcm: Load: resize state header for a world of %d: %v", p.world.Size(), err)
	}
	if _, err := p.loadMeta(blob[4+n:]); err != nil {
		return err
	}
	for _, o := range p.dist.objects {
		o.release() // NewBlock's even share of the new world: resizeData gives the real one
	}
	moved, derr := p.resizeData(p.world, hdr.OldSize, identity(hdr.NewSize), hdr.NewSize, hdr.Weights)
	commit, failed, _, err := exchangeOutcomes(p.world, derr, moved)
	if err != nil {
		return fmt.Errorf("pcm: Load: resize %d: %w", hdr.Seq, err)
	}
	if !commit {
		return fmt.Errorf("pcm: Load: resize %d aborted: rank %d could not move its data", hdr.Seq, failed)
	}
	p.resizeDone(true)
	return nil
}

// bcastBlob sends rank 0's blob to every rank of c.
func bcastBlob(c *mpi.Comm, blob []byte) ([]byte, error) {
	n := []int64{int64(len(blob))}
	if err := mpi.Bcast(c, n, 0); err != nil {
		return nil, err
	}
	if n[0] < 0 || n[0] > 1<<40 {
		return nil, fmt.Errorf("resize state of %d bytes", n[0])
	}
	if c.Rank() != 0 {
		blob = make([]byte, n[0])
	}
	if err := mpi.Bcast(c, blob, 0); err != nil {
		return nil, err
	}
	return blob, nil
}

// exchangeOutcomes is a resize's commit point over c: every process says whether its data
// moved; the resize commits only if all did (rankreconf.JudgeResize).
func exchangeOutcomes(c *mpi.Comm, derr error, moved int64) (commit bool, failed int, total int64, err error) {
	mine := []int64{1, moved}
	if derr != nil {
		mine[0] = 0
	}
	all := make([]int64, 2*c.Size())
	if err := mpi.Allgather(c, mine, all); err != nil {
		return false, -1, 0, err
	}
	outs := make([]rankreconf.ResizeOutcome, c.Size())
	for r := range outs {
		outs[r] = rankreconf.ResizeOutcome{OK: all[2*r] == 1, Bytes: all[2*r+1]}
	}
	commit, failed, total = rankreconf.JudgeResize(outs)
	return commit, failed, total, nil
}

// verdictError turns a grow's verdict on this process into an error for firstFailure.
func verdictError(commit bool, err error) error {
	if err != nil {
		return err
	}
	if !commit {
		return errors.New("a process of the new world could not move its data")
	}
	return nil
}

// maxReason bounds the reason a failed rank gives the others.
const maxReason = 200

// firstFailure tells every rank of c which rank (the lowest) failed with its err, and why;
// -1 if none did. It is collective over c.
func firstFailure(c *mpi.Comm, err error) (int, string, error) {
	mine := make([]byte, maxReason+1)
	if err != nil {
		mine[0] = 1
		copy(mine[1:], err.Error())
	}
	all := make([]byte, len(mine)*c.Size())
	if aerr := mpi.Allgather(c, mine, all); aerr != nil {
		return -1, "", aerr
	}
	for r := range c.Size() {
		if rec := all[r*len(mine) : (r+1)*len(mine)]; rec[0] == 1 {
			return r, string(bytes.TrimRight(rec[1:], "\x00")), nil
		}
	}
	return -1, "", nil
}

func identity(n int) []int {
	v := make([]int, n)
	for i := range v {
		v[i] = i
	}
	return v
}

// reportResize tells the launcher how a resize ended.
func (p *Process) reportResize(r job.ResizeReport) {
	data, err := rewire.Seal(p.launched.Auth, job.ResizedSubject(p.launched.Env.JobID), r)
	if err != nil {
		return
	}
	nc := p.launched.Conn
	if nc.Publish(job.ResizedSubject(p.launched.Env.JobID), data) == nil {
		nc.FlushTimeout(2 * time.Second)
	}
}

// resizeWatch breaks a resize's new world when the launcher reports that one of its
// members ended before the commit (job.ResizeGone).
type resizeWatch struct {
	mu    sync.Mutex
	world *mpi.Comm
	gone  error
	sub   *nats.Subscription
}

func (p *Process) watchResize(seq uint64) *resizeWatch {
	w := &resizeWatch{}
	nc := p.launched.Conn
	sub, err := nc.Subscribe(job.ResizeGoneSubject(p.launched.Env.JobID), func(m *nats.Msg) {
		var g job.ResizeGone
		if rewire.Unseal(p.launched.Auth, m.Subject, m.Data, &g) != nil || g.Seq != seq {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.gone == nil {
			w.gone = fmt.Errorf("%w: %s", mpi.ErrAborted, g.Reason)
			mpi.Break(w.world, w.gone)
		}
	})
	if err == nil {
		nc.Flush()
		w.sub = sub
	}
	return w
}

// attach breaks world if a member is gone, now or later. A nil watch does nothing.
func (w *resizeWatch) attach(world *mpi.Comm) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.world = world
	if w.gone != nil {
		mpi.Break(world, w.gone)
	}
}

func (w *resizeWatch) stop() {
	if w.sub != nil {
		w.sub.Unsubscribe()
	}
}

// announceMalleable tells the launcher whether this job has distributed data to
// redistribute, so that it refuses resizes of one without any (rank 0, once, in Load).
func (p *Process) announceMalleable() {
	if p.launched == nil || p.ctl == nil || p.world.Rank() != 0 || p.status == Joined {
		return
	}
	data, err := rewire.Seal(p.launched.Auth, job.MalleableSubject(p.launched.Env.JobID), job.Malleable{Distributed: p.hasDistributed()})
	if err == nil {
		p.launched.Conn.Publish(job.MalleableSubject(p.launched.Env.JobID), data)
	}
}

// restartProfiler profiles the new world after a resize.
func (p *Process) restartProfiler() {
	if p.prof == nil {
		return
	}
	p.prof.Close()
	p.prof = nil
	p.startProfiler()
}
