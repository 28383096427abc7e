package mpi_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

var transports = []mpitest.Transport{mpitest.InProc, mpitest.TCP, mpitest.SHM, mpitest.SHMCopy}

func forEach(t *testing.T, n int, fn func(c *mpi.Comm) error) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) { mpitest.Run(t, tr, n, fn) })
	}
}

func seq(n int, base float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = base + float64(i)
	}
	return s
}

func equal[T comparable](a, b []T) error {
	if len(a) != len(b) {
		return fmt.Errorf("length %d, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Errorf("element %d = %v, want %v", i, a[i], b[i])
		}
	}
	return nil
}

func TestSendRecvSizes(t *testing.T) {
	// Eager, around the eager limit, and rendezvous sizes (several data chunks).
	sizes := []int{0, 1, 7, 8191, 8192, 8193, 100000, 300001}
	forEach(t, 2, func(c *mpi.Comm) error {
		for _, n := range sizes {
			if c.Rank() == 0 {
				if err := mpi.Send(c, seq(n, float64(n)), 1, n%100); err != nil {
					return err
				}
			} else {
				buf := make([]float64, n+3)
				st, err := mpi.Recv(c, buf, 0, n%100)
				if err != nil {
					return err
				}
				if st.Source != 0 || st.Tag != n%100 || st.Count != n {
					return fmt.Errorf("size %d: status %+v", n, st)
				}
				if err := equal(buf[:n], seq(n, float64(n))); err != nil {
					return fmt.Errorf("size %d: %v", n, err)
				}
			}
		}
		return nil
	})
}

func TestNonOvertakingAndTagMatching(t *testing.T) {
	// Messages between one pair arrive in order; a receive for tag 2 skips earlier tag-1
	// messages, which stay queued in order.
	forEach(t, 2, func(c *mpi.Comm) error {
		const n = 50
		if c.Rank() == 0 {
			// Nonblocking sends: a blocking rendezvous send of message 0 would wait for a
			// receive that rank 1 posts only after all tag-2 messages (an unsafe program).
			var reqs []*mpi.Request
			for i := 0; i < n; i++ {
				size := 1
				if i%10 == 0 {
					size = 20000 // interleave rendezvous messages
				}
				buf := make([]int64, size)
				buf[0] = int64(i)
				r, err := mpi.Isend(c, buf, 1, 1+i%2)
				if err != nil {
					return err
				}
				reqs = append(reqs, r)
			}
			return mpi.WaitAll(reqs...)
		}
		buf := make([]int64, 20000)
		for want := 1; want < n; want += 2 { // all tag-2 messages first
			if _, err := mpi.Recv(c, buf, 0, 2); err != nil {
				return err
			}
			if buf[0] != int64(want) {
				return fmt.Errorf("tag 2: got message %d, want %d", buf[0], want)
			}
		}
		for want := 0; want < n; want += 2 {
			st, err := mpi.Recv(c, buf, mpi.AnySource, mpi.AnyTag)
			if err != nil {
				return err
			}
			if buf[0] != int64(want) || st.Tag != 1 {
				return fmt.Errorf("got message %d tag %d, want %d tag 1", buf[0], st.Tag, want)
			}
		}
		return nil
	})
}

func TestAnySourceReportsSender(t *testing.T) {
	forEach(t, 4, func(c *mpi.Comm) error {
		if c.Rank() != 0 {
			return mpi.Send(c, []int32{int32(c.Rank())}, 0, 10+c.Rank())
		}
		seen := map[int]bool{}
		for i := 1; i < c.Size(); i++ {
			var v [1]int32
			st, err := mpi.Recv(c, v[:], mpi.AnySource, mpi.AnyTag)
			if err != nil {
				return err
			}
			if int(v[0]) != st.Source || st.Tag != 10+st.Source || st.Count != 1 {
				return fmt.Errorf("status %+v for value %d", st, v[0])
			}
			seen[st.Source] = true
		}
		if len(seen) != c.Size()-1 {
			return fmt.Errorf("senders %v", seen)
		}
		return nil
	})
}

