// Package rankproc is how a rank's process is started, signalled and waited for: the
// Starter and Process seams that mpirun's supervisor loop and pcmd use, and Local, which runs
// ranks as child processes of this machine with their output forwarded line by line.
package rankproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Stream names one of a rank's output streams.
type Stream int

// A rank's output streams.
const (
	Stdout Stream = iota + 1
	Stderr
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "stream(" + strconv.Itoa(int(s)) + ")"
}

// Spec describes one rank to start.
type Spec struct {
	Rank int
	Path string   // executable to run
	Args []string // arguments after the program name
	Env  []string // the complete environment, KEY=VALUE
	Dir  string   // working directory; "" = the launcher's
	// Incarnation counts the processes that held this rank before (migrations); a remote
	// starter keeps each incarnation's output apart.
	Incarnation int
	// Replaces, for a successor of a joint move, are the ranks of the job that leave its
	// node in the same move: the node may admit it in one of their slots.
	Replaces []int

	// Output receives every line the rank writes, without its trailing newline (a final
	// unterminated line is delivered too). Lines of one stream arrive in order from a single
	// goroutine; the two streams may be delivered concurrently. line is only valid during
	// the call.
	Output func(s Stream, line []byte)
}

// Starter starts the ranks of a job. Local runs them as child processes; a remote starter
// (internal/nodeclient) asks pcmd node agents to spawn them and relays their output and exit
// status.
type Starter interface {
	Start(spec Spec) (Process, error)
}

// NodeStarter is a Starter that can place a rank on a named node, as migrations need.
type NodeStarter interface {
	Starter
	// CheckNode reports whether node can take a rank now (it is known, alive, has a slot);
	// leaving ranks of the job leave it in the same joint move, their slots counted free.
	CheckNode(node string, leaving int) error
	// StartOn starts spec's rank on node (in the slot of one of spec.Replaces, if it has
	// no free one).
	StartOn(node string, spec Spec) (Process, error)
}

// Process is a started rank.
type Process interface {
	// PID is the rank's process id on its host.
	PID() int
	// Host is the node running the rank, "" for the local machine.
	Host() string
	// Signal delivers sig to the rank and the processes it started. Signalling a rank that
	// has already exited is not an error.
	Signal(sig syscall.Signal) error
	// Wait blocks until the rank has exited and all its output has been delivered.
	Wait() (Exit, error)
}

// ErrHostGone reports that a process's host is gone (its node stopped responding, restarted
// or shut down): its fate is unknown, and it is presumed dead. Wait errors of such processes
// match it with errors.Is.
var ErrHostGone = errors.New("node is gone")

// ErrHostClosed reports that a host refused to start a process because it takes no new ones
// (it is draining or shutting down): the program is not at fault. Start errors of such
// refusals match it with errors.Is.
var ErrHostClosed = errors.New("node takes no new ranks")

// EnvValue returns the value of the last entry named name in env (KEY=VALUE entries, as in
// Spec.Env), or "".
func EnvValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// Exit is how a rank ended.
type Exit struct {
	Code   int            // exit code; -1 if killed by a signal
	Signal syscall.Signal // the signal that killed the rank, or 0
	// At is when the exit was observed, before the rank's output was drained: it orders the
	// exits of ranks that fail together (the first one is usually the cause).
	At time.Time
}

// Success reports whether the rank exited with status 0.
func (e Exit) Success() bool { return e.Signal == 0 && e.Code == 0 }

// Status is the shell-style exit status: the exit code, or 128+signal.
func (e Exit) Status() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

// String describes the exit for messages such as "rank 2 (pid 7) exited with status 3".
func (e Exit) String() string {
	if e.Signal != 0 {
		return "was killed by signal " + e.Signal.String()
	}
	return "exited with status " + strconv.Itoa(e.Code)
}

// MaxLine bounds how much of an unterminated line is buffered before it is emitted anyway,
// so a rank writing endless bytes without a newline cannot exhaust mpirun's memory.
const MaxLine = 16 << 20

// drainTimeout bounds the wait for a rank's output after it exited: a process that left the
// rank's process group (setsid) may keep the pipes open forever.
const drainTimeout = 2 * time.Second

