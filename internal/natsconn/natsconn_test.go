package natsconn_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/natsconn/natstest"
)

// roundTrip checks that the connection o makes carries a request and its reply.
func roundTrip(t *testing.T, o natsconn.Options) error {
	t.Helper()
	nc, err := o.Connect(nil, nil, nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.Subscribe("echo", func(m *nats.Msg) { m.Respond(m.Data) }); err != nil {
		return err
	}
	m, err := nc.Request("echo", []byte("ping"), 5*time.Second)
	if err != nil {
		return err
	}
	if string(m.Data) != "ping" {
		t.Errorf("echo %q", m.Data)
	}
	return nil
}

func TestTLSWithTheServersCAAndAClientCertificateConnects(t *testing.T) {
	p := natstest.NewPKI(t, t.TempDir())
	url := natstest.TLSServer(t, p, true)
	if err := roundTrip(t, natsconn.Options{URL: url, CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey}); err != nil {
		t.Fatal(err)
	}
}

func TestTLSServerNotSignedByTheGivenCAIsRefused(t *testing.T) {
	p := natstest.NewPKI(t, t.TempDir())
	other := natstest.NewPKI(t, t.TempDir())
	url := natstest.TLSServer(t, p, false)
	if err := roundTrip(t, natsconn.Options{URL: url, CAFile: p.CAFile}); err != nil {
		t.Fatalf("own CA: %v", err)
	}
	for name, o := range map[string]natsconn.Options{
		"another CA":          {URL: url, CAFile: other.CAFile},
		"the system's CAs":    {URL: url},
		"plain nats:// to it": {URL: strings.Replace(url, "tls://", "nats://", 1), CAFile: other.CAFile},
	} {
		if err := roundTrip(t, o); err == nil {
			t.Errorf("%s: connected", name)
		}
	}
}

func TestTLSServerVerifyingClientsRefusesOneWithoutCertificate(t *testing.T) {
	p := natstest.NewPKI(t, t.TempDir())
	other := natstest.NewPKI(t, t.TempDir())
	url := natstest.TLSServer(t, p, true)
	for name, o := range map[string]natsconn.Options{
		"no certificate":                 {URL: url, CAFile: p.CAFile},
		"a certificate of another CA":    {URL: url, CAFile: p.CAFile, CertFile: other.ClientCert, KeyFile: other.ClientKey},
		"the server's own key as client": {URL: url, CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ServerKey},
	} {
		if err := roundTrip(t, o); err == nil {
			t.Errorf("%s: connected", name)
		}
	}
}

func TestTokenFromAFileOrTheEnvironment(t *testing.T) {
	port := natstest.StartServer(t, func(o *server.Options) { o.Authorization = "s3cret-token" })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, natsconn.Options{URL: url, TokenFile: file}); err != nil {
		t.Errorf("token file: %v", err)
	}
	env := natsconn.FromEnviron(func(k string) string { return map[string]string{natsconn.EnvToken: "s3cret-token"}[k] })
	env.URL = url
	if err := roundTrip(t, env); err != nil {
		t.Errorf("token from the environment: %v", err)
	}
	if err := roundTrip(t, natsconn.Options{URL: url, Token: "guess"}); err == nil {
		t.Error("wrong token connected")
	}
	if err := roundTrip(t, natsconn.Options{URL: url}); err == nil {
		t.Error("no token connected")
	}
}

func TestNKeySeedFile(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	port := natstest.StartServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	dir := t.TempDir()
	file := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, natsconn.Options{URL: url, NKeyFile: file}); err != nil {
		t.Errorf("listed nkey: %v", err)
	}
	other, _ := nkeys.CreateUser()
	oseed, _ := other.Seed()
	ofile := filepath.Join(dir, "other.nk")
	if err := os.WriteFile(ofile, oseed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, natsconn.Options{URL: url, NKeyFile: ofile}); err == nil {
		t.Error("unlisted nkey connected")
	}
}

func TestOptionMistakesAreReportedBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	missing := filepath.Join(dir, "missing")
	cases := map[string]natsconn.Options{
		"no NATS URL":                        {},
		"give only one of":                   {URL: "nats://x", Token: "t", User: "u", Password: "p"},
		"a token or a token file, not both":  {URL: "nats://x", Token: "t", TokenFile: empty},
		"a NATS user needs a password":       {URL: "nats://x", User: "u"},
		"needs its key file":                 {URL: "nats://x", CertFile: "c"},
		"token file " + empty + " is empty":  {URL: "nats://x", TokenFile: empty},
		"no such file":                       {URL: "nats://x", CAFile: missing},
		"creds: no such file":                {URL: "nats://x", CredsFile: missing},
		"nkey seed file " + missing:          {URL: "nats://x", NKeyFile: missing},
		"only one of a creds file, an nkey ": {URL: "nats://x", CredsFile: missing, NKeyFile: missing},
	}
	for want, o := range cases {
		_, err := o.Connect(nil, nil, nil)
		if want == "creds: no such file" {
			want = "no such file"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error containing %q", o, err, want)
		}
	}
}

func TestEnvironmentRoundTrip(t *testing.T) {
	o := natsconn.Options{CredsFile: "/c", NKeyFile: "/n", Token: "t", TokenFile: "/t", User: "u", Password: "p", CAFile: "/ca", CertFile: "/cert", KeyFile: "/key"}
	env := map[string]string{}
	for _, kv := range o.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "MPIOS_NATS_") {
			t.Errorf("variable %s", k)
		}
		env[k] = v
	}
	if got := natsconn.FromEnviron(func(k string) string { return env[k] }); got != o {
		t.Errorf("round trip %+v, want %+v", got, o)
	}
	if got := (natsconn.Options{URL: "nats://x"}).Environ(); got != nil {
		t.Errorf("no options give %q", got)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://u:p@h:4222":                    "nats://h:4222",
		"nats://tok@h:1, tls://a:b@g:2":        "nats://h:1,tls://g:2",
		"u:p@h:4222":                           "h:4222",
		"tls://127.0.0.1:4222":                 "tls://127.0.0.1:4222",
		"nats://%zz:secret@host:4222/x?y=":     "host:4222/x?y=",
		"nats://tok@h:1,nats://a:b@h2:2":       "nats://h:1,nats://h2:2",
		"tls://u:p%40x@host.example:4443/?a=b": "tls://host.example:4443/?a=b",
	} {
		if got := natsconn.RedactURL(in); got != want {
			t.Errorf("natsconn.RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsCredentialFindsTokensPasswordsAndURLsWithUsers(t *testing.T) {
	for kv, want := range map[string]bool{
		"MPIOS_NATS_TOKEN=s3cret":                          true,
		"MPIOS_NATS_PASSWORD=pw":                           true,
		"MPIOS_NATS_URL=nats://u:p@10.0.0.1:4222":          true,
		"MPIOS_NATS_URL=nats://10.0.0.1:4222,nats://t@h:1": true,
		"MPIOS_NATS_URL=nats://10.0.0.1:4222":              false,
		"MPIOS_NATS_URL=nats://a:1, nats://b:2":            false,
		"MPIOS_NATS_TOKEN_FILE=/run/token":                 false,
		"MPIOS_NATS_USER=alice":                            false,
		"MPIOS_NATS_TOKEN=":                                false,
		"MPIOS_SECRET=00":                                  false,
	} {
		if got := natsconn.IsCredential(kv); got != want {
			t.Errorf("IsCredential(%q) = %v, want %v", kv, got, want)
		}
	}
}
