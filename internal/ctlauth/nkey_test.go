package ctlauth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

func userKey(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

func authorized(t testing.TB, text string) *AuthorizedKeys {
	t.Helper()
	a, err := ParseAuthorizedKeys(strings.NewReader(text), "authorized_launchers")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const spawnSubject = "mpios.node.n1.spawn"

func TestSpawnSignedByAnAuthorizedLauncherIsAccepted(t *testing.T) {
	kp, pub := userKey(t)
	v, err := NewKeyVerifier(authorized(t, pub+" alice@laptop\n"), ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewKeyWrapper(kp, Sender{Role: RoleLauncher, Node: "login1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := v.Verify(spawnSubject, wrap(t, w, spawnSubject, "spawn rank 0", t0), t0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Key != pub || string(m.Body) != "spawn rank 0" || m.From.Role != RoleLauncher {
		t.Errorf("message %+v", m)
	}
	if _, err := v.Verify(spawnSubject, wrap(t, w, spawnSubject, "x", t0), t0); err != nil {
		t.Errorf("second request: %v", err)
	}
}

func TestSpawnSignedByAnUnauthorizedLauncherIsRefused(t *testing.T) {
	_, alice := userKey(t)
	mallory, _ := userKey(t)
	v, _ := NewKeyVerifier(authorized(t, alice+"\n"), ReplayOptions{})
	w, _ := NewKeyWrapper(mallory, Sender{Role: RoleLauncher}, 0)
	if _, err := v.Verify(spawnSubject, wrap(t, w, spawnSubject, "x", t0), t0); !errors.Is(err, ErrUntrusted) {
		t.Errorf("unlisted key: %v, want ErrUntrusted", err)
	}
}

func TestSignedMessageForgeriesAreRefused(t *testing.T) {
	kp, pub := userKey(t)
	v, _ := NewKeyVerifier(authorized(t, pub+"\n"), ReplayOptions{})
	w, _ := NewKeyWrapper(kp, Sender{Role: RoleLauncher}, 0)
	data := wrap(t, w, spawnSubject, "x", t0)
	// Another node's spawn subject: the signature covers the subject.
	if _, err := v.Verify("mpios.node.n2.spawn", data, t0); !errors.Is(err, ErrForged) {
		t.Errorf("other subject: %v, want ErrForged", err)
	}
	// The authorized key claimed by an attacker who signs with his own key.
	mallory, _ := userKey(t)
	mw, _ := NewKeyWrapper(mallory, Sender{Role: RoleLauncher}, 0)
	e, _ := DecodeEnvelope(wrap(t, mw, spawnSubject, "x", t0))
	e.Key = pub
	if _, err := v.Verify(spawnSubject, marshal(t, &e), t0); !errors.Is(err, ErrForged) {
		t.Errorf("claimed key: %v, want ErrForged", err)
	}
	if _, err := v.Verify(spawnSubject, data, t0); err != nil {
		t.Errorf("original: %v", err)
	}
	if _, err := v.Verify(spawnSubject, data, t0); !errors.Is(err, ErrReplay) {
		t.Errorf("replay: %v, want ErrReplay", err)
	}
	if _, err := v.Verify(spawnSubject, wrap(t, w, spawnSubject, "x", t0.Add(-time.Hour)), t0); !errors.Is(err, ErrStale) {
		t.Errorf("an hour old: %v, want ErrStale", err)
	}
}

func TestAuthorizedLauncherKeyCannotSpeakAsANode(t *testing.T) {
	kp, pub := userKey(t)
	v, _ := NewKeyVerifier(authorized(t, pub+"\n"), ReplayOptions{})
	w, _ := NewKeyWrapper(kp, Sender{Role: RoleNode, Node: "n1"}, 0)
	if _, err := v.Verify(spawnSubject, wrap(t, w, spawnSubject, "x", t0), t0); !errors.Is(err, ErrUntrusted) {
		t.Errorf("launcher key as node: %v, want ErrUntrusted", err)
	}
}

func TestKeyWrapperNeedsASigningKey(t *testing.T) {
	curve, _ := nkeys.CreateCurveKeys()
	if _, err := NewKeyWrapper(curve, Sender{Role: RoleLauncher}, 0); err == nil {
		t.Error("curve key accepted for signing")
	}
	_, pub := userKey(t)
	public, _ := nkeys.FromPublicKey(pub)
	if _, err := NewKeyWrapper(public, Sender{Role: RoleLauncher}, 0); err == nil {
		t.Error("public-only key accepted for signing")
	}
}

func TestAuthorizedKeysFile(t *testing.T) {
	_, k1 := userKey(t)
	_, k2 := userKey(t)
	_, k3 := userKey(t)
	text := fmt.Sprintf(`# launchers allowed on this node

%s alice@laptop  (2026)
jobs="bob-*",jobs=ci-*,programs="/opt/mpios/bin/*" %s bob
  programs="/opt/my dir/*"	%s
`, k1, k2, k3)
	a := authorized(t, text)
	keys := a.Keys()
	if len(keys) != 3 {
		t.Fatalf("keys %+v", keys)
	}
	if keys[0].Key != k1 || keys[0].Comment != "alice@laptop  (2026)" || keys[0].Line != 3 || keys[0].Jobs != nil {
		t.Errorf("first %+v", keys[0])
	}
	b, ok := a.Lookup(k2)
	if !ok || strings.Join(b.Jobs, " ") != "bob-* ci-*" || strings.Join(b.Programs, " ") != "/opt/mpios/bin/*" || b.Comment != "bob" {
		t.Errorf("second %+v", b)
	}
	if c, _ := a.Lookup(k3); strings.Join(c.Programs, "") != "/opt/my dir/*" || c.Comment != "" {
		t.Errorf("third %+v", c)
	}
	permits := []struct {
		key, job, program string
		ok                bool
	}{
		{k1, "anything", "/bin/anything", true},
		{k2, "bob-1", "/opt/mpios/bin/heat2d", true},
		{k2, "ci-7", "/opt/mpios/bin/ring", true},
		{k2, "alice-1", "/opt/mpios/bin/heat2d", false},
		{k2, "bob-1", "/usr/bin/heat2d", false},
		{k2, "bob-1", "/opt/mpios/bin/sub/heat2d", false},
	}
	for _, p := range permits {
		k, _ := a.Lookup(p.key)
		if err := k.Permits(p.job, p.program); (err == nil) != p.ok {
			t.Errorf("%s may start %s %s: %v, want ok=%v", k.Comment, p.job, p.program, err, p.ok)
		}
	}
}

func TestAuthorizedKeysFileMistakesAreReportedWithTheirLine(t *testing.T) {
	_, user := userKey(t)
	server, _ := nkeys.CreateServer()
	spub, _ := server.PublicKey()
	curve, _ := nkeys.CreateCurveKeys()
	cpub, _ := curve.PublicKey()
	cases := map[string]string{
		"UNOTAKEY":                      `"UNOTAKEY" is not an NKey public key`,
		spub:                            "is a valid NKey but not a user key",
		cpub:                            "is a valid NKey but not a user key",
		"from=x " + user:                `unknown option "from"`,
		`jobs="a ` + user:               "unterminated quote",
		`jobs=` + user:                  "options without a key",
		`jobs="" ` + user:               "empty value",
		`jobs="a"x ` + user:             "want ',' or a space",
		`jobs="[" ` + user:              "syntax error in pattern",
		`programs="bin/*" ` + user:      "want an absolute path pattern",
		user + "\n" + user + " again":   "is already listed on line 1",
		strings.Repeat("x", 70000):      "longer than",
		`jobs="a",` + " " + user:        "want ',' or a space",
		`=a ` + user:                    "want NAME=",
		"# ok\n\n  jobs=a,=b " + user:   "line 3:",
		`jobs=a,programs=/b/* U` + user: "not an NKey public key",
	}
	for text, want := range cases {
		_, err := ParseAuthorizedKeys(strings.NewReader(text), "keys")
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.50q: %v, want a ParseError containing %q", text, err, want)
		}
	}
}

func TestKnownNodeKeyIsTrustedOnlyForItsNode(t *testing.T) {
	n1, _ := nkeys.CreateServer()
	p1, _ := n1.PublicKey()
	kn, err := ParseKnownNodes(strings.NewReader(`node="n1" `+p1+" rack 3\n"), "known_nodes")
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := kn.Node(p1); !ok || name != "n1" {
		t.Errorf("node of key: %q %v", name, ok)
	}
	v, _ := NewKeyVerifier(kn, ReplayOptions{})
	for _, tc := range []struct {
		from Sender
		ok   bool
	}{
		{Sender{Role: RoleNode, Node: "n1"}, true},
		{Sender{Role: RoleNode, Node: "n2"}, false},
		{Sender{Role: RoleLauncher}, false},
	} {
		w, _ := NewKeyWrapper(n1, tc.from, 0)
		_, err := v.Verify("mpios.nodes.heartbeat", wrap(t, w, "mpios.nodes.heartbeat", "x", t0), t0)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUntrusted)) {
			t.Errorf("n1's key as %s: %v", tc.from, err)
		}
	}
	for text, want := range map[string]string{
		p1:                           `want exactly one node="NAME"`,
		`node="a.b" ` + p1:           "node name",
		`node=a,node=b ` + p1:        "exactly one",
		`jobs=x ` + p1:               "unknown option",
		`node=n1 ` + mustUserPub(t):  "not a server key",
		`node=n1 ` + p1 + "\n" + p1:  "line 2",
		`node=n1 ` + p1 + "\nUBAD\n": `line 2: "UBAD"`,
	} {
		if _, err := ParseKnownNodes(strings.NewReader(text), "known"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", text, err, want)
		}
	}
}

func mustUserPub(t *testing.T) string {
	_, pub := userKey(t)
	return pub
}

func TestSealedSecretOpensOnlyOnItsNodeAndJob(t *testing.T) {
	n1, err := NewNodeKeys("n1", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := NewNodeKeys("n2", rand.Reader)
	card, err := n1.Card()
	if err != nil {
		t.Fatal(err)
	}
	launcher, _ := nkeys.CreateCurveKeys()
	lpub, _ := launcher.PublicKey()
	secret := testSecret(9)
	box, err := SealSecret("job1", secret, launcher, card, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(box), string(secret)) {
		t.Fatal("the secret is in the box in clear")
	}
	got, err := OpenSecret("job1", box, lpub, n1.Curve)
	if err != nil || string(got) != string(secret) {
		t.Fatalf("n1 opens: %x, %v", got, err)
	}
	other, _ := nkeys.CreateCurveKeys()
	opub, _ := other.PublicKey()
	tampered := append([]byte(nil), box...)
	tampered[len(tampered)-1] ^= 1
	refusals := map[string]func() ([]byte, error){
		"another node":       func() ([]byte, error) { return OpenSecret("job1", box, lpub, n2.Curve) },
		"another sender key": func() ([]byte, error) { return OpenSecret("job1", box, opub, n1.Curve) },
		"another job":        func() ([]byte, error) { return OpenSecret("job2", box, lpub, n1.Curve) },
		"altered":            func() ([]byte, error) { return OpenSecret("job1", tampered, lpub, n1.Curve) },
		"garbage":            func() ([]byte, error) { return OpenSecret("job1", []byte("xkv1garbage"), lpub, n1.Curve) },
	}
	for name, open := range refusals {
		if s, err := open(); !errors.Is(err, ErrCannotOpen) || s != nil {
			t.Errorf("%s: %x, %v, want ErrCannotOpen", name, s, err)
		}
	}
	if _, err := SealSecret("job1", secret, launcher, NodeCard{Node: "n1", SigningKey: card.SigningKey, CurveKey: lpub[:10]}, rand.Reader); err == nil {
		t.Error("sealed for a bad curve key")
	}
}

func TestNodeCardIsBelievedOnlyFromItsKnownNode(t *testing.T) {
	n1, _ := NewNodeKeys("n1", rand.Reader)
	card, _ := n1.Card()
	kn, err := ParseKnownNodes(strings.NewReader(`node=n1 `+card.SigningKey+"\n"), "known")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := NewKeyVerifier(kn, ReplayOptions{})
	const subject = "mpios.node.n1.info"
	wrappers := map[nkeys.KeyPair]*KeyWrapper{}
	publish := func(kp nkeys.KeyPair, c NodeCard) ([]byte, error) {
		if wrappers[kp] == nil {
			w, err := NewKeyWrapper(kp, Sender{Role: RoleNode, Node: "n1"}, 0)
			if err != nil {
				return nil, err
			}
			wrappers[kp] = w
		}
		return wrappers[kp].Wrap(subject, marshal(t, &c), t0)
	}
	data, err := publish(n1.Signing, card)
	if err != nil {
		t.Fatal(err)
	}
	m, err := v.Verify(subject, data, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := CardFromMessage(m); err != nil || got != card {
		t.Errorf("card %+v, %v", got, err)
	}
	// An impostor publishes a card for n1 with its own keys: its signing key is not n1's.
	evil, _ := NewNodeKeys("n1", rand.Reader)
	ecard, _ := evil.Card()
	data, _ = publish(evil.Signing, ecard)
	if _, err := v.Verify(subject, data, t0); !errors.Is(err, ErrUntrusted) {
		t.Errorf("impostor card: %v, want ErrUntrusted", err)
	}
	// n1's key signing a card that names another signing key (replaced curve key with it).
	swapped := card
	swapped.SigningKey = ecard.SigningKey
	data, _ = publish(n1.Signing, swapped)
	m, err = v.Verify(subject, data, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CardFromMessage(m); !errors.Is(err, ErrUntrusted) {
		t.Errorf("card naming another key: %v, want ErrUntrusted", err)
	}
	if _, err := CardFromMessage(Message{From: m.From, Key: m.Key, Body: []byte("x")}); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage card: %v", err)
	}
}

func TestEnvelopeOfTheOtherSchemeIsRefused(t *testing.T) {
	kp, pub := userKey(t)
	kv, _ := NewKeyVerifier(authorized(t, pub+"\n"), ReplayOptions{})
	kw, _ := NewKeyWrapper(kp, Sender{Role: RoleLauncher}, 0)
	jw, jv := jobPair(t, Sender{Role: RoleLauncher}, ReplayOptions{})
	if _, err := jv.Verify(ctl, wrap(t, kw, ctl, "x", t0), t0); !errors.Is(err, ErrMalformed) {
		t.Errorf("signed envelope to the job verifier: %v, want ErrMalformed", err)
	}
	if _, err := kv.Verify(ctl, wrap(t, jw, ctl, "x", t0), t0); !errors.Is(err, ErrMalformed) {
		t.Errorf("job envelope to the key verifier: %v, want ErrMalformed", err)
	}
}

func BenchmarkKeyWrapVerify(b *testing.B) {
	kp, pub := userKey(b)
	v, _ := NewKeyVerifier(authorized(b, pub+"\n"), ReplayOptions{})
	w, _ := NewKeyWrapper(kp, Sender{Role: RoleLauncher}, 0)
	body := make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		data, err := w.Wrap(spawnSubject, body, t0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.Verify(spawnSubject, data, t0); err != nil {
			b.Fatal(err)
		}
	}
}
