package ctlauth

import (
	"bytes"
	"fmt"
	"os"

	"github.com/nats-io/nkeys"
)

// maxKeyFile bounds the files read here: key lists of thousands of keys fit many times over.
const maxKeyFile = 16 << 20

// LoadAuthorizedKeys reads a node's authorized launchers file (see ParseAuthorizedKeys).
func LoadAuthorizedKeys(path string) (*AuthorizedKeys, error) {
	f, err := openBounded(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseAuthorizedKeys(f, path)
}

// LoadKnownNodes reads a launcher's known nodes file (see ParseKnownNodes).
func LoadKnownNodes(path string) (*KnownNodes, error) {
	f, err := openBounded(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseKnownNodes(f, path)
}

func openBounded(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ctlauth: %w", err)
	}
	if st, err := f.Stat(); err != nil || st.Size() > maxKeyFile {
		f.Close()
		return nil, fmt.Errorf("ctlauth: %s: not a key file of at most %d bytes", path, maxKeyFile)
	}
	return f, nil
}

// LoadSeed reads an NKey seed of the given kind (nkeys.PrefixByteUser for a launcher,
// nkeys.PrefixByteServer for a node) from path: a bare seed or a decorated .nk/.creds file.
// Like ssh with private keys, it refuses a file that users other than its owner may read.
func LoadSeed(path string, kind nkeys.PrefixByte) (nkeys.KeyPair, error) {
	f, err := openBounded(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ctlauth: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ctlauth: seed file %s has mode %v: others may read it (chmod 600)", path, st.Mode().Perm())
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && int64(len(data)) != 0 {
		return nil, fmt.Errorf("ctlauth: %w", err)
	}
	defer clear(data)
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		// ParseDecoratedNKey knows operator, account and user seeds only; a bare server seed
		// (a node's) is read as it is.
		kp, err = nkeys.FromSeed(bytes.TrimSpace(data))
	}
	if err != nil {
		return nil, fmt.Errorf("ctlauth: seed file %s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || nkeys.Prefix(pub) != kind {
		return nil, fmt.Errorf("ctlauth: seed file %s holds the key %s, want a %v key", path, pub, kind)
	}
	return kp, nil
}
