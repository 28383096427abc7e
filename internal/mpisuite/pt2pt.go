package mpisuite

import (
	"errors"
	"sync"

	"github.com/mpios/mpios/mpi"
)

// Synchronous sends, Sendrecv_replace and matched probes (MPICH pt2pt ssendt/sendself,
// sendrecv_replace, mprobe).
func init() {
	register(
		Case{"ssend", 2, synchronousSend},
		Case{"sendrecv-replace", 2, sendrecvReplace},
		Case{"mprobe", 2, matchedProbe},
	)
}

// synchronousSend: an Issend cannot complete before its receive is posted; a synchronous send
// to oneself completes once its own receive matches; sizes from 0 to rendezvous; a truncated
// synchronous message fails at the receiver only.
func synchronousSend(c *mpi.Comm) error {
	r := c.Rank()
	for _, n := range []int{0, 3, 100000} {
		switch r {
		case 0:
			data := fill(n, r, n)
			req, err := mpi.Issend(c, data, 1, 1)
			if err != nil {
				return err
			}
			// Rank 1 posts its receive only after the go-ahead sent below.
			if done, err := mpi.TestAll(req); done || err != nil {
				return check(false, "Issend of %d values complete before its receive was posted (%v)", n, err)
			}
			if err := mpi.Send(c, []int{1}, 1, 2); err != nil {
				return err
			}
			if _, err := req.Wait(); err != nil {
				return err
			}
			// Blocking and persistent forms.
			if err := mpi.Ssend(c, data, 1, 3); err != nil {
				return err
			}
			pers, err := mpi.SsendInit(c, data, 1, 4)
			if err != nil {
				return err
			}
			for i := 0; i < 2; i++ {
				if err := pers.Start(); err != nil {
					return err
				}
				if _, err := pers.Wait(); err != nil {
					return err
				}
			}
		case 1:
			if _, err := mpi.Recv(c, []int{0}, 0, 2); err != nil {
				return err
			}
			for _, tag := range []int{1, 3, 4, 4} {
				in := make([]float64, n)
				st, err := mpi.Recv(c, in, 0, tag)
				if err != nil {
					return err
				}
				if err := check(st.Count == n, "tag %d: count %d, want %d", tag, st.Count, n); err != nil {
					return err
				}
				if err := sameAs(in, fill(n, 0, n)); err != nil {
					return err
				}
			}
		}
	}
	// To oneself: complete only after the receive.
	self, err := mpi.Issend(c, []int32{int32(r)}, r, 5)
	if err != nil {
		return err
	}
	if done, _ := mpi.TestAll(self); done {
		return check(false, "synchronous send to self complete before its receive")
	}
	got := []int32{-1}
	if _, err := mpi.Recv(c, got, r, 5); err != nil || got[0] != int32(r) {
		return check(false, "self receive: %v %v", got, err)
	}
	if _, err := self.Wait(); err != nil {
		return err
	}
	if err := mpi.Ssend(c, []int{1}, mpi.ProcNull, 0); err != nil {
		return err
	}
	// Truncation: the sender completes, the receiver gets the typed error.
	switch r {
	case 0:
		return mpi.Ssend(c, fill(10, 0, 0), 1, 6)
	case 1:
		_, err := mpi.Recv(c, make([]float64, 4), 0, 6)
		var te *mpi.TruncationError
		return check(errors.As(err, &te) && te.Need == 10, "truncated synchronous message: %v", err)
	}
	return nil
}

// sendrecvReplace: a shift along a non-periodic chain with one buffer; the first rank receives
// from ProcNull and keeps its values.
func sendrecvReplace(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	next, prev := r+1, r-1
	if next == p {
		next = mpi.ProcNull
	}
	if prev < 0 {
		prev = mpi.ProcNull
	}
	for _, n := range []int{1, 7, 50000} {
		buf := fill(n, r, 0)
		st, err := mpi.SendrecvReplace(c, buf, next, 8, prev, 8)
		if err != nil {
			return err
		}
		want, wantSrc := fill(n, r-1, 0), r-1
		if prev == mpi.ProcNull {
			want, wantSrc = fill(n, r, 0), mpi.ProcNull
		}
		if err := check(st.Source == wantSrc, "status %+v, want source %d", st, wantSrc); err != nil {
			return err
		}
		if err := sameAs(buf, want); err != nil {
			return err
		}
	}
	return nil
}

// matchedProbe: a message taken by Mprobe cannot be matched by a later receive; goroutines
// that Mprobe and Mrecv concurrently receive every message exactly once.
func matchedProbe(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	const perSender = 20
	if r != 0 {
		if err := mpi.Send(c, []float64{1, 2, 3}, 0, 10); err != nil { // taken by Mprobe
			return err
		}
		if err := mpi.Send(c, make([]float64, 40000), 0, 10); err != nil { // then the next
			return err
		}
		for i := 0; i < perSender; i++ {
			size := 1 + i%3
			if i%7 == 0 {
				size = 20000 // rendezvous
			}
			msg := make([]int64, size)
			msg[0] = int64(r*perSender + i)
			if err := mpi.Send(c, msg, 0, 11); err != nil {
				return err
			}
		}
		return nil
	}
	if _, _, found, err := c.Improbe(mpi.AnySource, 12); found || err != nil {
		return check(false, "Improbe of a tag nobody sends: %v %v", found, err)
	}
	for src := 1; src < p; src++ {
		m, st, err := c.Mprobe(src, 10)
		if err != nil {
			return err
		}
		if err := check(st.Count == 3 && st.Source == src && c.Pending() == 1, "Mprobe: %+v, pending %d", st, c.Pending()); err != nil {
			return err
		}
		// This receive must get the second message, not the one Mprobe holds.
		big := make([]float64, 40000)
		if st, err := mpi.Recv(c, big, src, 10); err != nil || st.Count != 40000 {
			return check(false, "receive after Mprobe: %+v %v", st, err)
		}
		small := make([]float64, 3)
		if st, err := mpi.Mrecv(m, small); err != nil || st.Count != 3 || small[2] != 3 {
			return check(false, "Mrecv: %+v %v %v", st, err, small)
		}
		if _, err := mpi.Mrecv(m, small); !errors.Is(err, mpi.ErrRequest) {
			return check(false, "second Mrecv of one message: %v", err)
		}
	}
	// Four goroutines share the receiving.
	var mu sync.Mutex
	seen := map[int64]int{}
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	var left = (p - 1) * perSender
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left-- // this goroutine will receive one message
				mu.Unlock()
				m, st, err := c.Mprobe(mpi.AnySource, 11)
				if err != nil {
					errs <- err
					return
				}
				buf := make([]int64, st.Count)
				if st, err = mpi.Mrecv(m, buf); err != nil || st.Count != len(buf) {
					errs <- check(false, "Mrecv: %+v %v", st, err)
					return
				}
				mu.Lock()
				seen[buf[0]]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for src := 1; src < p; src++ {
		for i := 0; i < perSender; i++ {
			if n := seen[int64(src*perSender+i)]; n != 1 {
				return check(false, "message %d of rank %d received %d times", i, src, n)
			}
		}
	}
	m, st, err := c.Mprobe(mpi.ProcNull, 0)
	if err != nil || st.Source != mpi.ProcNull {
		return check(false, "Mprobe of ProcNull: %+v %v", st, err)
	}
	st, err = mpi.Mrecv(m, []int{7})
	return check(err == nil && st.Source == mpi.ProcNull && st.Count == 0 && c.Pending() == 0, "Mrecv of ProcNull: %+v %v", st, err)
}
