package ctlauth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestLoadSeedRefusesFilesOthersCanRead(t *testing.T) {
	dir := t.TempDir()
	user, pub := userKey(t)
	seed, _ := user.Seed()
	server, _ := nkeys.CreateServer()
	sseed, _ := server.Seed()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if kp, err := LoadSeed(write("node.nk", sseed, 0o600), nkeys.PrefixByteServer); err != nil || kp == nil {
		t.Errorf("node seed: %v", err)
	}
	kp, err := LoadSeed(write("ok.nk", append(seed, '\n'), 0o600), nkeys.PrefixByteUser)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := kp.PublicKey(); got != pub {
		t.Errorf("loaded %s, want %s", got, pub)
	}
	for name, tc := range map[string]struct {
		path string
		want string
	}{
		"group-readable": {write("open.nk", seed, 0o640), "others may read it"},
		"server seed":    {write("server.nk", sseed, 0o600), "want a user key"},
		"garbage":        {write("junk.nk", []byte("not a seed"), 0o600), "seed file"},
		"missing":        {filepath.Join(dir, "none"), "no such file"},
	} {
		if _, err := LoadSeed(tc.path, nkeys.PrefixByteUser); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestLoadKeyFiles(t *testing.T) {
	dir := t.TempDir()
	_, pub := userKey(t)
	n1, _ := nkeys.CreateServer()
	npub, _ := n1.PublicKey()
	ak := filepath.Join(dir, "authorized_launchers")
	kn := filepath.Join(dir, "known_nodes")
	os.WriteFile(ak, []byte(pub+" alice\n"), 0o644)
	os.WriteFile(kn, []byte(`node=n1 `+npub+"\n"), 0o644)
	a, err := LoadAuthorizedKeys(ak)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := a.Lookup(pub); !ok || k.Comment != "alice" {
		t.Errorf("authorized %+v", a.Keys())
	}
	k, err := LoadKnownNodes(kn)
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := k.Node(npub); name != "n1" {
		t.Errorf("known node %q", name)
	}
	if _, err := LoadAuthorizedKeys(kn); err == nil || !strings.Contains(err.Error(), kn+" line 1") {
		t.Errorf("known nodes read as launchers: %v", err)
	}
	if _, err := LoadKnownNodes(filepath.Join(dir, "none")); err == nil {
		t.Error("missing file loaded")
	}
}
