// Package pieceserver lends the checkpoint pieces of a node's store to ranks restarting
// on other nodes (job.PieceSubject) and answers which checkpoints of a job the node holds
// (job.ManifestsSubject), and keeps buddy copies of other nodes' pieces
// (job.PieceCopySubject). Every request must verify under the key of the job it is
// published for (the subject's last token), which the node learned from that job's
// verified spawn requests (ctlauth.JobKeyring); a job reads only its own checkpoints and
// those it restarts from, and copies only its own pieces. Replies travel under the same key.
// Each offer gets a one-time listener on the node's advertise address and a random token;
// whoever connects must prove the job key with an HMAC of the token (ctlauth OfferProof),
// so reading the reply on NATS is not enough to take the offer. The piece's bytes go over
// that connection, never over NATS. The offers open at once are capped per requester (a
// NATS connection) and in total, so that no one exhausts the node's file descriptors.
package pieceserver

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/offerconn"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Config configures a Server.
type Config struct {
	Node      string // the node's name (job.ValidateNode)
	Store     string // the node's checkpoint store root; "" = no store, every request is refused
	Advertise string // host or IP the one-time listeners bind to: an address other nodes reach
	// Keys are the keys of the jobs the node knows (from their spawn requests): requests of
	// other jobs are refused. Not nil.
	Keys *ctlauth.JobKeyring
	// Logf receives what went wrong with an offer after it was made; nil = discard.
	Logf func(format string, args ...any)
	// MaxOffers caps the offers not taken yet, in total and per requester (a NATS
	// connection); further requests are refused until some are taken or expire.
	// 0 = DefaultMaxOffers and DefaultMaxOffersPerRequester.
	MaxOffers, MaxOffersPerRequester int
	// Cap is the most bytes the store may hold (a memory store): a buddy copy beyond it is
	// refused with the reason. 0: no cap.
	Cap int64
	// CopyNice lowers the priority of receiving a buddy copy by this many nice levels (on a
	// thread of its own, Linux only), so that the node's ranks get the CPU first: the copy
	// needs little of it and has until the job's next agreement point to finish. 0: the
	// process's priority.
	CopyNice int
	// Transfer, if not nil, is told of every buddy copy received whole from a node that
	// named itself (PieceCopyRequest.From): the bytes that came over the connection and
	// the time from accepting it to the last byte, the link's bandwidth as a bulk transfer
	// sees it (pcmd's IOS agent keeps it per peer, iosbridge.Node.ObserveTransfer). Called
	// from the copy's goroutine; it must not block.
	Transfer func(from string, bytes int64, d time.Duration)
	// IdleTimeout fails a transfer on which the requester moved no byte for this long
	// (a frozen or cut-off rank). 0: offerconn.IdleTimeout.
	IdleTimeout time.Duration
	// MakeRoom, if not nil, is asked to free at least need bytes of the store when a buddy
	// copy does not fit under Cap; it reports whether it freed any, and the copy is then
	// tried once more.
	MakeRoom func(need int64) bool
}

// Server answers the piece and manifest requests of one node.
type Server struct {
	node, dir, advertise string
	keys                 *ctlauth.JobKeyring
	capacity             int64
	copyNice             int
	logf                 func(format string, args ...any)
	transfer             func(from string, bytes int64, d time.Duration)
	idle                 time.Duration
	makeRoom             func(need int64) bool
	sub, msub, csub      *nats.Subscription
	wg                   sync.WaitGroup
	mu                   sync.Mutex
	open                 map[net.Listener]bool // offers not taken yet
	offers               *offers
	stopped              bool
}