func TestTruncationIsTypedAndConsumesMessage(t *testing.T) {
	forEach(t, 2, func(c *mpi.Comm) error {
		for _, n := range []int{10, 100000} { // eager and rendezvous
			if c.Rank() == 0 {
				if err := mpi.Send(c, seq(n, 1), 1, 5); err != nil {
					return err
				}
				if err := mpi.Send(c, []float64{42}, 1, 5); err != nil {
					return err
				}
				continue
			}
			small := make([]float64, n/2)
			_, err := mpi.Recv(c, small, 0, 5)
			var te *mpi.TruncationError
			if !errors.As(err, &te) || !errors.Is(err, mpi.ErrTruncate) || te.Need != n || te.Have != n/2 {
				return fmt.Errorf("size %d: want truncation error, got %v", n, err)
			}
			// The truncated message is gone: the next receive gets the next message.
			if _, err := mpi.Recv(c, small, 0, 5); err != nil || small[0] != 42 {
				return fmt.Errorf("after truncation got %v, %v", small[0], err)
			}
		}
		return nil
	})
}

func TestTypeMismatchIsTyped(t *testing.T) {
	forEach(t, 2, func(c *mpi.Comm) error {
		for _, n := range []int{4, 50000} {
			if c.Rank() == 0 {
				if err := mpi.Send(c, make([]int64, n), 1, 0); err != nil {
					return err
				}
				if err := mpi.Send(c, []int64{7}, 1, 0); err != nil {
					return err
				}
				continue
			}
			buf := make([]float64, n)
			_, err := mpi.Recv(c, buf, 0, 0)
			var me *mpi.TypeMismatchError
			if !errors.As(err, &me) || me.Sent != "int64" || me.Want != "float64" {
				return fmt.Errorf("want type mismatch, got %v", err)
			}
			ok := make([]int64, 1)
			if _, err := mpi.Recv(c, ok, 0, 0); err != nil || ok[0] != 7 {
				return fmt.Errorf("after mismatch got %v, %v", ok, err)
			}
		}
		return nil
	})
}

type celsius float64

func TestNamedTypesMatchUnderlying(t *testing.T) {
	forEach(t, 2, func(c *mpi.Comm) error {
		if c.Rank() == 0 {
			return mpi.Send(c, []celsius{21.5, -3}, 1, 0)
		}
		buf := make([]float64, 2)
		_, err := mpi.Recv(c, buf, 0, 0)
		if err == nil && (buf[0] != 21.5 || buf[1] != -3) {
			err = fmt.Errorf("got %v", buf)
		}
		return err
	})
}

func TestProcNullAndSelf(t *testing.T) {
	forEach(t, 3, func(c *mpi.Comm) error {
		if err := mpi.Send(c, []int{1}, mpi.ProcNull, 0); err != nil {
			return err
		}
		st, err := mpi.Recv(c, []int{0}, mpi.ProcNull, 0)
		if err != nil || st.Source != mpi.ProcNull || st.Count != 0 {
			return fmt.Errorf("ProcNull recv: %+v %v", st, err)
		}
		// Sending to self, small and large, before the receive is posted.
		big := seq(200000, 3)
		if err := mpi.Send(c, []int{c.Rank()}, c.Rank(), 1); err != nil {
			return err
		}
		if err := mpi.Send(c, big, c.Rank(), 2); err != nil {
			return err
		}
		got := make([]float64, len(big))
		if _, err := mpi.Recv(c, got, c.Rank(), 2); err != nil {
			return err
		}
		one := []int{-1}
		if _, err := mpi.Recv(c, one, c.Rank(), 1); err != nil || one[0] != c.Rank() {
			return fmt.Errorf("self: %v %v", one, err)
		}
		return equal(got, big)
	})
}

func TestInvalidArguments(t *testing.T) {
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		checks := []struct {
			err  error
			want error
		}{
			{mpi.Send(c, []int{1}, 2, 0), mpi.ErrRank},
			{mpi.Send(c, []int{1}, -5, 0), mpi.ErrRank},
			{mpi.Send(c, []int{1}, 0, -1), mpi.ErrTag},
			{mpi.Send(c, []int{1}, 0, mpi.MaxTag+1), mpi.ErrTag},
			{mpi.Send(c, []int{1}, mpi.AnySource, 0), mpi.ErrRank},
			{mpi.Bcast(c, []int{1}, 7), mpi.ErrRank},
			{mpi.Allreduce(c, []int{1}, []int{1, 2}, mpi.Sum), mpi.ErrCount},
			{mpi.Allreduce(c, []int{1}, []int{1}, mpi.Op{}), mpi.ErrOp},
			{mpi.Send[int](nil, nil, 0, 0), mpi.ErrComm},
		}
		for i, ch := range checks {
			if !errors.Is(ch.err, ch.want) {
				return fmt.Errorf("check %d: got %v, want %v", i, ch.err, ch.want)
			}
		}
		return nil
	})
}

