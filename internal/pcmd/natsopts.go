package pcmd

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/natsembed"
)

// NATSOptions says how to reach and authenticate to the NATS control plane. At most one of
// CredsFile, Token and User may be set; credentials embedded in URL also work.
type NATSOptions struct {
	URL       string // one or more comma-separated server URLs
	CredsFile string // a NATS .creds file (user JWT and nkey seed), as issued by nsc
	Token     string
	User      string
	Password  string
	Name      string // connection name, shown by the server's monitoring
}

// Validate checks that the options are consistent.
func (o NATSOptions) Validate() error {
	if o.URL == "" {
		return errors.New("pcmd: no NATS URL")
	}
	n := 0
	for _, set := range []bool{o.CredsFile != "", o.Token != "", o.User != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("pcmd: give only one of a creds file, a token, or a user and password")
	}
	if (o.User == "") != (o.Password == "") {
		return errors.New("pcmd: a NATS user needs a password and a password needs a user")
	}
	return nil
}

// Connect connects to NATS and keeps reconnecting forever; logger (nil: none) receives the
// connection's ups and downs. closed, if not nil, is called when the connection is closed
// for good (by Close or a fatal error).
func (o NATSOptions) Connect(logger *log.Logger, closed func()) (*nats.Conn, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if logger != nil {
			logger.Printf(format, args...)
		}
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logf("lost connection to NATS: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logf("reconnected to NATS at %s", natsembed.RedactURL(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				logf("NATS: %s: %v", sub.Subject, err)
			} else {
				logf("NATS: %v", err)
			}
		}),
	}
	if closed != nil {
		opts = append(opts, nats.ClosedHandler(func(*nats.Conn) { closed() }))
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("pcmd: connect to NATS at %s: %w", natsembed.RedactURL(o.URL), err)
	}
	return nc, nil
}
