package pcm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/offerconn"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Restart on other nodes: a rank whose node does not hold the agreed checkpoint's manifest
// gets it from a rank that does, and a piece stored on another node is fetched from that
// node's pcmd (job.PieceSubject), verified against the manifest as it streams in.

// shareManifest gives every rank the manifest of checkpoint seq if any rank can read it:
// the lowest such rank broadcasts it. Ranks that read it themselves keep their own.
func (p *Process) shareManifest(c candidate, have bool) (candidate, bool, error) {
	// Max of minus the rank is minus the lowest rank that has the manifest.
	const none = -1 << 40
	in, best := []int64{none}, []int64{0}
	if have && c.ok {
		in[0] = -int64(p.world.Rank())
	}
	if err := mpi.Allreduce(p.world, in, best, mpi.Max); err != nil {
		return c, have, err
	}
	if best[0] == none {
		return c, have, nil // nobody can read it: the usual fallback follows
	}
	root := int(-best[0])
	var data []byte
	if p.world.Rank() == root {
		var err error
		if data, err = json.Marshal(c.m); err != nil {
			return c, have, err
		}
	}
	n := []int{len(data)}
	if err := mpi.Bcast(p.world, n, root); err != nil {
		return c, have, err
	}
	if p.world.Rank() != root {
		data = make([]byte, n[0])
	}
	if err := mpi.Bcast(p.world, data, root); err != nil {
		return c, have, err
	}
	if have && c.ok {
		return c, have, nil
	}
	var m ckptstore.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return c, have, fmt.Errorf("manifest from rank %d: %w", root, err)
	}
	return candidate{m: m, ok: true}, true, nil
}

// openPieceOf opens rank's piece of m: from the local store, or from the pcmd of the node
// that holds it.
func (p *Process) openPieceOf(m ckptstore.Manifest, rank int) (io.ReadCloser, error) {
	rc, info, err := p.store.OpenPieceOf(m, rank)
	if err == nil || !errors.Is(err, ckptstore.ErrNotLocal) {
		return rc, err
	}
	if p.launched == nil || p.launched.Conn == nil {
		return nil, fmt.Errorf("%w (and this process has no control plane to fetch it)", err)
	}
	// The piece's own node first, then its buddy copies: a node that is gone leaves the
	// piece on another.
	errs := []error{}
	for _, node := range append([]string{info.Node}, info.Copies...) {
		if node == p.store.Node() {
			continue // not on this disk, as OpenPieceOf said
		}
		rc, ferr := p.fetchPiece(m, rank, info, node)
		if ferr == nil {
			return rc, nil
		}
		errs = append(errs, ferr)
	}
	return nil, errors.Join(errs...)
}

// fetchPiece reads a piece from the pcmd of node, which holds it or a copy of it.
func (p *Process) fetchPiece(m ckptstore.Manifest, rank int, info ckptstore.PieceInfo, node string) (io.ReadCloser, error) {
	id := ckptstore.PieceID{Job: m.Job, Seq: m.Seq, Rank: rank}
	auth := p.readAuth(m.Job)
	if auth == nil {
		return nil, fmt.Errorf("fetch %s from node %s: this process has no job key to ask a node with", id, node)
	}
	rep, err := p.askNodeAs(auth, job.PieceSubject(node, auth.Job()), job.PieceRequest{Job: m.Job, Seq: m.Seq, Rank: rank}, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("fetch %s from node %s: %w", id, node, err)
	}
	conn, err := offerconn.Dial(rep.Addr, auth.OfferProof(rep.Token), 10*time.Second, offerconn.IdleTimeout)
	if err != nil {
		return nil, fmt.Errorf("fetch %s from node %s: %w", id, node, err)
	}
	vr, err := ckptstore.NewVerifyingReader(conn, id, info)
	if err != nil {
		conn.Close()
		return nil, err
	}
	fmt.Fprintf(p.opts.Log, "pcm: rank %d: reading its piece of checkpoint %d from node %s\n", rank, m.Seq, node)
	return remotePiece{vr, conn}, nil
}

// clearRefusalWait is how long askNode still waits for an authenticated answer after a
// refusal in clear.
const clearRefusalWait = 500 * time.Millisecond

// askNode sends req, under the job key, to the pcmd that answers subject (a piece or copy
// request) and returns its offer. Only a reply that verifies under the job key counts:
// anyone on the NATS server can answer first, so replies that do not verify are skipped
// while the wait lasts; a refusal in clear (from a node that does not know the job's key)
// is the error if nothing better arrives.
func (p *Process) askNode(subject string, req any, wait time.Duration) (job.PieceReply, error) {
	return p.askNodeAs(p.launched.Auth, subject, req, wait)
}

