//go:build !linux

package testbed

import (
	"context"
	"errors"
	"log"
	"os/exec"
	"syscall"
	"time"
)

// The testbed isolates nodes only on Linux; elsewhere Start runs them in loopback mode
// (IsolationAuto, IsolationLoopback) or fails (IsolationNetns). These stubs are never
// reached there: isolationUnavailable reports the platform first.

var errNotLinux = errors.New("testbed: network namespaces and cgroups need Linux")

type machineLock struct{}

func acquireLock(context.Context, *log.Logger) (*machineLock, error) { return nil, errNotLinux }
func (*machineLock) release()                                        {}

type cgroupFS struct {
	version int
	cpuRoot string
}

func detectCgroups() (*cgroupFS, error)          { return nil, errNotLinux }
func (*cgroupFS) prepare() error                 { return errNotLinux }
func (*cgroupFS) removeTop() error               { return nil }
func cleanupLocked(*log.Logger, *cgroupFS) error { return nil }
func setupBridge() error                         { return errNotLinux }
func teardownBridge() error                      { return nil }
func setupNetns(string, int) error               { return errNotLinux }
func teardownNetns(string, int) error            { return nil }
func netnsName(node string) string               { return Prefix + node }
func netnsPath(node string) string               { return "/run/netns/" + netnsName(node) }
func nodeIP(int) string                          { return "127.0.0.1" }
func setDeathSignal(*exec.Cmd, syscall.Signal)   {}
func Cleanup(context.Context, *log.Logger) error { return nil }

const (
	subWork = "work"
	subLoad = "load"
)

type nodeCgroup struct {
	fs   *cgroupFS
	name string
}

func (*nodeCgroup) create(float64, time.Duration) error                { return errNotLinux }
func (*nodeCgroup) setLoadShare(float64, float64, time.Duration) error { return errNotLinux }
func (*nodeCgroup) usage(string) (time.Duration, error)                { return 0, errNotLinux }
func (*nodeCgroup) killAll(time.Duration) error                        { return nil }
func (*nodeCgroup) remove() error                                      { return nil }
func (*nodeCgroup) cpuDir(string) string                               { return "" }
func (*nodeCgroup) procsFiles(string) []string                         { return nil }

func probeNetem(string) error                   { return errNotLinux }
func applyLinks(string, []peerLink, bool) error { return errNotLinux }

type delayRouter struct{}

func startRouter() (*delayRouter, error)              { return nil, errNotLinux }
func teardownRouter(*delayRouter) error               { return nil }
func (*delayRouter) setDelays(map[flow]time.Duration) {}
