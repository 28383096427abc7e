// Package natsconn builds the connection to the NATS control plane for every mpios program
// (mpirun, pcmd, the ranks) from one description: the server URLs, how to authenticate, and
// TLS. Credentials come from files or the environment, so that they need not appear on a
// command line, which every user of the machine can read.
package natsconn

import (
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlplane"
)

// Options says how to reach and authenticate to NATS. At most one of CredsFile, NKeyFile,
// Token (or TokenFile) and User may be set; credentials embedded in URL also work. The TLS
// files are independent of them: CAFile verifies the server, CertFile and KeyFile identify
// the client to a server that asks for certificates.
type Options struct {
	URL       string // one or more comma-separated server URLs; tls:// requires TLS
	Name      string // connection name, shown by the server's monitoring
	CredsFile string // a NATS .creds file (user JWT and NKey seed), as issued by nsc
	NKeyFile  string // a file holding an NKey user seed (SU...)
	Token     string
	TokenFile string // a file holding the token (surrounding white space is ignored)
	User      string
	Password  string
	CAFile    string // PEM certificates of the CAs that sign the server's certificate
	CertFile  string // PEM client certificate (with KeyFile)
	KeyFile   string // PEM private key of CertFile
}

// Validate checks that the options are consistent.
func (o Options) Validate() error {
	if o.URL == "" {
		return errors.New("natsconn: no NATS URL")
	}
	return o.validateAuth()
}

func (o Options) validateAuth() error {
	n := 0
	for _, set := range []bool{o.CredsFile != "", o.NKeyFile != "", o.Token != "" || o.TokenFile != "", o.User != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("natsconn: give only one of a creds file, an nkey seed file, a token, or a user and password")
	case o.Token != "" && o.TokenFile != "":
		return errors.New("natsconn: give a token or a token file, not both")
	case (o.User == "") != (o.Password == ""):
		return errors.New("natsconn: a NATS user needs a password and a password needs a user")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return errors.New("natsconn: a client certificate needs its key file and a key file its certificate")
	}
	return nil
}

// AuthOptions returns the nats.go options that authenticate and secure a connection as o
// says; URL and Name are not used. Files are read now, so that a missing or unreadable one
// is reported before connecting.
func (o Options) AuthOptions() ([]nats.Option, error) {
	if err := o.validateAuth(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	for _, f := range []string{o.CredsFile, o.CAFile, o.CertFile, o.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("natsconn: %w", err)
		}
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("natsconn: nkey seed file %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	case o.TokenFile != "":
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("natsconn: %w", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return nil, fmt.Errorf("natsconn: token file %s is empty", o.TokenFile)
		}
		opts = append(opts, nats.Token(token))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	return opts, nil
}

// Connect connects to NATS and keeps reconnecting forever (ctlplane.Options); logger (nil:
// none) and watch (nil: none) follow the connection's ups and downs. closed, if not nil, is
// called when the connection is closed for good (by Close or a fatal error).
func (o Options) Connect(logger *log.Logger, watch *ctlplane.Watch, closed func()) (*nats.Conn, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	auth, err := o.AuthOptions()
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if logger != nil {
			logger.Printf(format, args...)
		}
	}
	// Reconnect forever and report the connection's ups and downs to watch (ctlplane).
	opts := append(append(auth, ctlplane.Options(watch, logf)...),
		nats.Name(o.Name),
		nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				logf("NATS: %s: %v", sub.Subject, err)
			} else {
				logf("NATS: %v", err)
			}
		}),
	)
	if closed != nil {
		opts = append(opts, nats.ClosedHandler(func(*nats.Conn) { closed() }))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect to NATS at %s: %w", RedactURL(o.URL), err)
	}
	return nc, nil
}

// RedactURL returns a NATS URL (or comma-separated list of URLs) with any user, password or
// token removed, for printing.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			// Unparseable or no scheme: keep only what follows a possible "creds@".
			if at := strings.LastIndex(p, "@"); at >= 0 {
				p = p[at+1:]
			}
			parts[i] = p
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
