// mpicheck exercises the mpi API in a real multi-process job. Modes:
//
//	mpicheck all            every point-to-point and collective operation, verified
//	mpicheck exit R CODE    rank R exits with CODE while the others wait on it
//	mpicheck kill R         rank R kills itself with SIGKILL while the others wait on it
//	mpicheck abort R CODE   rank R calls mpi.Abort
//	mpicheck blocked R      rank R exits 1; every other rank reports the error its blocked Recv got
//	mpicheck rings          every pair exchanges a message; each rank prints how many
//	                        shared-memory rings it has mapped
//	mpicheck killmid R      rank R sends 256 MiB to every other rank and kills itself with
//	                        SIGKILL while the data flows; the others report their receive's error
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/mpi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mpicheck:", err)
		os.Exit(1)
	}
}

func arg(args []string, i int) int {
	v, err := strconv.Atoi(args[i])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpicheck: bad argument", args[i])
		os.Exit(2)
	}
	return v
}

func run(args []string) error {
	c, err := mpi.Init()
	if err != nil {
		return err
	}
	if len(args) == 0 {
		args = []string{"all"}
	}
	r := c.Rank()
	switch args[0] {
	case "all":
		if err := all(c); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		fmt.Printf("rank %d of %d ok\n", r, c.Size())
		return mpi.Finalize()
	case "rings":
		for peer := 0; peer < c.Size(); peer++ {
			if peer == r {
				continue
			}
			in := make([]int, 1)
			if _, err := mpi.Sendrecv(c, []int{r}, peer, 3, in, peer, 3); err != nil {
				return err
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			return err
		}
		fmt.Printf("rank %d rings %d\n", r, strings.Count(string(maps), "/dev/shm/mpios."))
		return mpi.Finalize()
	case "killmid":
		victim := arg(args, 1)
		if err := c.Barrier(); err != nil {
			return err
		}
		big := make([]byte, 256<<20)
		if r != victim {
			_, err := mpi.Recv(c, big, victim, 5)
			var pf *mpi.ProcFailedError
			if errors.As(err, &pf) {
				fmt.Printf("rank %d: receive failed: rank %d failed\n", r, pf.Rank)
				os.Exit(4)
			}
			return fmt.Errorf("rank %d: receive from the victim returned %v", r, err)
		}
		for peer := 0; peer < c.Size(); peer++ {
			if peer != r {
				if _, err := mpi.Isend(c, big, peer, 5); err != nil {
					return err
				}
			}
		}
		time.Sleep(20 * time.Millisecond) // mid-transfer
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "exit", "kill", "abort", "blocked":
		victim := arg(args, 1)
		if err := c.Barrier(); err != nil {
			return err
		}
		if r != victim {
			// Wait on the victim: this must fail (or the process be stopped), never hang.
			_, err := mpi.Recv(c, make([]int, 1), victim, 0)
			var pf *mpi.ProcFailedError
			if errors.As(err, &pf) {
				fmt.Printf("rank %d: blocked receive failed: rank %d failed\n", r, pf.Rank)
				os.Exit(4)
			}
			return fmt.Errorf("rank %d: receive from the victim returned %v", r, err)
		}
		time.Sleep(200 * time.Millisecond) // let the others block first
		switch args[0] {
		case "exit":
			os.Exit(arg(args, 2))
		case "kill":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "abort":
			mpi.Abort(c, arg(args, 2))
		case "blocked":
			os.Exit(1)
		}
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

func check(cond bool, format string, a ...any) error {
	if !cond {
		return fmt.Errorf(format, a...)
	}
	return nil
}

func all(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	// Ring shift, small and large (rendezvous) messages.
	for _, n := range []int{1, 100, 1 << 18} {
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(r*n + i)
		}
		in := make([]float64, n)
		st, err := mpi.Sendrecv(c, out, right, 1, in, left, 1)
		if err != nil {
			return err
		}
		if err := check(st.Source == left && st.Count == n && in[n-1] == float64(left*n+n-1), "sendrecv n=%d: %+v %v", n, st, in[n-1]); err != nil {
			return err
		}
	}
	// AnySource gather at rank 0 with Probe.
	if r == 0 {
		seen := 0
		for i := 1; i < p; i++ {
			st, err := c.Probe(mpi.AnySource, 2)
			if err != nil {
				return err
			}
			buf := make([]int32, st.Count)
			if _, err := mpi.Recv(c, buf, st.Source, 2); err != nil {
				return err
			}
			seen += int(buf[0])
		}
		if err := check(seen == p*(p-1)/2, "probe/anysource sum %d", seen); err != nil {
			return err
		}
	} else if err := mpi.Send(c, make([]int32, r)[:0:0], mpi.ProcNull, 2); err != nil {
		return err
	} else if err := mpi.Send(c, append(make([]int32, 0, r), int32(r)), 0, 2); err != nil {
		return err
	}
	// Truncation is typed and consumes the message.
	if p > 1 {
		if r == 1 {
			if err := mpi.Send(c, []int64{1, 2, 3}, 0, 3); err != nil {
				return err
			}
		}
		if r == 0 {
			_, err := mpi.Recv(c, make([]int64, 2), 1, 3)
			if err := check(errors.Is(err, mpi.ErrTruncate), "truncation: %v", err); err != nil {
				return err
			}
		}
	}
	// Collectives.
	if err := c.Barrier(); err != nil {
		return err
	}
	b := []int{0, 0}
	if r == p-1 {
		b = []int{7, 8}
	}
	if err := mpi.Bcast(c, b, p-1); err != nil {
		return err
	}
	if err := check(b[0] == 7 && b[1] == 8, "bcast %v", b); err != nil {
		return err
	}
	sum := make([]float64, 3000)
	one := make([]float64, 3000)
	for i := range one {
		one[i] = float64(r + i)
	}
	if err := mpi.Allreduce(c, one, sum, mpi.Sum); err != nil {
		return err
	}
	if err := check(sum[10] == float64(p*(p-1)/2+10*p), "allreduce %v", sum[10]); err != nil {
		return err
	}
	mx := []int{0}
	if err := mpi.Reduce(c, []int{r}, mx, mpi.Max, 0); err != nil {
		return err
	}
	if err := check(r != 0 || mx[0] == p-1, "reduce max %v", mx); err != nil {
		return err
	}
	g := make([]int, p)
	if err := mpi.Gather(c, []int{r * r}, g, 0); err != nil {
		return err
	}
	sc := []int{-1}
	if err := mpi.Scatter(c, g, sc, 0); err != nil {
		return err
	}
	if err := check(sc[0] == r*r, "gather/scatter %v", sc); err != nil {
		return err
	}
	ag := make([]int, p)
	if err := mpi.Allgather(c, []int{r + 1}, ag); err != nil {
		return err
	}
	counts := make([]int, p)
	for i := range counts {
		counts[i] = i + 1
	}
	agv := make([]int, p*(p+1)/2)
	mine := make([]int, r+1)
	for i := range mine {
		mine[i] = r
	}
	if err := mpi.Allgatherv(c, mine, agv, counts); err != nil {
		return err
	}
	if err := check(ag[p-1] == p && agv[len(agv)-1] == p-1, "allgather %v %v", ag, agv); err != nil {
		return err
	}
	a2a := make([]int, p)
	for i := range a2a {
		a2a[i] = 100*r + i
	}
	back := make([]int, p)
	if err := mpi.Alltoall(c, a2a, back); err != nil {
		return err
	}
	if err := check(back[left] == 100*left+r, "alltoall %v", back); err != nil {
		return err
	}
	// Split into halves; collectives on the halves do not disturb the world.
	half, err := c.Split(r%2, r)
	if err != nil {
		return err
	}
	hs := []int{0}
	if err := mpi.Allreduce(half, []int{1}, hs, mpi.Sum); err != nil {
		return err
	}
	if err := check(hs[0] == half.Size() && half.Size() == (p+1-r%2)/2, "split size %d/%d", hs[0], half.Size()); err != nil {
		return err
	}
	dup, err := c.Dup()
	if err != nil {
		return err
	}
	var v map[string]int
	if err := mpi.SendValue(dup, map[string]int{"from": r}, right, 4); err != nil {
		return err
	}
	if _, err := mpi.RecvValue(dup, &v, left, 4); err != nil {
		return err
	}
	return check(v["from"] == left, "value %v", v)
}
