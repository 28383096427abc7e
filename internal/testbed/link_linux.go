//go:build linux

package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// tcCmd runs tc in network namespace ns; the error carries tc's output.
func tcCmd(ns string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tc", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc -n %s %s: %v: %s", ns, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// probeNetem tries a netem qdisc on ns's loopback and removes it: ErrNoNetem if the kernel
// does not know the kind.
func probeNetem(ns string) error {
	err := tcCmd(ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	if err != nil {
		if strings.Contains(err.Error(), "unknown") {
			return fmt.Errorf("%w (%v)", ErrNoNetem, err)
		}
		return err
	}
	return tcCmd(ns, "qdisc", "del", "dev", "lo", "root")
}

// unlimited is the rate of unshaped traffic: far above what a veth carries.
const unlimited = "100gbit"

// applyLinks replaces the egress shaping of eth0 in ns by links: an htb root whose default
// class is unlimited, one class per distinct link (with a netem child for a delay), and a
// u32 filter per peer address sending its packets to its link's class. With viaRouter the
// delays are the delay router's: no netem child, and the peers behind a delayed link are
// routed via the router instead.
func applyLinks(ns string, links []peerLink, viaRouter bool) error {
	if viaRouter {
		var addrs []netip.Addr
		for _, pl := range links {
			if pl.link.Delay > 0 {
				a, err := netip.ParseAddr(pl.addr)
				if err != nil {
					return fmt.Errorf("testbed: peer address %q: %w", pl.addr, err)
				}
				addrs = append(addrs, a)
			}
		}
		if err := routeViaRouter(ns, addrs); err != nil {
			return err
		}
	}
	// Deleting a root that was never set fails; what matters is that none is left.
	_ = tcCmd(ns, "qdisc", "del", "dev", "eth0", "root")
	if len(links) == 0 {
		return nil
	}
	steps := [][]string{
		{"qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", unlimited},
	}
	class := map[Link]int{}
	for _, pl := range links {
		id, ok := class[pl.link]
		if !ok {
			id = len(class) + 2
			class[pl.link] = id
			rate := unlimited
			if pl.link.RateBytes > 0 {
				rate = strconv.FormatUint(pl.link.RateBytes*8, 10) + "bit"
			}
			cid := "1:" + strconv.Itoa(id)
			steps = append(steps, []string{"class", "add", "dev", "eth0", "parent", "1:", "classid", cid, "htb", "rate", rate})
			if pl.link.Delay > 0 && !viaRouter {
				steps = append(steps, []string{"qdisc", "add", "dev", "eth0", "parent", cid, "handle", strconv.Itoa(id) + ":",
					"netem", "delay", strconv.FormatInt(pl.link.Delay.Microseconds(), 10) + "us"})
			}
		}
		steps = append(steps, []string{"filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
			"u32", "match", "ip", "dst", pl.addr + "/32", "flowid", "1:" + strconv.Itoa(id)})
	}
	for _, s := range steps {
		if err := tcCmd(ns, s...); err != nil {
			return err
		}
	}
	return nil
}
