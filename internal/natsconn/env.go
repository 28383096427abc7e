package natsconn

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables that carry Options to the ranks (and that mpirun reads): the rank's
// launcher sets them beside job.EnvNATS. Those naming files are passed as paths; the file
// must exist at that path where the rank runs.
const (
	EnvCreds     = "MPIOS_NATS_CREDS"      // Options.CredsFile
	EnvNKey      = "MPIOS_NATS_NKEY"       // Options.NKeyFile
	EnvToken     = "MPIOS_NATS_TOKEN"      // Options.Token
	EnvTokenFile = "MPIOS_NATS_TOKEN_FILE" // Options.TokenFile
	EnvUser      = "MPIOS_NATS_USER"       // Options.User
	EnvPassword  = "MPIOS_NATS_PASSWORD"   // Options.Password
	EnvCA        = "MPIOS_NATS_CA"         // Options.CAFile
	EnvCert      = "MPIOS_NATS_CERT"       // Options.CertFile
	EnvKey       = "MPIOS_NATS_KEY"        // Options.KeyFile
)

// envFields pairs each variable with its field, for reading and writing alike.
func (o *Options) envFields() []struct {
	name  string
	field *string
} {
	return []struct {
		name  string
		field *string
	}{
		{EnvCreds, &o.CredsFile}, {EnvNKey, &o.NKeyFile}, {EnvToken, &o.Token}, {EnvTokenFile, &o.TokenFile},
		{EnvUser, &o.User}, {EnvPassword, &o.Password}, {EnvCA, &o.CAFile}, {EnvCert, &o.CertFile}, {EnvKey, &o.KeyFile},
	}
}

// FromEnviron returns the authentication and TLS options set in the environment through
// getenv (os.Getenv if nil); URL and Name are left empty.
func FromEnviron(getenv func(string) string) Options {
	if getenv == nil {
		getenv = os.Getenv
	}
	var o Options
	for _, f := range o.envFields() {
		*f.field = getenv(f.name)
	}
	return o
}

// Environ returns o's authentication and TLS options as KEY=VALUE pairs for a rank's
// environment (the inverse of FromEnviron); unset options are left out.
func (o Options) Environ() []string {
	var out []string
	for _, f := range o.envFields() {
		if *f.field != "" {
			out = append(out, f.name+"="+*f.field)
		}
	}
	return out
}

// Abs returns o with every file option made absolute (relative to the current directory),
// so that it still names the same file for a rank started elsewhere.
func (o Options) Abs() (Options, error) {
	for _, f := range []*string{&o.CredsFile, &o.NKeyFile, &o.TokenFile, &o.CAFile, &o.CertFile, &o.KeyFile} {
		if *f == "" {
			continue
		}
		abs, err := filepath.Abs(*f)
		if err != nil {
			return o, fmt.Errorf("natsconn: %w", err)
		}
		*f = abs
	}
	return o, nil
}

// EnvURL is the variable of the NATS URL (job.EnvNATS, repeated here so that this package
// needs no other): credentials may be embedded in it.
const EnvURL = "MPIOS_NATS_URL"

// IsCredential reports whether the environment entry kv (KEY=VALUE) carries a NATS
// credential itself, not the path of a file holding one: a token, a password, or a URL
// with a user or password in it. Such entries travel to a remote rank only sealed for its
// node.
func IsCredential(kv string) bool {
	name, value, _ := strings.Cut(kv, "=")
	switch name {
	case EnvToken, EnvPassword:
		return value != ""
	case EnvURL:
		return RedactURL(value) != strings.Join(trimmed(strings.Split(value, ",")), ",")
	}
	return false
}

func trimmed(parts []string) []string {
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}
