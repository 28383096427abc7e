package natsconn

import (
	"os"

	"github.com/urfave/cli/v2"
)

// CLI describes a command's NATS flags.
type CLI struct {
	// EnvPrefix names the environment variables read when a flag is not given:
	// EnvPrefix+NAME, NAME one of CREDS, NKEY, TOKEN, TOKEN_FILE, USER, PASSWORD, CA, CERT,
	// KEY.
	EnvPrefix string
	// SecretFlags adds --nats-token and --nats-pass, which put a secret on the command line
	// where every local user can read it (ps): only for compatibility. Without them the
	// token and password come from the environment or a file only.
	SecretFlags bool
}

// Flags returns the command-line flags of Options but URL.
func (k CLI) Flags() []cli.Flag {
	env := func(names ...string) []string {
		for i, n := range names {
			names[i] = k.EnvPrefix + n
		}
		return names
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: "nats-creds", EnvVars: env("CREDS"), Usage: "NATS credentials `FILE` (user JWT and nkey seed, as nsc issues them)"},
		&cli.StringFlag{Name: "nats-nkey", EnvVars: env("NKEY"), Usage: "`FILE` holding the NKey user seed to authenticate to NATS with"},
		&cli.StringFlag{Name: "nats-token-file", EnvVars: env("TOKEN_FILE"), Usage: "`FILE` holding the NATS authentication token"},
		&cli.StringFlag{Name: "nats-user", EnvVars: env("USER"), Usage: "NATS `USER` (password in $" + k.EnvPrefix + "PASSWORD)"},
		&cli.StringFlag{Name: "nats-ca", EnvVars: env("CA"), Usage: "PEM `FILE` of the CAs that sign the NATS server's certificate (TLS)"},
		&cli.StringFlag{Name: "nats-cert", EnvVars: env("CERT"), Usage: "PEM client certificate `FILE` for NATS servers that verify clients (with --nats-key)"},
		&cli.StringFlag{Name: "nats-key", EnvVars: env("KEY"), Usage: "PEM private key `FILE` of --nats-cert"},
	}
	if k.SecretFlags {
		flags = append(flags,
			&cli.StringFlag{Name: "nats-token", EnvVars: env("TOKEN"), Usage: "NATS authentication `TOKEN` (prefer $" + k.EnvPrefix + "TOKEN or --nats-token-file)"},
			&cli.StringFlag{Name: "nats-pass", EnvVars: env("PASSWORD", "PASS"), Usage: "NATS `PASSWORD` of --nats-user (prefer $" + k.EnvPrefix + "PASSWORD)"})
	}
	return flags
}

// Options returns the Options c's flags (from Flags) and the environment set, with URL url.
func (k CLI) Options(c *cli.Context, url string) Options {
	o := Options{
		URL: url, CredsFile: c.String("nats-creds"), NKeyFile: c.String("nats-nkey"),
		TokenFile: c.String("nats-token-file"), User: c.String("nats-user"),
		CAFile: c.String("nats-ca"), CertFile: c.String("nats-cert"), KeyFile: c.String("nats-key"),
	}
	if k.SecretFlags {
		o.Token, o.Password = c.String("nats-token"), c.String("nats-pass")
	} else {
		o.Token, o.Password = os.Getenv(k.EnvPrefix+"TOKEN"), os.Getenv(k.EnvPrefix+"PASSWORD")
	}
	return o
}
