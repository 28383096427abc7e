// Command nodeexec runs a program inside a testbed node: it moves itself into cgroups and a
// network namespace, then executes the program in its place (same pid, so signals sent to
// nodeexec's pid reach the program).
//
//	nodeexec [-cgroup PROCS_FILE]... [-netns NETNS_FILE] -- PROGRAM [ARGS...]
//
// -cgroup names a cgroup.procs file to write the own pid to (repeat it for each cgroup v1
// hierarchy), -netns a network namespace file such as /run/netns/mpios-n1. Unlike
// "ip netns exec" it changes nothing else: the mount namespace, and so /sys/fs/cgroup, stay
// those of the caller, and the program can read its cgroup's CPU quota.
//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nodeexec:", err)
		os.Exit(126)
	}
}

func run(args []string) error {
	// The namespace is a property of the thread: setns and execve must happen on the same one.
	runtime.LockOSThread()
	var cgroups []string
	netns := ""
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fmt.Errorf("option %s needs a value", args[0])
		}
		switch args[0] {
		case "-cgroup":
			cgroups = append(cgroups, args[1])
		case "-netns":
			netns = args[1]
		default:
			return fmt.Errorf("unknown option %q (usage: nodeexec [-cgroup FILE]... [-netns FILE] -- PROGRAM [ARGS...])", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return errors.New("missing -- PROGRAM")
	}
	argv := args[1:]
	pid := strconv.Itoa(os.Getpid())
	for _, f := range cgroups {
		if err := os.WriteFile(f, []byte(pid), 0); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	if netns != "" {
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", netns, err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter network namespace %s: %w", netns, err)
		}
		unix.Close(fd)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return fmt.Errorf("exec %s: %w", path, syscall.Exec(path, argv, os.Environ()))
}