// Start answers piece and manifest requests for cfg.Node on nc until Stop.
func Start(nc *nats.Conn, cfg Config) (*Server, error) {
	if cfg.MaxOffers == 0 {
		cfg.MaxOffers = DefaultMaxOffers
	}
	if cfg.MaxOffersPerRequester == 0 {
		cfg.MaxOffersPerRequester = DefaultMaxOffersPerRequester
	}
	if cfg.MaxOffers < 0 || cfg.MaxOffersPerRequester < 0 {
		return nil, errors.New("pcmd: piece offer caps must not be negative")
	}
	if cfg.CopyNice < 0 || cfg.CopyNice > 19 {
		return nil, fmt.Errorf("pcmd: copy priority %d nice levels lower: want 0 to 19", cfg.CopyNice)
	}
	if cfg.Keys == nil {
		return nil, errors.New("pcmd: piece server without a job keyring")
	}
	s := &Server{node: cfg.Node, dir: cfg.Store, advertise: cfg.Advertise, keys: cfg.Keys, capacity: cfg.Cap, copyNice: cfg.CopyNice, logf: cfg.Logf, transfer: cfg.Transfer, idle: cfg.IdleTimeout, makeRoom: cfg.MakeRoom, open: make(map[net.Listener]bool),
		offers: newOffers(cfg.MaxOffers, cfg.MaxOffersPerRequester)}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	var err error
	s.sub, err = nc.Subscribe(job.PieceSubjects(cfg.Node), s.onRequest)
	if err != nil {
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.PieceSubjects(cfg.Node), err)
	}
	s.msub, err = nc.Subscribe(job.ManifestsSubjects, s.onManifests)
	if err != nil {
		s.sub.Unsubscribe()
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.ManifestsSubjects, err)
	}
	s.csub, err = nc.Subscribe(job.PieceCopySubjects(cfg.Node), s.onCopy)
	if err != nil {
		s.sub.Unsubscribe()
		s.msub.Unsubscribe()
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.PieceCopySubjects(cfg.Node), err)
	}
	// Once Start returns, requests reach the server: the subscriptions are on the NATS
	// server, not only queued on the connection.
	if err := nc.Flush(); err != nil {
		s.sub.Unsubscribe()
		s.msub.Unsubscribe()
		s.csub.Unsubscribe()
		return nil, fmt.Errorf("pcmd: subscribe to piece requests: %w", err)
	}
	return s, nil
}

