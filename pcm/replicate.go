package pcm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/offerconn"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Double checkpointing (Charm++): on a job spread over pcmd nodes, each rank's piece is
// written to its own node's store and copied to a buddy node's store, the next node in the
// sorted list of the job's nodes, so that losing any one node loses no committed
// checkpoint. The copy goes over a one-time TCP connection that the buddy's pcmd offers on
// request (job.PieceCopySubject), presenting its token, like a restart's piece fetch; the
// buddy verifies size and checksum and acknowledges once the copy is durable. The piece
// counts as durable, and the checkpoint can commit, only after that acknowledgement; a copy
// that fails leaves the piece with its own node only, and the manifest records exactly the
// copies that exist (PieceInfo.Copies).

// copyTimeout bounds the buddy's answer to a copy request and the connection to it.
const copyTimeout = 10 * time.Second

// replicates reports whether this process can keep buddy copies: it was launched on a pcmd
// node (which names it) and has a control-plane connection and the job key to reach the
// other nodes.
func (p *Process) replicates() bool {
	return p.launched != nil && p.launched.Conn != nil && p.launched.Auth != nil && p.opts.Node != ""
}

// buddyChoice is the buddy chosen at an earlier checkpoint, reused while the job's nodes
// stay the same.
type buddyChoice struct {
	world *mpi.Comm // the world it was chosen in; nil: no choice
	node  string    // the buddy, "" on a one-node job
}

// chooseBuddy returns this rank's buddy: the node after its own in the sorted list of the
// nodes that hold ranks, or "" on a one-node job. Choosing is collective (two small
// collectives), so the choice is kept and reused until forgetBuddy, which every rank calls
// at the same points: wherever the job's nodes may change (a migration, whatever drives
// it, and a resize) and after a checkpoint that lacks a copy or failed. A process that is
// new to the job (a migrated rank's successor, a joiner, a recovered or restarted job) has
// no choice yet, and every other rank has just forgotten its own, so all choose together
// again. Every rank thus calls the collectives at the same checkpoints.
func (p *Process) chooseBuddy() (string, error) {
	if p.buddy.world == p.world && p.world != nil {
		return p.buddy.node, nil
	}
	p.forgetBuddy()
	all, err := allgatherBytes(p.world, []byte(p.opts.Node))
	if err != nil {
		return "", err
	}
	var nodes []string
	for _, b := range all {
		nodes = append(nodes, string(b))
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if len(nodes) < 2 {
		if !p.warnedOneNode && p.world.Rank() == 0 {
			fmt.Fprintf(p.opts.Log, "pcm: job %s runs on one node (%s): its checkpoints have no buddy copy, losing that node loses them\n",
				p.opts.JobID, p.opts.Node)
		}
		p.warnedOneNode = true
		p.buddy = buddyChoice{world: p.world}
		return "", nil
	}
	i, _ := slices.BinarySearch(nodes, p.opts.Node)
	p.buddy = buddyChoice{world: p.world, node: nodes[(i+1)%len(nodes)]}
	return p.buddy.node, nil
}

// forgetBuddy drops the buddy choice: the next checkpoint chooses again. Every rank must call
// it at the same point (see chooseBuddy).
func (p *Process) forgetBuddy() { p.buddy = buddyChoice{} }

// pieceSource writes a piece's bytes for a copy: dense writes them all; sparse, if not nil,
// writes them as a sparse stream without the zero blocks (ckptstore.PieceBuffer.WriteSparseTo),
// which the buddy takes if it says so.
type pieceSource struct {
	dense, sparse func(io.Writer) error
}

// copyToBuddy sends a copy of this rank's piece of checkpoint seq (info, as the local store
// recorded it; src writes its bytes) to buddy's pcmd and returns once the buddy holds it
// durably.
func (p *Process) copyToBuddy(buddy string, seq uint64, info ckptstore.PieceInfo, src pieceSource) error {
	req := job.PieceCopyRequest{
		PieceRequest: job.PieceRequest{Job: p.opts.JobID, Seq: seq, Rank: info.Rank},
		Size:         info.Size, Checksum: info.Checksum, Sparse: src.sparse != nil,
		From: p.opts.Node, // the buddy measures its link to this node with the copy
	}
	if src.sparse != nil {
		// A piece that is mostly zeros goes inside the request (job.MaxInlineCopy).
		if b := (&cappedBuffer{max: job.MaxInlineCopy}); src.sparse(b) == nil {
			req.Inline = b.buf
		}
	}
	rep, err := p.askNode(job.PieceCopySubject(buddy, p.opts.JobID), req, copyTimeout)
	if err != nil {
		return fmt.Errorf("copy to node %s: %w", buddy, err)
	}
	if rep.Stored {
		return nil
	}
	// A buddy that stops taking bytes (frozen, cut off) fails the copy after
	// offerconn.IdleTimeout: the checkpoint then lacks this copy, and the job goes on.
	conn, err := offerconn.Dial(rep.Addr, p.launched.Auth.OfferProof(rep.Token), copyTimeout, offerconn.IdleTimeout)
	if err != nil {
		return fmt.Errorf("copy to node %s: %w", buddy, err)
	}
	defer conn.Close()
	// The piece's runs are large writes that go to the socket directly; the buffer only
	// gathers the small ones (run headers), so it need not be large.
	w := bufio.NewWriterSize(conn, 64<<10)
	write := src.dense
	if rep.Sparse && src.sparse != nil {
		write = src.sparse
	}
	if err := write(w); err != nil {
		return fmt.Errorf("copy to node %s: send: %w", buddy, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("copy to node %s: send: %w", buddy, err)
	}
	// The buddy answers once the copy is verified and fsynced; a buddy that dies before
	// closes the connection.
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("copy to node %s: no acknowledgement: %w", buddy, err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return fmt.Errorf("copy to node %s: %s", buddy, line)
	}
	return nil
}

// replicate copies a freshly written piece to the buddy, if there is one, and records the
// copy in info. A failed copy is reported and leaves the piece with its own node only.
func (p *Process) replicate(buddy string, seq uint64, info ckptstore.PieceInfo, src pieceSource) ckptstore.PieceInfo {
	if buddy == "" {
		return info
	}
	if err := p.copyToBuddy(buddy, seq, info, src); err != nil {
		fmt.Fprintf(p.opts.Log, "pcm: warning: rank %d: checkpoint %d has no buddy copy: %v\n", info.Rank, seq, err)
		return info
	}
	info.Copies = []string{buddy}
	return info
}

// cappedBuffer collects what is written to it, up to max bytes: a write beyond fails.
type cappedBuffer struct {
	buf []byte
	max int
}

// errCapped says that a cappedBuffer is full.
var errCapped = errors.New("pcm: more than fits inline")

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if len(c.buf)+len(p) > c.max {
		return 0, errCapped
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}
