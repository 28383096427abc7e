package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mpios/mpios/internal/natsconn"
)

// embeddedNATS is the job-private NATS server mpirun runs when no --nats URL is given.
type embeddedNATS struct {
	srv *server.Server
	url string // with credentials
}

// startEmbeddedNATS starts a server on host:random-port that accepts only a fresh random
// user/password, so other local users cannot join or disturb the job's control plane.
func startEmbeddedNATS(host, jobID string) (*embeddedNATS, error) {
	user, err := randomHex(8)
	if err != nil {
		return nil, err
	}
	pass, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:      "mpirun-" + jobID,
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
		return nil, fmt.Errorf("launch: embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("launch: embedded NATS server on %s did not become ready", host)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, fmt.Errorf("launch: embedded NATS server: unexpected listen address %v", srv.Addr())
	}
	u := url.URL{
		Scheme: "nats",
		User:   url.UserPassword(user, pass),
		Host:   net.JoinHostPort(host, strconv.Itoa(addr.Port)),
	}
	return &embeddedNATS{srv: srv, url: u.String()}, nil
}

func (e *embeddedNATS) shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("launch: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// RedactURL returns a NATS URL (or comma-separated list of URLs) with any user, password or
// token removed, for printing.
func RedactURL(s string) string { return natsconn.RedactURL(s) }
