//go:build linux

package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The delay router emulates link latency where the kernel has no netem: it is a network
// namespace on the bridge (routerNetns, address RouterIP) holding a TUN device. A node
// routes its packets for a peer behind a delayed link via RouterIP (a /32 route of
// protocol routeProto in the node's namespace); in the router namespace a policy rule
// sends everything that arrives on eth0 into the TUN, where this process reads it, holds
// it for its flow's delay and writes it back; the kernel then forwards it out of eth0 to
// its destination. Traffic inside a group, and to the bridge, never passes the router.
const (
	routerNetns = Prefix + ".delay" // a node name cannot contain '.', so no node has it
	routerVeth  = Prefix + "vr"     // the root-side end of its veth; node veths are mpios-vN
	routerTun   = "dly0"
	routeTable  = "77" // the router's table sending packets into the TUN
	routeProto  = "77" // marks the nodes' routes via the router, to flush them
	maxPacket   = 65535
	routerQueue = 4096 // packets between the TUN reader and the scheduler
)

// ErrNoTun is returned by SetLink for a delayed link where neither netem nor a TUN device
// (/dev/net/tun) is available.
var ErrNoTun = errors.New("testbed: no /dev/net/tun for the userspace delay router")

// delayRouter is the running router: its TUN, the delay of each flow, and the goroutines
// moving packets.
type delayRouter struct {
	tun *os.File

	mu     sync.Mutex
	delays map[flow]time.Duration
	count  map[flow]uint64 // packets routed per flow, for tests and diagnostics

	in   chan arrival
	done chan struct{} // closed by close
	wg   sync.WaitGroup
}

// startRouter makes the router namespace, its link to the bridge and its TUN, and starts
// moving packets. On error, what was made is left for teardownRouter.
func startRouter() (*delayRouter, error) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTun, err)
	}
	ns := routerNetns
	if err := attachNetns(ns, routerVeth, RouterIP); err != nil {
		return nil, fmt.Errorf("testbed: delay router: %w", err)
	}
	var tun *os.File
	err := inNetnsDo("/run/netns/"+ns, func() error {
		// The router forwards, and what leaves the TUN comes from addresses routed via eth0:
		// reverse-path filtering would drop it. These settings are the namespace's own.
		for _, kv := range [][2]string{
			{"ipv4/ip_forward", "1"},
			{"ipv4/conf/all/rp_filter", "0"},
			{"ipv4/conf/default/rp_filter", "0"},
			{"ipv4/conf/all/send_redirects", "0"},
			{"ipv4/conf/default/send_redirects", "0"},
		} {
			if err := os.WriteFile("/proc/sys/net/"+kv[0], []byte(kv[1]), 0); err != nil {
				return err
			}
		}
		var err error
		tun, err = openTun(routerTun)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("testbed: delay router: %w", err)
	}
	r := &delayRouter{tun: tun, delays: map[flow]time.Duration{}, count: map[flow]uint64{},
		in: make(chan arrival, routerQueue), done: make(chan struct{})}
	steps := [][]string{
		{"-n", ns, "link", "set", routerTun, "up"},
		{"-n", ns, "route", "add", "default", "dev", routerTun, "table", routeTable},
		{"-n", ns, "rule", "add", "iif", "eth0", "lookup", routeTable, "pref", "100"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			_ = tun.Close()
			return nil, fmt.Errorf("testbed: delay router: %w", err)
		}
	}
	r.wg.Add(2)
	go r.read()
	go r.schedule()
	return r, nil
}

// openTun creates the TUN device name in the calling thread's network namespace and
// returns it non-blocking, so that closing it ends a Read in progress.
func openTun(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	// IFF_NO_PI: packets are bare IP packets, without tun's 4-byte prefix.
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// inNetnsDo runs fn on a thread that entered the network namespace at path, then returns
// the thread to its own namespace. If that fails the thread stays locked, so Go ends it
// with the goroutine instead of reusing it elsewhere.
func inNetnsDo(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- err
			return
		}
		defer own.Close()
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// setDelays replaces the delay of every flow; flows not in d pass undelayed.
func (r *delayRouter) setDelays(d map[flow]time.Duration) {
	r.mu.Lock()
	r.delays = d
	r.mu.Unlock()
}

// routed is how many packets of flow f the router has forwarded.
func (r *delayRouter) routed(f flow) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[f]
}

// arrival is a packet read from the TUN, with the delay of its flow at that time.
type arrival struct {
	at    time.Time
	delay time.Duration
	f     flow
	pkt   []byte
}

// read takes packets from the TUN and hands them to the scheduler with their delay.
func (r *delayRouter) read() {
	defer r.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, err := r.tun.Read(buf)
		if err != nil {
			return // the TUN was closed
		}
		now := time.Now()
		pkt := append([]byte(nil), buf[:n]...)
		f, ok := ipv4Flow(pkt)
		if !ok {
			continue // IPv6 neighbour discovery of the TUN itself and the like
		}
		r.mu.Lock()
		d := r.delays[f]
		r.count[f]++
		r.mu.Unlock()
		select {
		case r.in <- arrival{at: now, delay: d, f: f, pkt: pkt}:
		case <-r.done:
			return
		}
	}
}

// schedule holds each packet until its release time and writes it back into the TUN.
func (r *delayRouter) schedule() {
	defer r.wg.Done()
	var q delayQueue
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case p := <-r.in:
			q.push(p.at, p.delay, p.f, p.pkt)
		case <-timer.C:
		case <-r.done:
			return
		}
		for _, pkt := range q.popDue(time.Now()) {
			// A write fails only for a packet the kernel refuses (or a closed TUN): like
			// a lossy link, the packet is gone and the transport resends.
			_, _ = r.tun.Write(pkt)
		}
		if at, ok := q.next(); ok {
			timer.Reset(time.Until(at))
		}
	}
}

// close stops the goroutines and closes the TUN; queued packets are dropped.
func (r *delayRouter) close() error {
	close(r.done)
	err := r.tun.Close()
	r.wg.Wait()
	return err
}

// teardownRouter stops r (if running) and removes the router namespace and its veth.
func teardownRouter(r *delayRouter) error {
	var errs []error
	if r != nil {
		errs = append(errs, r.close())
	}
	if netnsExists(routerNetns) {
		errs = append(errs, ipCmd("netns", "del", routerNetns))
	}
	if linkExists(routerVeth) {
		errs = append(errs, delLink(routerVeth))
	}
	return errors.Join(errs...)
}

// routeViaRouter replaces ns's routes via the delay router by one per address in addrs.
func routeViaRouter(ns string, addrs []netip.Addr) error {
	if err := ipCmd("-n", ns, "route", "flush", "proto", routeProto); err != nil {
		return err
	}
	for _, a := range addrs {
		if err := ipCmd("-n", ns, "route", "replace", a.String()+"/32", "via", RouterIP, "dev", "eth0", "proto", routeProto); err != nil {
			return err
		}
	}
	return nil
}
