package ctlauth

import (
	"fmt"
	"sync"

	"github.com/mpios/mpios/internal/job"
)

// A node's description (job.NodeInfo: its heartbeats, its replies on its info subject)
// travels signed by the node's key, the one its key card names: a forged heartbeat ("node n1
// is leaving") or a forged description must not make a launcher give up a node's ranks, nor
// its peers move ranks there.

// NodeInfoOf returns the job.NodeInfo in m, a message a KeyVerifier (or VerifyStatement)
// verified, after checking that it describes the node that signed it with the key its own
// key card names. Whether that key is the right one for the node is the KeySet's decision.
func NodeInfoOf(m Message) (job.NodeInfo, error) {
	info, err := decodeNodeInfo(m)
	if err != nil {
		return info, err
	}
	return info, checkOwnCard(info, m.Key)
}

// checkOwnCard checks that info's key card is signed by key and names it for info's node.
func checkOwnCard(info job.NodeInfo, key string) error {
	cm, err := VerifyStatement(job.NodeCardSubject(info.Name), info.Card, AnyKey{})
	if err != nil {
		return fmt.Errorf("node %s: key card: %w", info.Name, err)
	}
	card, err := CardFromMessage(cm)
	if err != nil {
		return err
	}
	if card.Node != info.Name || card.SigningKey != key {
		return fmt.Errorf("%w: node %s signed with %s, its card names %s", ErrUntrusted, info.Name, key, card.SigningKey)
	}
	return nil
}

// VerifyNodeView verifies data, a node's signed answer to discovery (job.NodeView: itself and
// the peers it heard) received on subject (the requester's own inbox), against keys: signed
// by the key the node's own card names, as that node. The peers are the node's word.
func VerifyNodeView(subject string, data []byte, keys KeySet) (job.NodeView, error) {
	var v job.NodeView
	m, err := VerifyStatement(subject, data, keys)
	if err != nil {
		return v, err
	}
	if err := job.Decode(m.Body, &v); err != nil {
		return v, fmt.Errorf("%w: node view: %v", ErrMalformed, err)
	}
	if err := v.Self.Validate(); err != nil {
		return v, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m.From.Role != RoleNode || m.From.Node != v.Self.Name {
		return v, fmt.Errorf("%w: view of node %s sent as %s", ErrUntrusted, v.Self.Name, m.From)
	}
	return v, checkOwnCard(v.Self, m.Key)
}

// PinnedNodeInfo returns the job.NodeInfo in m, a verified message, from a node whose key the
// receiver already pinned: signed by that key, its card needs no second check (heartbeats
// come every second from every node; a signature check each is enough).
func PinnedNodeInfo(m Message, pinned string) (job.NodeInfo, error) {
	if pinned == "" || m.Key != pinned {
		return NodeInfoOf(m)
	}
	return decodeNodeInfo(m)
}

func decodeNodeInfo(m Message) (job.NodeInfo, error) {
	var info job.NodeInfo
	if err := job.Decode(m.Body, &info); err != nil {
		return info, fmt.Errorf("%w: node info: %v", ErrMalformed, err)
	}
	if err := info.Validate(); err != nil {
		return info, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m.From.Role != RoleNode || m.From.Node != info.Name {
		return info, fmt.Errorf("%w: description of node %s sent as %s", ErrUntrusted, info.Name, m.From)
	}
	return info, nil
}

// VerifyNodeInfo verifies data, a node's signed description received on subject (a reply
// on the requester's own inbox, which nobody can replay there), against keys, and returns it.
func VerifyNodeInfo(subject string, data []byte, keys KeySet) (job.NodeInfo, error) {
	m, err := VerifyStatement(subject, data, keys)
	if err != nil {
		return job.NodeInfo{}, err
	}
	return NodeInfoOf(m)
}

// NodePins is a KeySet for nodes' messages that remembers the first key each node name
// signed with (trust on first use, as SSH's known_hosts) and refuses any other for that name
// until the name is unpinned (the node is forgotten); with a KnownNodes it trusts only those.
// Safe for concurrent use.
type NodePins struct {
	known *KnownNodes // nil: pin on first use
	self  string      // this node's own name: not pinned, see Trust
	mu    sync.Mutex
	pins  map[string]string
}

// NewNodePins returns the pins of node self, trusting only known if it is not nil.
func NewNodePins(self string, known *KnownNodes) *NodePins {
	return &NodePins{known: known, self: self, pins: map[string]string{}}
}

// Trust implements KeySet. A message for this node's own name passes (a second pcmd using
// the name must still be noticed); the caller treats it as a twin's, never as a peer's.
func (p *NodePins) Trust(publicKey string, s Sender) error {
	if s.Role != RoleNode {
		return fmt.Errorf("signed as %s, not as a node", s)
	}
	if s.Node == p.self {
		return nil
	}
	if p.known != nil {
		return p.known.Trust(publicKey, s)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.pins[s.Node]; ok && k != publicKey {
		return fmt.Errorf("node %s signs with %s, not with %s", s.Node, k, publicKey)
	}
	return nil
}

// Pin remembers key as node's, unless node has one already; it returns false if node is
// pinned to another key.
func (p *NodePins) Pin(node, key string) bool {
	if node == p.self {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.pins[node]; ok {
		return k == key
	}
	p.pins[node] = key
	return true
}

// Unpin forgets node's key: the next key it signs with is pinned.
func (p *NodePins) Unpin(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pins, node)
}

// Key returns the key pinned for node (for a KnownNodes, the node's known key is not
// returned: ok is false).
func (p *NodePins) Key(node string) (key string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key, ok = p.pins[node]
	return key, ok
}