// askNodeAs is askNode as a process of auth's job (readAuth).
func (p *Process) askNodeAs(auth *ctlauth.JobChannel, subject string, req any, wait time.Duration) (job.PieceReply, error) {
	nc := p.launched.Conn
	if auth == nil {
		return job.PieceReply{}, errors.New("this process has no job key to ask a node with")
	}
	data, err := auth.Encode(subject, req, time.Now())
	if err != nil {
		return job.PieceReply{}, err
	}
	var rep job.PieceReply
	err = ctlplane.Request(nc, subject, data, wait, func(msg *nats.Msg) error {
		var got job.PieceReply
		if _, err := auth.Decode(msg.Subject, msg.Data, &got, time.Now()); err != nil {
			if job.Decode(msg.Data, &got) == nil && got.Error != "" && got.Addr == "" {
				// Likely the node itself, which does not know the job's key: give an
				// authenticated answer a moment more, not the whole wait.
				return &ctlplane.Tentative{Err: errors.New(got.Error), Wait: clearRefusalWait}
			}
			return err
		}
		rep = got
		return nil
	})
	var refusal *ctlplane.Tentative
	switch {
	case errors.As(err, &refusal):
		return job.PieceReply{}, refusal.Err
	case err != nil:
		return job.PieceReply{}, fmt.Errorf("no authenticated answer on %s: %w", subject, err)
	case rep.Error != "":
		return job.PieceReply{}, errors.New(rep.Error)
	}
	return rep, nil
}

// remotePiece is a piece streaming in from another node.
type remotePiece struct {
	r io.Reader
	c net.Conn
}

func (rp remotePiece) Read(b []byte) (int, error) { return rp.r.Read(b) }
func (rp remotePiece) Close() error               { return rp.c.Close() }

// Len is the number of bytes still expected (state.Registry.ReadFrom sizes buffers by it).
func (rp remotePiece) Len() int {
	if l, ok := rp.r.(interface{ Len() int }); ok {
		return l.Len()
	}
	return 0
}

// remoteCandidates asks the pcmd nodes for the committed checkpoints of job (a rank whose
// own store holds none of them restarts on a new node).
func (p *Process) remoteCandidates(jobID string) map[uint64]candidate {
	auth := p.readAuth(jobID)
	if p.launched == nil || p.launched.Conn == nil || auth == nil {
		return map[uint64]candidate{}
	}
	return collectManifests(p.launched.Conn, auth, jobID, manifestWait, p.opts.Log)
}

// readAuth returns the channel under whose key this process asks the nodes for the
// checkpoints of job jobID: that of the job it restarts from, as one of that job's
// processes, when it holds that job's secret (Options.RestartSecret), so that the nodes
// that stored them, which know only that job, serve them; else its own job's, which the
// nodes that started it let read the job it restarts from (ctlauth.JobKeyring.AllowRead).
// nil when the process has no job key.
func (p *Process) readAuth(jobID string) *ctlauth.JobChannel {
	if p.restartAuth != nil && p.restartAuth.Job() == jobID {
		return p.restartAuth
	}
	if p.launched == nil {
		return nil
	}
	return p.launched.Auth
}

// collectManifests asks the nodes, as a process of auth's job, for the committed manifests
// of job jobID, and gathers the answers that come within wait. Only nodes that know the
// job's key answer under it: a list that does not verify, or whose sender is not the node
// it names, is skipped and logged, so that nobody else can make a restart try a checkpoint
// that does not exist or shadow one that does.
func collectManifests(nc *nats.Conn, auth *ctlauth.JobChannel, jobID string, wait time.Duration, log io.Writer) map[uint64]candidate {
	cands := make(map[uint64]candidate)
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return cands
	}
	defer sub.Unsubscribe()
	subject := job.ManifestsSubject(auth.Job())
	data, err := auth.Encode(subject, job.ManifestsRequest{Job: jobID}, time.Now())
	if err != nil || nc.PublishRequest(subject, inbox, data) != nil {
		return cands
	}
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return cands
		}
		var rep job.ManifestsReply
		from, err := auth.Decode(msg.Subject, msg.Data, &rep, time.Now())
		if err == nil && (from.Role != ctlauth.RoleNode || from.Node != rep.Node) {
			err = fmt.Errorf("sent by %s for node %.64q", from, rep.Node)
		}
		if err != nil {
			fmt.Fprintf(log, "pcm: ignoring a manifest list that is not authenticated: %v\n", err)
			continue
		}
		for _, m := range manifestsIn(rep, jobID) {
			if _, dup := cands[m.Seq]; !dup {
				cands[m.Seq] = candidate{m: m, ok: true}
			}
		}
	}
}

// manifestsIn returns the manifests of job jobID in a node's list that are well formed: of
// that job, numbered, with as many pieces as ranks. The rest is skipped.
func manifestsIn(rep job.ManifestsReply, jobID string) []ckptstore.Manifest {
	var out []ckptstore.Manifest
	for _, b := range rep.Manifests {
		var m ckptstore.Manifest
		if json.Unmarshal(b, &m) != nil || m.Job != jobID || m.Seq == 0 || m.Size != len(m.Pieces) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// manifestWait is how long a restarting rank collects the nodes' manifest lists.
const manifestWait = 500 * time.Millisecond
