package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// ErrNoNetem is returned by SetLink for a link with a delay when the kernel has no netem
// queueing discipline (module sch_netem) and the userspace delay router cannot run either
// (no /dev/net/tun): rates can then be emulated, latencies cannot.
var ErrNoNetem = errors.New("testbed: the kernel has no netem qdisc (sch_netem) and the delay router cannot start: links can limit the rate but not delay packets")

// Link is the emulated network path between two groups of nodes (SetLink). The zero Link
// is the plain bridge: no limit, no delay.
type Link struct {
	// RateBytes bounds what each node sends to each node of the other group, in bytes per
	// second (an htb class on the sender's eth0); 0 means unlimited.
	RateBytes uint64
	// Delay is added to every packet in each direction, so the round trip grows by twice
	// Delay: by netem where the kernel has it, else by the userspace delay router (a TUN
	// in its own namespace on the bridge, which delayed traffic is routed through).
	// Without either SetLink returns ErrNoNetem.
	Delay time.Duration
}

// linkKey is an unordered pair of nodes.
type linkKey struct{ a, b string }

func pairOf(x, y string) linkKey {
	if x > y {
		x, y = y, x
	}
	return linkKey{x, y}
}

// SetLink emulates link l between every node of group a and every node of group b, both
// ways (a group may also name a site's NATS server, SiteServer), replacing what an earlier SetLink set between them (the zero Link removes it).
// Traffic inside a group, and to the NATS server and mpirun on the bridge, is not shaped.
// Two groups so separated are two "clusters" on one machine. It needs an isolated cluster
// (ErrNotIsolated otherwise) and the tc command; a delay also needs netem or /dev/net/tun
// (ErrNoNetem).
func (c *Cluster) SetLink(a, b []string, l Link) error {
	if l.Delay < 0 {
		return fmt.Errorf("testbed: link delay %v: must not be negative", l.Delay)
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if !c.isolated {
		return ErrNotIsolated
	}
	var ends []linkEnd
	for _, name := range append(slices.Clone(a), b...) {
		_, ns, err := c.endpoint(name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ends, func(e linkEnd) bool { return e.name == name }) {
			ends = append(ends, linkEnd{name, ns})
		}
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			return fmt.Errorf("testbed: node %s is in both groups of a link", x)
		}
	}
	if l.Delay > 0 && len(ends) > 0 {
		if err := c.enableDelays(ends[0].ns); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.links == nil {
		c.links = map[linkKey]Link{}
	}
	for _, x := range a {
		for _, y := range b {
			if l == (Link{}) {
				delete(c.links, pairOf(x, y))
			} else {
				c.links[pairOf(x, y)] = l
			}
		}
	}
	c.mu.Unlock()
	c.updateRouter()
	for _, e := range ends {
		if err := applyLinks(e.ns, c.linksOf(e.name), c.router != nil); err != nil {
			return fmt.Errorf("testbed: %s: %w", e.name, err)
		}
	}
	return nil
}

// linkEnd is a node or a site's server at one end of a link, with its network namespace.
type linkEnd struct{ name, ns string }

// enableDelays chooses, at the first delayed link, how delays are made: netem on the
// nodes' eth0 where the kernel has it (tried in namespace ns), the userspace delay router
// otherwise, or always with Options.UserspaceDelay. Called with opMu held.
func (c *Cluster) enableDelays(ns string) error {
	if c.router != nil || c.netem {
		return nil
	}
	if !c.opts.UserspaceDelay {
		err := probeNetem(ns)
		if err == nil {
			c.netem = true
			return nil
		}
		if !errors.Is(err, ErrNoNetem) {
			return err
		}
	}
	r, err := startRouter()
	if err != nil {
		return errors.Join(ErrNoNetem, err, teardownRouter(nil))
	}
	c.router = r
	c.log.Printf("link delays are emulated by the userspace delay router at %s (netem unavailable or not wanted)", RouterIP)
	return nil
}

// updateRouter gives the delay router, if one runs, the delay of every flow between two
// nodes of a delayed link, both ways.
func (c *Cluster) updateRouter() {
	if c.router == nil {
		return
	}
	c.mu.Lock()
	d := map[flow]time.Duration{}
	for k, l := range c.links {
		a, aok := c.addrLocked(k.a)
		b, bok := c.addrLocked(k.b)
		if !aok || !bok || l.Delay <= 0 {
			continue
		}
		x, errx := netip.ParseAddr(a)
		y, erry := netip.ParseAddr(b)
		if errx != nil || erry != nil {
			continue
		}
		d[flow{x, y}] = l.Delay
		d[flow{y, x}] = l.Delay
	}
	c.mu.Unlock()
	c.router.setDelays(d)
}

// linksOf is the shaping of node name's egress: each peer's address and the link to it,
// sorted by address.
func (c *Cluster) linksOf(name string) []peerLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []peerLink
	for k, l := range c.links {
		peer := k.a
		switch name {
		case k.a:
			peer = k.b
		case k.b:
		default:
			continue
		}
		if addr, ok := c.addrLocked(peer); ok {
			out = append(out, peerLink{addr: addr, link: l})
		}
	}
	slices.SortFunc(out, func(x, y peerLink) int {
		switch {
		case x.addr < y.addr:
			return -1
		case x.addr > y.addr:
			return 1
		}
		return 0
	})
	return out
}

// unlink drops the links of a node that left and reshapes its former peers, whose filters
// name its address (which a later node may get).
func (c *Cluster) unlink(name string) error {
	c.mu.Lock()
	var peers []string
	for k := range c.links {
		switch name {
		case k.a:
			peers = append(peers, k.b)
		case k.b:
			peers = append(peers, k.a)
		default:
			continue
		}
		delete(c.links, k)
	}
	c.mu.Unlock()
	c.updateRouter()
	slices.Sort(peers)
	var errs []error
	for _, p := range peers {
		_, ns, err := c.endpoint(p)
		if err != nil {
			continue
		}
		if err := applyLinks(ns, c.linksOf(p), c.router != nil); err != nil {
			errs = append(errs, fmt.Errorf("testbed: node %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// peerLink is the link from a node to the peer at addr.
type peerLink struct {
	addr string
	link Link
}
