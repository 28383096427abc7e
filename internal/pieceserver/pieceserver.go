// Package pieceserver lends the checkpoint pieces of a node's store to ranks restarting
// on other nodes (job.PieceSubject) and answers which checkpoints of a job the node holds
// (job.ManifestsSubject). Each piece request gets a one-time listener on the node's
// advertise address and a random token; the piece's bytes go over that connection, never
// over NATS. The offers open at once are capped per requester (a NATS connection) and in
// total, so that no one exhausts the node's file descriptors. Anyone who may publish on mpios.node.NODE.piece can read this node's
// checkpoints: restrict that subject with NATS permissions on a shared server.
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

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Config configures a Server.
type Config struct {
	Node      string // the node's name (job.ValidateNode)
	Store     string // the node's checkpoint store root; "" = no store, every request is refused
	Advertise string // host or IP the one-time listeners bind to: an address other nodes reach
	// Logf receives what went wrong with an offer after it was made; nil = discard.
	Logf func(format string, args ...any)
	// MaxOffers caps the offers not taken yet, in total and per requester (a NATS
	// connection); further requests are refused until some are taken or expire.
	// 0 = DefaultMaxOffers and DefaultMaxOffersPerRequester.
	MaxOffers, MaxOffersPerRequester int
	// Cap is the most bytes the store may hold (a memory store): a buddy copy beyond it is
	// refused with the reason. 0: no cap.
	Cap int64
}

// Server answers the piece and manifest requests of one node.
type Server struct {
	node, dir, advertise string
	capacity             int64
	logf                 func(format string, args ...any)
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
	s := &Server{node: cfg.Node, dir: cfg.Store, advertise: cfg.Advertise, capacity: cfg.Cap, logf: cfg.Logf, open: make(map[net.Listener]bool),
		offers: newOffers(cfg.MaxOffers, cfg.MaxOffersPerRequester)}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	var err error
	s.sub, err = nc.Subscribe(job.PieceSubject(cfg.Node), s.onRequest)
	if err != nil {
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.PieceSubject(cfg.Node), err)
	}
	s.msub, err = nc.Subscribe(job.ManifestsSubject, s.onManifests)
	if err != nil {
		s.sub.Unsubscribe()
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.ManifestsSubject, err)
	}
	s.csub, err = nc.Subscribe(job.PieceCopySubject(cfg.Node), s.onCopy)
	if err != nil {
		s.sub.Unsubscribe()
		s.msub.Unsubscribe()
		return nil, fmt.Errorf("pcmd: subscribe to %s: %w", job.PieceCopySubject(cfg.Node), err)
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
	var req job.PieceRequest
	if err := job.Decode(m.Data, &req); err != nil {
		s.refuse(m, ": malformed piece request")
		return
	}
	if err := req.Validate(); err != nil {
		s.refuse(m, ": %v", err)
		return
	}
	s.offer(m, fmt.Sprintf("piece %s/%d/rank %d", req.Job, req.Seq, req.Rank), false,
		func() (int64, func(net.Conn) error, func(), error) {
			store, err := ckptstore.Open(s.dir, &ckptstore.Options{Node: s.node})
			if err != nil {
				return 0, nil, nil, err
			}
			rc, info, err := store.OpenPiece(req.Job, req.Seq, req.Rank)
			if err != nil {
				return 0, nil, nil, err
			}
			send := func(c net.Conn) error {
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
	var req job.PieceCopyRequest
	if err := job.Decode(m.Data, &req); err != nil {
		s.refuse(m, ": malformed piece copy request")
		return
	}
	if err := req.Validate(); err != nil {
		s.refuse(m, ": %v", err)
		return
	}
	if req.Size < 0 {
		s.refuse(m, ": piece copy of %d bytes", req.Size)
		return
	}
	want := ckptstore.PieceInfo{Rank: req.Rank, Node: s.node, Size: req.Size, Checksum: req.Checksum}
	s.offer(m, fmt.Sprintf("copy of piece %s/%d/rank %d", req.Job, req.Seq, req.Rank), req.Sparse,
		func() (int64, func(net.Conn) error, func(), error) {
			store, err := ckptstore.Open(s.dir, &ckptstore.Options{Node: s.node})
			if err != nil {
				return 0, nil, nil, err
			}
			if err := store.Reserve(req.Size, s.capacity); err != nil {
				return 0, nil, nil, err
			}
			take := func(c net.Conn) error {
				var err error
				if req.Sparse {
					err = store.PutSparseCopy(req.Job, req.Seq, want, c)
				} else {
					err = store.PutCopy(req.Job, req.Seq, want, io.LimitReader(c, req.Size))
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

// refuse answers m with the reason this node makes no offer.
func (s *Server) refuse(m *nats.Msg, format string, args ...any) {
	r := job.PieceReply{Error: fmt.Sprintf("pcmd: node %s", s.node) + fmt.Sprintf(format, args...)}
	if data, err := job.Encode(r); err == nil {
		m.Respond(data)
	}
}

// offer makes a one-time offer for the requester of m (a copy taken as a sparse stream if
// sparse): prepare opens what it is about
// (its size, the handler of the connection that presents the token, and the release of what
// it opened), a listener waits for that connection, and the reply names it (or says why
// the node makes no offer).
func (s *Server) offer(m *nats.Msg, what string, sparse bool, prepare func() (int64, func(net.Conn) error, func(), error)) {
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
		if err := s.lend(ln, token, handle); err != nil {
			s.logf("%s: %v", what, err)
		}
	}()
	if data, err := job.Encode(job.PieceReply{Addr: ln.Addr().String(), Token: token, Size: size, Sparse: sparse}); err == nil {
		m.Respond(data)
	}
}

// release uncounts an offer of who that was taken, expired or withdrawn.
func (s *Server) release(who string) {
	s.mu.Lock()
	s.offers.release(who)
	s.mu.Unlock()
}

// onManifests answers with this node's committed manifests of the job, if it has any.
func (s *Server) onManifests(m *nats.Msg) {
	var req job.ManifestsRequest
	if s.dir == "" || m.Reply == "" || job.Decode(m.Data, &req) != nil || job.ValidateID(req.Job) != nil {
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
	if data, err := job.Encode(rep); err == nil {
		m.Respond(data)
	}
}

// lend hands the first connection that presents token to handle.
func (s *Server) lend(ln net.Listener, token []byte, handle func(net.Conn) error) error {
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
		c.SetDeadline(deadline)
		got := make([]byte, len(token))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, token) {
			c.Close()
			continue
		}
		c.SetDeadline(time.Time{})
		err = handle(c)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	}
}