func TestIsendIrecvWaitAllAndTest(t *testing.T) {
	forEach(t, 4, func(c *mpi.Comm) error {
		p, r := c.Size(), c.Rank()
		var reqs []*mpi.Request
		bufs := make([][]float64, p)
		for peer := 0; peer < p; peer++ {
			bufs[peer] = make([]float64, 30000)
			rr, err := mpi.Irecv(c, bufs[peer], peer, 3)
			if err != nil {
				return err
			}
			reqs = append(reqs, rr)
		}
		for peer := 0; peer < p; peer++ {
			sr, err := mpi.Isend(c, seq(30000, float64(100*r)), peer, 3)
			if err != nil {
				return err
			}
			reqs = append(reqs, sr)
		}
		if err := mpi.WaitAll(reqs...); err != nil {
			return err
		}
		for peer := 0; peer < p; peer++ {
			if err := equal(bufs[peer], seq(30000, float64(100*peer))); err != nil {
				return fmt.Errorf("from %d: %v", peer, err)
			}
			if _, done, err := reqs[peer].Test(); !done || err != nil {
				return fmt.Errorf("Test after WaitAll: %v %v", done, err)
			}
		}
		return nil
	})
}

func TestWaitAny(t *testing.T) {
	forEach(t, 3, func(c *mpi.Comm) error {
		if c.Rank() != 0 {
			return mpi.Send(c, []int{c.Rank()}, 0, 0)
		}
		bufs := [][]int{{0}, {0}}
		r1, _ := mpi.Irecv(c, bufs[0], 1, 0)
		r2, _ := mpi.Irecv(c, bufs[1], 2, 0)
		reqs := []*mpi.Request{r1, r2}
		for k := 0; k < 2; k++ {
			i, st, err := mpi.WaitAny(reqs...)
			if err != nil || st.Source != i+1 || bufs[i][0] != i+1 {
				return fmt.Errorf("WaitAny: %d %+v %v", i, st, err)
			}
			reqs[i] = nil
		}
		if i, _, _ := mpi.WaitAny(reqs...); i != -1 {
			return fmt.Errorf("WaitAny of nils = %d", i)
		}
		return nil
	})
}

func TestProbeThenReceiveExactSize(t *testing.T) {
	forEach(t, 2, func(c *mpi.Comm) error {
		if c.Rank() == 0 {
			if err := mpi.Send(c, make([]int16, 12345), 1, 9); err != nil {
				return err
			}
			return mpi.Send(c, make([]int16, 100000), 1, 9)
		}
		for _, n := range []int{12345, 100000} {
			st, err := c.Probe(mpi.AnySource, 9)
			if err != nil || st.Count != n || st.Source != 0 {
				return fmt.Errorf("Probe: %+v %v", st, err)
			}
			if _, err := mpi.Recv(c, make([]int16, st.Count), st.Source, st.Tag); err != nil {
				return err
			}
		}
		_, found, err := c.Iprobe(0, 9)
		if found || err != nil {
			return fmt.Errorf("Iprobe on empty queue: %v %v", found, err)
		}
		return nil
	})
}

func TestSendValueRecvValue(t *testing.T) {
	type point struct {
		Name string
		XY   []float64
		Tags map[string]int
	}
	forEach(t, 2, func(c *mpi.Comm) error {
		want := point{Name: "p", XY: seq(10000, 0), Tags: map[string]int{"a": 1}}
		if c.Rank() == 0 {
			return mpi.SendValue(c, want, 1, 4)
		}
		var got point
		if _, err := mpi.RecvValue(c, &got, 0, 4); err != nil {
			return err
		}
		if got.Name != want.Name || got.Tags["a"] != 1 {
			return fmt.Errorf("got %+v", got)
		}
		return equal(got.XY, want.XY)
	})
}

func TestConcurrentGoroutinesPerRank(t *testing.T) {
	// Several goroutines of each rank exchange on distinct tags at once.
	forEach(t, 2, func(c *mpi.Comm) error {
		const workers, rounds = 8, 50
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		peer := 1 - c.Rank()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				buf := make([]int64, 1000*(w+1))
				for i := 0; i < rounds; i++ {
					out := make([]int64, len(buf))
					out[0], out[len(out)-1] = int64(i), int64(w)
					if _, err := mpi.Sendrecv(c, out, peer, w, buf, peer, w); err != nil {
						errs <- err
						return
					}
					if buf[0] != int64(i) || buf[len(buf)-1] != int64(w) {
						errs <- fmt.Errorf("worker %d round %d: got %d,%d", w, i, buf[0], buf[len(buf)-1])
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		return <-errs
	})
}