// Local is the Starter for ranks on this machine. Each rank runs in its own process group,
// which is killed when the rank exits so no stray children survive it. On Linux a rank also
// gets SIGKILL when the OS thread that started it exits (Pdeathsig), so callers should start
// ranks from a goroutine locked to its thread (launch.Run does) to make that mean "mpirun
// died".
type Local struct{}

// Start implements Starter.
func (Local) Start(spec Spec) (Process, error) {
	if spec.Output == nil {
		return nil, fmt.Errorf("rankproc: start rank %d: Spec.Output is nil", spec.Rank)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("rankproc: start rank %d: %w", spec.Rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("rankproc: start rank %d: %w", spec.Rank, err)
	}
	var cmd *exec.Cmd
	// ETXTBSY: the program was written just now and a process forked elsewhere (by us or
	// anyone) still holds it open for writing until its exec; that clears within moments.
	err = backoff.Retry(func() error {
		cmd = exec.Command(spec.Path, spec.Args...)
		cmd.Env = spec.Env
		cmd.Dir = spec.Dir
		cmd.Stdout = outW
		cmd.Stderr = errW
		cmd.SysProcAttr = sysProcAttr()
		err := cmd.Start()
		if err != nil && !errors.Is(err, syscall.ETXTBSY) {
			return backoff.Permanent(err)
		}
		return err
	}, textBusyBackOff())
	// The child has its own copies; ours must go so the readers see EOF when it exits.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("rankproc: start rank %d: %w", spec.Rank, err)
	}
	p := &localProcess{cmd: cmd, done: make(chan struct{})}
	var fwd sync.WaitGroup
	fwd.Add(2)
	go func() { defer fwd.Done(); forwardLines(outR, Stdout, spec.Output) }()
	go func() { defer fwd.Done(); forwardLines(errR, Stderr, spec.Output) }()
	go p.wait(&fwd, outR, errR)
	return p, nil
}

// textBusyBackOff bounds the retries of a start that failed with ETXTBSY to about a second.
func textBusyBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.MaxElapsedTime = time.Second
	return b
}

type localProcess struct {
	cmd *exec.Cmd

	mu     sync.Mutex
	reaped bool // set before the pid is released; after that it may name another process

	done chan struct{}
	exit Exit
	err  error
}

func (p *localProcess) PID() int     { return p.cmd.Process.Pid }
func (p *localProcess) Host() string { return "" }

func (p *localProcess) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if err := signalGroup(p.cmd.Process, sig); err != nil {
		return fmt.Errorf("rankproc: signal pid %d: %w", p.cmd.Process.Pid, err)
	}
	return nil
}

func (p *localProcess) Wait() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

func (p *localProcess) wait(fwd *sync.WaitGroup, outR, errR *os.File) {
	defer close(p.done)
	pid := p.cmd.Process.Pid
	// Wait for the exit without reaping, so the pid (and process group id) stays ours while
	// we kill whatever the rank left behind in its group.
	observed := waitExited(pid)
	exitedAt := time.Now()
	if observed {
		_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
	}
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	werr := p.cmd.Wait()
	if !observed {
		exitedAt = time.Now()
	}

	drained := make(chan struct{})
	go func() { fwd.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		// Closing unblocks the readers; the pipes are non-blocking and use the poller.
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()

	st := p.cmd.ProcessState
	if st == nil {
		p.exit = Exit{Code: -1}
		p.err = fmt.Errorf("rankproc: wait pid %d: %w", pid, werr)
		return
	}
	p.exit = exitOf(st)
	p.exit.At = exitedAt
}

// forwardLines reads r to EOF and hands each line, without its newline, to out.
func forwardLines(r io.Reader, s Stream, out func(Stream, []byte)) {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // accumulates a line longer than the reader's buffer
	for {
		frag, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			frag = frag[:len(frag)-1]
			if long != nil {
				out(s, append(long, frag...))
				long = nil
			} else {
				out(s, frag)
			}
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, frag...)
			if len(long) >= MaxLine {
				out(s, long)
				long = nil
			}
		default: // EOF or a read error: the stream is over
			if len(frag) > 0 || len(long) > 0 {
				out(s, append(long, frag...))
			}
			return
		}
	}
}
