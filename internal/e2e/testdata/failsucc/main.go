// Command failsucc runs a program as a rank of an mpirun job and makes the successors of
// migrating ranks fail on purpose, for the end-to-end tests of aborted migrations. The
// failures are those of real processes; nothing in the release build can cause them.
//
//	failsucc exit-at-start PROG ARGS...   a successor exits with status 3 before reaching
//	                                      its predecessor
//	failsucc exit-mid-state PROG ARGS...  a successor dies (status 3) once part of the state
//	                                      has arrived
//	failsucc exit-at-start-rank=R PROG ARGS...  as exit-at-start, for rank R's successors
//	                                      only: the others take over
//
// A process that is not a successor (no MPIOS_MIGRATE) becomes PROG ARGS... unchanged.
// For exit-mid-state, failsucc runs PROG as its child behind a relay of the hand-over
// connection, and exits, killing the child, after relaying the first bytes of the state.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/mpios/mpios/internal/job"
)

// midState is how many bytes from the predecessor are relayed before dying: the answer of
// the handshake (24), the size hint (17), a state frame header (9), then 64 of the state.
const midState = 24 + 17 + 9 + 64

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: failsucc exit-at-start|exit-mid-state PROG [ARGS...]")
		os.Exit(2)
	}
	mode, prog, args := os.Args[1], os.Args[2], os.Args[2:]
	spec := os.Getenv(job.EnvMigrate)
	if r, ok := strings.CutPrefix(mode, "exit-at-start-rank="); ok {
		mode = "exit-at-start"
		if os.Getenv(job.EnvRank) != r {
			spec = "" // another rank's successor: it takes over
		}
	}
	if spec == "" {
		exec1(prog, args, os.Environ())
	}
	switch mode {
	case "exit-at-start":
		os.Exit(3)
	case "exit-mid-state":
		relayAndDie(prog, args, spec)
	default:
		fmt.Fprintf(os.Stderr, "failsucc: unknown mode %q\n", mode)
		os.Exit(2)
	}
}

// exec1 replaces this process with prog.
func exec1(prog string, args, env []string) {
	err := syscall.Exec(prog, args, env)
	fmt.Fprintf(os.Stderr, "failsucc: exec %s: %v\n", prog, err)
	os.Exit(2)
}

// relayAndDie runs prog as a successor whose hand-over goes through a relay here, and
// exits in the middle of the state transfer.
func relayAndDie(prog string, args []string, spec string) {
	i := strings.LastIndexByte(spec, '/')
	if i < 0 {
		fail(fmt.Errorf("hand-over spec %q", spec))
	}
	predAddr, token := spec[:i], spec[i+1:]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	env := []string{job.EnvMigrate + "=" + ln.Addr().String() + "/" + token}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, job.EnvMigrate+"=") {
			env = append(env, kv)
		}
	}
	// The child must not outlive this process, which mpirun and pcmd know as the rank's.
	runtime.LockOSThread()
	cmd := exec.Command(prog, args[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	die := func() {
		cmd.Process.Kill()
		os.Exit(3)
	}
	go func() {
		cmd.Wait() // a child that ends first ends the successor too
		os.Exit(3)
	}()
	child, err := ln.Accept()
	if err != nil {
		die()
	}
	pred, err := net.Dial("tcp", predAddr)
	if err != nil {
		die()
	}
	go io.Copy(pred, child)
	io.CopyN(child, pred, midState)
	die()
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "failsucc: %v\n", err)
	os.Exit(2)
}
