// Package mpitest runs a function as the ranks of an in-process job: one goroutine per rank,
// connected by the in-process transport or by real TCP on loopback. Tests of mpi and of the
// packages above it use it; multi-process behaviour is tested through mpirun.
package mpitest

import (
	"crypto/rand"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
)

// Timeout bounds one Run: a hang fails the test with every goroutine's stack.
var Timeout = 60 * time.Second

// Transport selects how the goroutine ranks are connected.
type Transport int

const (
	InProc Transport = iota
	// TCP connects every pair over loopback TCP.
	TCP
	// SHM connects every pair through shared-memory rings (the ranks share a node), with
	// large messages read by process_vm_readv where the kernel allows it.
	SHM
	// SHMCopy is SHM with every byte copied through the rings (the fallback where the kernel
	// forbids process_vm_readv).
	SHMCopy
)

func (t Transport) String() string {
	switch t {
	case TCP:
		return "tcp"
	case SHM:
		return "shm"
	case SHMCopy:
		return "shm-copy"
	}
	return "inproc"
}

// commTransport is the comm.TCPConfig.Transport of t.
func (t Transport) commTransport() string {
	switch t {
	case SHM:
		return comm.TransportAuto
	case SHMCopy:
		return comm.TransportShmCopy
	}
	return comm.TransportTCP
}

// Endpoints returns n connected endpoints of the given transport.
func Endpoints(t testing.TB, tr Transport, n int) []comm.Endpoint {
	t.Helper()
	eps := make([]comm.Endpoint, n)
	if tr == InProc {
		nw := comm.NewInProcNetwork(n)
		for i := range eps {
			eps[i] = nw.Endpoint(i)
		}
		return eps
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = "127.0.0.1"
	}
	return endpointsOn(t, tr, hosts)
}

// EndpointsOnHosts returns TCP endpoints whose rank i listens on loopback address hosts[i]
// (127.0.0.1, 127.0.0.2, ...): ranks with different addresses are on different nodes for
// mpi.CommSplitType and CartCreate's reorder, although they share this machine.
func EndpointsOnHosts(t testing.TB, hosts []string) []comm.Endpoint {
	t.Helper()
	return endpointsOn(t, TCP, hosts)
}

func endpointsOn(t testing.TB, tr Transport, hosts []string) []comm.Endpoint {
	t.Helper()
	n := len(hosts)
	eps := make([]comm.Endpoint, n)
	secret := make([]byte, 32)
	rand.Read(secret)
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", net.JoinHostPort(hosts[i], "0"))
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	for i := range eps {
		ep, err := comm.NewTCP(comm.TCPConfig{Rank: i, Size: n, Addrs: addrs, Listener: lns[i], Secret: secret,
			Transport: tr.commTransport(), Logf: func(format string, args ...any) { t.Logf(format, args...) }})
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = ep
	}
	return eps
}

// Run runs fn on n goroutine ranks and fails t with every rank's error. Ranks are attached to
// their endpoints before fn and detached (Finalize) after it returns nil.
func Run(t testing.TB, tr Transport, n int, fn func(c *mpi.Comm) error) {
	t.Helper()
	RunEndpoints(t, Endpoints(t, tr, n), fn)
}

// RunEndpoints is Run over given endpoints.
func RunEndpoints(t testing.TB, eps []comm.Endpoint, fn func(c *mpi.Comm) error) {
	t.Helper()
	n := len(eps)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range eps {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panic: %v", p)
				}
			}()
			c, err := mpi.Attach(eps[i])
			if err != nil {
				errs[i] = err
				return
			}
			if err := fn(c); err != nil {
				errs[i] = err
				eps[i].Close()
				return
			}
			errs[i] = mpi.Detach(c)
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(Timeout):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("ranks did not finish within %v\n%s", Timeout, buf)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}
