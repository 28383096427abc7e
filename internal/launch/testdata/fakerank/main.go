// Command fakerank is a test rank for internal/launch: it speaks the launcher protocol of
// internal/job directly (the real mpi package is not needed) and then misbehaves as told.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
)

var (
	on         = flag.Int("on", -1, "rank doing -exit/-signal/-abort (-1: all)")
	exitCode   = flag.Int("exit", 0, "exit status of the -on rank")
	sig        = flag.String("signal", "", "signal the -on rank kills itself with (KILL, SEGV, ...)")
	abortCode  = flag.Int("abort", -1, "the -on rank publishes an Abort with this code and exits with it")
	delay      = flag.Duration("delay", 0, "wait before the -on rank acts")
	sleep      = flag.Duration("sleep", 0, "other ranks sleep this long before exiting 0")
	lines      = flag.Int("lines", 0, "lines to write to stdout and to stderr")
	lineLen    = flag.Int("linelen", 50, "payload length of each -lines line")
	long       = flag.Int("long", 0, "also write one line of this many bytes to stdout")
	partial    = flag.Bool("partial", false, "end stdout with an unterminated line")
	printArgs  = flag.Bool("args", false, "print all arguments (put extra ones after --)")
	child      = flag.Bool("child", false, "start a 'sleep 600' child and print its pid")
	noHello    = flag.Bool("nohello", false, "skip the rendezvous")
	silent     = flag.Int("silent", -1, "this rank skips the rendezvous and sleeps")
	quit       = flag.Int("quit", -1, "this rank exits 0 before the rendezvous")
	helloDelay = flag.Duration("hellodelay", 0, "ranks other than 0 wait this long before their hello")
	ignoreTerm = flag.Bool("ignoreterm", false, "ignore SIGTERM")
	dup        = flag.Bool("dup", false, "rank 0 also sends a hello for itself with a fake pid")
	garbage    = flag.Bool("garbage", false, "rank 0 first sends a malformed and an invalid hello")
)

func main() {
	flag.Parse()
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	env, err := job.FromEnviron(nil)
	if err != nil {
		fatalf("env: %v", err)
	}
	r := env.Rank
	fmt.Printf("rank %d pid %d size %d\n", r, os.Getpid(), env.Size)
	if *child {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			fatalf("child: %v", err)
		}
		fmt.Printf("rank %d child %d\n", r, c.Process.Pid)
	}
	if *printArgs {
		fmt.Printf("rank %d args %q\n", r, os.Args[1:])
	}
	if r == *quit {
		return
	}
	if r != 0 {
		time.Sleep(*helloDelay)
	}
	var nc *nats.Conn
	if !*noHello && r != *silent {
		nc = rendezvous(env)
		defer nc.Close()
	}
	if r == *silent {
		time.Sleep(time.Hour)
	}
	for i := range *lines {
		p := strings.Repeat(string(rune('a'+r)), *lineLen)
		fmt.Fprintf(os.Stdout, "rank %d out %d %s end\n", r, i, p)
		fmt.Fprintf(os.Stderr, "rank %d err %d %s end\n", r, i, p)
	}
	if *long > 0 {
		fmt.Printf("rank %d long %s end\n", r, strings.Repeat("x", *long))
	}
	if *partial {
		fmt.Printf("rank %d partial", r)
	}
	if *on == -1 || *on == r {
		time.Sleep(*delay)
		act(env, nc)
	}
	time.Sleep(*sleep)
}

func act(env job.Env, nc *nats.Conn) {
	if *abortCode >= 0 {
		if nc == nil {
			fatalf("-abort needs the rendezvous")
		}
		// As mpi.Abort: under the job key, which mpirun checks.
		auth, err := ctlauth.NewJobChannel(env.JobID, env.Secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: env.Rank}, time.Now())
		if err != nil {
			fatalf("abort: %v", err)
		}
		data, err := auth.Encode(job.AbortSubject(env.JobID), job.Abort{Rank: env.Rank, Code: *abortCode, Message: "fakerank gives up"}, time.Now())
		if err != nil {
			fatalf("abort: %v", err)
		}
		if err := nc.Publish(job.AbortSubject(env.JobID), data); err != nil {
			fatalf("abort: %v", err)
		}
		if err := nc.Flush(); err != nil {
			fatalf("abort flush: %v", err)
		}
		os.Exit(*abortCode)
	}
	if *sig != "" {
		s := map[string]syscall.Signal{"KILL": syscall.SIGKILL, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM}[*sig]
		if s == 0 {
			fatalf("unknown signal %q", *sig)
		}
		signal.Reset(s)
		_ = syscall.Kill(os.Getpid(), s)
		time.Sleep(time.Hour)
	}
	if *exitCode != 0 {
		os.Exit(*exitCode)
	}
}