// Stop stops answering, withdraws the offers not taken yet and waits for the transfers
// under way.
func (s *Server) Stop() {
	s.sub.Unsubscribe()
	s.msub.Unsubscribe()
	s.csub.Unsubscribe()
	s.mu.Lock()
	s.stopped = true
	for ln := range s.open {
		ln.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) onRequest(m *nats.Msg) {
	if m.Reply == "" {
		return // nobody could learn where the offer is
	}
	requester := job.RequesterOf(m.Subject)
	var req job.PieceRequest
	if err := s.verify(m, requester, &req); err != nil {
		s.refuse(m, ": piece request: %v", err)
		return
	}
	if err := req.Validate(); err != nil {
		s.refuse(m, ": %v", err)
		return
	}
	if !s.keys.MayRead(requester, req.Job) {
		s.refuse(m, ": job %s may not read the checkpoints of job %s", requester, req.Job)
		return
	}
	s.offer(m, requester, fmt.Sprintf("piece %s/%d/rank %d", req.Job, req.Seq, req.Rank), false,
		func() (int64, handler, func(), error) {
			store, err := ckptstore.Open(s.dir, &ckptstore.Options{Node: s.node})
			if err != nil {
				return 0, nil, nil, err
			}
			rc, info, err := store.OpenPiece(req.Job, req.Seq, req.Rank)
			if err != nil {
				return 0, nil, nil, err
			}
			send := func(c net.Conn, _ time.Time) error {
				_, err := io.Copy(c, rc)
				return err
			}
			return info.Size, send, func() { rc.Close() }, nil
		})
}

// onCopy takes a buddy copy of another node's piece into this node's store: the bytes come
// over a one-time connection, are verified against the offered size and checksum, made
// durable, and only then acknowledged with "ok".
func (s *Server) onCopy(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	requester := job.RequesterOf(m.Subject)
	var req job.PieceCopyRequest
	if err := s.verify(m, requester, &req); err != nil {
		s.refuse(m, ": piece copy request: %v", err)
		return
	}
	if err := req.Validate(); err != nil {
		s.refuse(m, ": %v", err)
		return
	}
	if req.Job != requester {
		s.refuse(m, ": job %s may not store pieces of job %s", requester, req.Job)
		return
	}
	if req.Size < 0 {
		s.refuse(m, ": piece copy of %d bytes", req.Size)
		return
	}
	want := ckptstore.PieceInfo{Rank: req.Rank, Node: s.node, Size: req.Size, Checksum: req.Checksum}
	if len(req.Inline) > 0 {
		if err := s.storeInline(req, want); err != nil {
			s.refuse(m, ": copy of piece %s/%d/rank %d: %v", req.Job, req.Seq, req.Rank, err)
			return
		}
		s.reply(m, requester, job.PieceReply{Stored: true})
		return
	}
	s.offer(m, requester, fmt.Sprintf("copy of piece %s/%d/rank %d", req.Job, req.Seq, req.Rank), req.Sparse,
		func() (int64, handler, func(), error) {
			store, err := s.reserveCopy(req.Size)
			if err != nil {
				return 0, nil, nil, err
			}
			take := func(c net.Conn, accepted time.Time) error {
				lowerPriority(s.copyNice) // the rest of this offer's goroutine
				in := &timedReader{r: c}
				var err error
				if req.Sparse {
					err = store.PutSparseCopy(req.Job, req.Seq, want, in)
				} else {
					err = store.PutCopy(req.Job, req.Seq, want, io.LimitReader(in, req.Size))
				}
				if err == nil && s.transfer != nil && req.From != "" && req.From != s.node && in.n > 0 {
					s.transfer(req.From, in.n, in.last.Sub(accepted))
				}
				answer := "ok\n"
				if err != nil {
					answer = strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
				}
				if _, werr := io.WriteString(c, answer); err == nil {
					err = werr
				}
				return err
			}
			return req.Size, take, func() {}, nil
		})
}

// storeInline stores a buddy copy that came inside its (verified) request, verified
// against the offered size and checksum and durable when it returns.
func (s *Server) storeInline(req job.PieceCopyRequest, want ckptstore.PieceInfo) error {
	if s.dir == "" {
		return errors.New("no checkpoint store (--store)")
	}
	store, err := s.reserveCopy(req.Size)
	if err != nil {
		return err
	}
	in := bytes.NewReader(req.Inline)
	if err := store.PutSparseCopy(req.Job, req.Seq, want, in); err != nil {
		return err
	}
	if in.Len() > 0 {
		// The stream ended before the request did: not what the sender meant to store.
		return fmt.Errorf("%d bytes after the sparse stream's end", in.Len())
	}
	return nil
}

// reserveCopy opens the node's store for a buddy copy of size bytes, refused if the store
// has no room for it under the node's cap.
func (s *Server) reserveCopy(size int64) (*ckptstore.Store, error) {
	store, err := ckptstore.Open(s.dir, &ckptstore.Options{Node: s.node})
	if err != nil {
		return nil, err
	}
	err = store.Reserve(size, s.capacity)
	if errors.Is(err, ckptstore.ErrFull) && s.makeRoom != nil && s.makeRoom(size) {
		err = store.Reserve(size, s.capacity)
	}
	if err != nil {
		return nil, err
	}
	return store, nil
}

// verify verifies a request received under the key of job requester and decodes it into v.
func (s *Server) verify(m *nats.Msg, requester string, v any) error {
	_, err := s.keys.Decode(requester, m.Subject, m.Data, v, time.Now())
	if errors.Is(err, ctlauth.ErrUnknownJob) {
		return fmt.Errorf("this node runs no rank of job %.64q and has not learned its key", requester)
	}
	return err
}

// reply answers m under the key of job requester; a job the node has no key for gets the
// reply in clear (its processes will not believe it, which for a refusal costs nothing).
func (s *Server) reply(m *nats.Msg, requester string, r job.PieceReply) {
	data, err := s.keys.Encode(requester, m.Reply, r, time.Now())
	if errors.Is(err, ctlauth.ErrUnknownJob) && r.Addr == "" {
		data, err = job.Encode(r)
	}
	if err == nil {
		m.Respond(data)
	}
}

// refuse answers m with the reason this node makes no offer.
func (s *Server) refuse(m *nats.Msg, format string, args ...any) {
	r := job.PieceReply{Error: fmt.Sprintf("pcmd: node %s", s.node) + fmt.Sprintf(format, args...)}
	s.reply(m, job.RequesterOf(m.Subject), r)
}

// offer makes a one-time offer for the requester of m, a process of job requester (a copy
// taken as a sparse stream if sparse): prepare opens what it is about (its size, the handler
// of the connection that proves the token, and the release of what it opened), a listener
// waits for that connection, and the reply names it (or says why the node makes no offer).
func (s *Server) offer(m *nats.Msg, requester, what string, sparse bool, prepare func() (int64, handler, func(), error)) {
	refuse := func(format string, args ...any) { s.refuse(m, format, args...) }
	if s.dir == "" {
		refuse(" has no checkpoint store (--store)")
		return
	}
	who := requesterOf(m.Reply)
	s.mu.Lock()
	stopped := s.stopped
	var err error
	if !stopped {
		err = s.offers.take(who)
	}
	s.mu.Unlock()
	switch {
	case stopped:
		refuse(" is shutting down")
		return
	case err != nil:
		refuse(": %v", err)
		return
	}
	withdrawn := true // until the offer is handed to lend
	defer func() {
		if withdrawn {
			s.release(who)
		}
	}()
	size, handle, done, err := prepare()
	if err != nil {
		refuse(": %v", err)
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(s.advertise, "0"))
	if err != nil {
		done()
		refuse(": listen: %v", err)
		return
	}
	token := make([]byte, 16)
	rand.Read(token)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		ln.Close()
		done()
		refuse(" is shutting down")
		return
	}
	s.open[ln] = true
	s.mu.Unlock()
	withdrawn = false
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.release(who)
		defer done()
		proven := func(proof []byte) bool { return s.keys.CheckOfferProof(requester, token, proof) }
		if err := s.lend(ln, proven, handle); err != nil {
			s.logf("%s: %v", what, err)
		}
	}()
	s.reply(m, requester, job.PieceReply{Addr: ln.Addr().String(), Token: token, Size: size, Sparse: sparse})
}

