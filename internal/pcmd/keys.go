package pcmd

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/ctlauth"
)

// nodeKeys returns the node's key pairs: its signing key from seedFile ("" = a fresh one)
// and a fresh curve key, which lives as long as this pcmd (secrets are sealed per spawn).
func nodeKeys(node, seedFile string) (ctlauth.NodeKeys, error) {
	keys, err := ctlauth.NewNodeKeys(node, rand.Reader)
	if err != nil {
		return keys, fmt.Errorf("pcmd: %w", err)
	}
	if seedFile != "" {
		if keys.Signing, err = ctlauth.LoadSeed(seedFile, nkeys.PrefixByteServer); err != nil {
			return keys, fmt.Errorf("pcmd: --node-key: %w", err)
		}
	}
	return keys, nil
}

// signedCard returns the node's key card signed by its signing key, as NodeInfo carries it.
func signedCard(keys ctlauth.NodeKeys) ([]byte, error) {
	data, err := keys.SignedCard(time.Now())
	if err != nil {
		return nil, fmt.Errorf("pcmd: %w", err)
	}
	return data, nil
}