func rendezvous(env job.Env) *nats.Conn {
	r := env.Rank
	ln, err := net.Listen("tcp", net.JoinHostPort(env.Bind, "0"))
	if err != nil {
		fatalf("listen: %v", err)
	}
	natsAuth, err := natsconn.FromEnviron(nil).AuthOptions() // as a real rank (mpi.Init)
	if err != nil {
		fatalf("nats: %v", err)
	}
	nc, err := nats.Connect(env.NATSURL, append(natsAuth, nats.Name(fmt.Sprintf("fakerank %d", r)))...)
	if err != nil {
		fatalf("nats: %v", err)
	}
	host, _ := os.Hostname()
	hello := job.Hello{Rank: r, Addr: ln.Addr().String(), PID: os.Getpid(), Host: host}
	subj := job.HelloSubject(env.JobID)
	// As mpi.Init: hellos and tables travel under the job key.
	auth, err := ctlauth.NewJobChannel(env.JobID, env.Secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: r}, time.Now())
	if err != nil {
		fatalf("job key: %v", err)
	}
	sealed := func(v any) []byte {
		data, err := auth.Encode(subj, v, time.Now())
		if err != nil {
			fatalf("encode: %v", err)
		}
		return data
	}
	if *garbage && r == 0 {
		// Not under the job key: mpirun drops it without an answer.
		if err := nc.Publish(subj, mustEncode(job.Hello{Rank: r, Addr: "forged:1"})); err != nil {
			fatalf("garbage: %v", err)
		}
		malformed, err := auth.Wrap(subj, []byte("\xc1garbage"), time.Now())
		if err != nil {
			fatalf("encode: %v", err)
		}
		for _, data := range [][]byte{malformed, sealed(job.Hello{Rank: env.Size + 5, Addr: "x:1"})} {
			m, err := nc.Request(subj, data, 5*time.Second)
			if err != nil {
				fatalf("garbage request: %v", err)
			}
			var t job.Table
			_, _ = auth.Decode(m.Subject, m.Data, &t, time.Now())
			fmt.Printf("rank %d garbage reply %q\n", r, t.Error)
		}
	}
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		fatalf("subscribe: %v", err)
	}
	if err := nc.PublishRequest(subj, inbox, sealed(hello)); err != nil {
		fatalf("hello: %v", err)
	}
	if *dup && r == 0 {
		fake := hello
		fake.PID += 1000000
		if err := nc.PublishRequest(subj, inbox, sealed(fake)); err != nil {
			fatalf("dup hello: %v", err)
		}
	}
	for {
		m, err := replies.NextMsg(env.Timeout)
		if err != nil {
			fatalf("rendezvous: %v", err)
		}
		var t job.Table
		if _, err := auth.Decode(m.Subject, m.Data, &t, time.Now()); err != nil {
			fatalf("table: %v", err)
		}
		if t.Error != "" {
			if *dup && strings.Contains(t.Error, "duplicate") {
				fmt.Printf("rank %d dup reply %q\n", r, t.Error)
				continue
			}
			fatalf("rendezvous refused: %s", t.Error)
		}
		if len(t.Addrs) != env.Size || t.Addrs[r] != hello.Addr {
			fatalf("bad table %q for my address %s", t.Addrs, hello.Addr)
		}
		fmt.Printf("rank %d table %s\n", r, strings.Join(t.Addrs, ","))
		return nc
	}
}

func mustEncode(v any) []byte {
	b, err := job.Encode(v)
	if err != nil {
		fatalf("encode: %v", err)
	}
	return b
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakerank: "+format+"\n", args...)
	os.Exit(99)
}
