package pieceserver

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mpios/mpios/internal/testbin"
)

// niceOf returns the nice value of thread tid of this process, as the kernel reports it.
func niceOf(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Field 19 is nice; the command (field 2) is parenthesized and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCopiesAreReceivedAtALowerPriority: the goroutine that receives a copy runs on a
// thread n nice levels below the process, and that thread ends with it, so no other
// goroutine inherits the priority; with 0 nothing changes.
func TestCopiesAreReceivedAtALowerPriority(t *testing.T) {
	for _, n := range []int{0, 5, 19} {
		type seen struct {
			tid, before, after int
			lowered            bool
		}
		got := make(chan seen, 1)
		go func() {
			runtime.LockOSThread() // the thread whose priority lowerPriority changes
			tid := unix.Gettid()
			before := niceOf(t, tid)
			lowered := lowerPriority(n)
			got <- seen{tid, before, niceOf(t, tid), lowered}
		}()
		s := <-got
		if want := min(s.before+n, 19); s.after != want || s.lowered != (n > 0) {
			t.Errorf("nice +%d: thread at nice %d after %d (lowered %v), want %d", n, s.after, s.before, s.lowered, want)
		}
		if n > 0 && s.tid != unix.Getpid() {
			// The locked thread exits with its goroutine (the main thread, which cannot,
			// is parked for good instead).
			testbin.WaitFor(t, 10*time.Second, "the copy's thread to exit with its goroutine", func() bool {
				_, err := os.Stat("/proc/self/task/" + strconv.Itoa(s.tid))
				return err != nil
			})
		}
	}
}
