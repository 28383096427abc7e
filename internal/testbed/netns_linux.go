//go:build linux

package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ipCmd runs the ip command and returns an error naming the command and its output.
func ipCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipOutput runs the ip command and returns its standard output.
func ipOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// netnsName is the network namespace of node name.
func netnsName(node string) string { return Prefix + node }

// netnsPath is the file of node's network namespace.
func netnsPath(node string) string { return "/run/netns/" + netnsName(node) }

// vethName is the root-side link of the node with address index idx.
func vethName(idx int) string { return Prefix + "v" + strconv.Itoa(idx) }

// nodeIP is the address of the node with index idx.
func nodeIP(idx int) string { return subnetBase + strconv.Itoa(firstHostIP+idx) }

// setupBridge creates the bridge with BridgeIP and BridgeMAC in the root namespace.
func setupBridge() error {
	if err := ipCmd("link", "add", BridgeName, "type", "bridge"); err != nil {
		return err
	}
	// A bridge whose address was never set takes the lowest of its ports' addresses, so a
	// node joining with a lower one changed the address of BridgeIP under the namespaces
	// that knew the old one: their packets to the root namespace went astray until their
	// ARP entries aged out, and a connection from it (the testbed's to a site's NATS
	// server, which then hears no heartbeat) stalled for half a minute. A set address stays.
	if err := ipCmd("link", "set", BridgeName, "address", BridgeMAC); err != nil {
		return err
	}
	if err := ipCmd("addr", "add", BridgeIP+"/"+strconv.Itoa(SubnetPrefix), "dev", BridgeName); err != nil {
		return err
	}
	return ipCmd("link", "set", BridgeName, "up")
}

// teardownBridge deletes the bridge.
func teardownBridge() error {
	if !linkExists(BridgeName) {
		return nil
	}
	return ipCmd("link", "del", BridgeName)
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// setupNetns creates node's namespace with eth0 at nodeIP(idx), joined to the bridge by a
// veth pair.
func setupNetns(node string, idx int) error {
	ns := netnsName(node)
	if err := attachNetns(ns, vethName(idx), nodeIP(idx)); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if err := ipCmd("-n", ns, "route", "add", "default", "via", BridgeIP); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// attachNetns creates namespace ns with eth0 at ip, joined to the bridge by the veth pair
// veth/eth0: the setup shared by the nodes and the delay router.
func attachNetns(ns, veth, ip string) error {
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", veth, "master", BridgeName},
		{"link", "set", veth, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", ip + "/" + strconv.Itoa(SubnetPrefix), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// netnsPids lists the processes in node's namespace.
func netnsPids(ns string) []int {
	out, err := ipOutput("netns", "pids", ns)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// teardownNetns kills what still runs in node's namespace and deletes it and its veth.
func teardownNetns(node string, idx int) error {
	ns := netnsName(node)
	var errs []error
	if netnsExists(ns) {
		if err := killUntilEmpty(func() []int { return netnsPids(ns) }, 5*time.Second, "network namespace "+ns); err != nil {
			errs = append(errs, err)
		}
	}
	if idx >= 0 && linkExists(vethName(idx)) {
		if err := delLink(vethName(idx)); err != nil {
			errs = append(errs, err)
		}
	}
	if netnsExists(ns) {
		if err := ipCmd("netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func netnsExists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

// testbedNetns lists the network namespaces named Prefix*.
func testbedNetns() []string { return prefixed("/run/netns") }

// testbedLinks lists the root namespace's links named Prefix*.
func testbedLinks() []string { return prefixed("/sys/class/net") }

// prefixed lists the entries of dir named Prefix*; none if dir cannot be read.
func prefixed(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// cleanupNetwork removes the Prefix* namespaces (killing their processes) and links.
func cleanupNetwork() (removed []string, err error) {
	var errs []error
	for _, ns := range testbedNetns() {
		if err := killUntilEmpty(func() []int { return netnsPids(ns) }, 5*time.Second, "network namespace "+ns); err != nil {
			errs = append(errs, err)
		}
		if err := ipCmd("netns", "del", ns); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "netns "+ns)
		}
	}
	// Veths first (deleting one end deletes both), the bridge last.
	links := testbedLinks()
	slicesSortBridgeLast(links)
	for _, l := range links {
		if !linkExists(l) {
			continue // the other end of a veth already deleted
		}
		if err := delLink(l); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "link "+l)
		}
	}
	return removed, errors.Join(errs...)
}

func slicesSortBridgeLast(links []string) {
	for i, l := range links {
		if l == BridgeName {
			links[i], links[len(links)-1] = links[len(links)-1], links[i]
			return
		}
	}
}

// delLink deletes a link of the root namespace. A veth whose other end was in a namespace
// just deleted goes away by itself, a moment later: that it is gone is no error.
func delLink(name string) error {
	err := ipCmd("link", "del", name)
	if err != nil && !linkExists(name) {
		return nil
	}
	return err
}