// release uncounts an offer of who that was taken, expired or withdrawn.
func (s *Server) release(who string) {
	s.mu.Lock()
	s.offers.release(who)
	s.mu.Unlock()
}

// onManifests answers with this node's committed manifests of the job, if it has any and
// the request verifies under the key of a job that may read them. It stays silent
// otherwise: other nodes may answer.
func (s *Server) onManifests(m *nats.Msg) {
	requester := job.RequesterOf(m.Subject)
	var req job.ManifestsRequest
	if s.dir == "" || m.Reply == "" || s.verify(m, requester, &req) != nil || job.ValidateID(req.Job) != nil ||
		!s.keys.MayRead(requester, req.Job) {
		return
	}
	store, err := ckptstore.Open(s.dir, &ckptstore.Options{Node: s.node})
	if err != nil {
		return
	}
	ms, err := store.Checkpoints(req.Job)
	if err != nil || len(ms) == 0 {
		return
	}
	rep := job.ManifestsReply{Node: s.node}
	for _, man := range ms {
		if b, err := json.Marshal(man); err == nil {
			rep.Manifests = append(rep.Manifests, b)
		}
	}
	if data, err := s.keys.Encode(requester, m.Reply, rep, time.Now()); err == nil {
		m.Respond(data)
	}
}

// proofWait bounds how long a connection to an offer may take to present its proof.
const proofWait = 2 * time.Second

// handler serves the connection that proved an offer, accepted at the time it is given.
type handler func(c net.Conn, accepted time.Time) error

// timedReader counts the bytes read through it and notes when the last of them came.
type timedReader struct {
	r    io.Reader
	n    int64
	last time.Time
}

func (t *timedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.n += int64(n)
		t.last = time.Now()
	}
	return n, err
}

// lend hands the first connection whose proof of the offer's token is proven to handle.
func (s *Server) lend(ln net.Listener, proven func(proof []byte) bool, handle handler) error {
	defer func() {
		s.mu.Lock()
		delete(s.open, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	deadline := time.Now().Add(job.PieceOfferTTL)
	ln.(*net.TCPListener).SetDeadline(deadline)
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("nobody came for it: %w", err)
		}
		// A bulk transfer's clock starts here: the sender writes its proof and the bytes as
		// soon as it is connected, so bytes already buffered when the proof is read count.
		accepted := time.Now()
		// A connection that does not prove the offer at once does not hold it up: the
		// job's process sends its proof as soon as it connects.
		proofBy := time.Now().Add(proofWait)
		if deadline.Before(proofBy) {
			proofBy = deadline
		}
		c.SetDeadline(proofBy)
		got := make([]byte, ctlauth.OfferProofSize)
		if _, err := io.ReadFull(c, got); err != nil || !proven(got) {
			c.Close()
			continue
		}
		c.SetDeadline(time.Time{})
		err = handle(offerconn.Idle(c, s.idle), accepted)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	}
}
