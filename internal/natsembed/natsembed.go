// Package natsembed runs the job-private NATS server mpirun starts when no --nats URL is
// given.
package natsembed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a job-private NATS server.
type Server struct {
	srv *server.Server
	url string // with credentials
}

// Start starts a server named name on host:random-port that accepts only a fresh random
// user/password, so other local users cannot join or disturb the job's control plane.
func Start(host, name string) (*Server, error) {
	user, err := randomHex(8)
	if err != nil {
		return nil, err
	}
	pass, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:      name,
		Host:            host,
		Port:            server.RANDOM_PORT,
		NoLog:           true,
		NoSigs:          true, // mpirun owns signal handling
		NoSystemAccount: true,
		Username:        user,
		Password:        pass,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("natsembed: embedded NATS server on %s did not become ready", host)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, fmt.Errorf("natsembed: embedded NATS server: unexpected listen address %v", srv.Addr())
	}
	u := url.URL{
		Scheme: "nats",
		User:   url.UserPassword(user, pass),
		Host:   net.JoinHostPort(host, strconv.Itoa(addr.Port)),
	}
	return &Server{srv: srv, url: u.String()}, nil
}

// URL is the server's client URL, with the credentials: give it only to the job.
func (e *Server) URL() string { return e.url }

// Shutdown stops the server and waits until it has.
func (e *Server) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("natsembed: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
