package rankproc

import (
	"strings"
	"syscall"
	"testing"
)

func TestForwardLines(t *testing.T) {
	long := strings.Repeat("y", 200<<10) // longer than the reader's buffer
	in := "a\n\nb c\n" + long + "\nlast"
	var got []string
	forwardLines(strings.NewReader(in), Stdout, func(s Stream, line []byte) {
		if s != Stdout {
			t.Errorf("stream %v", s)
		}
		got = append(got, string(line))
	})
	want := []string{"a", "", "b c", long, "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %d lines %.40q, want %.40q", len(got), got, want)
	}
}

func TestExitString(t *testing.T) {
	for _, tc := range []struct {
		e      Exit
		s      string
		status int
	}{
		{Exit{Code: 3}, "exited with status 3", 3},
		{Exit{Code: -1, Signal: syscall.SIGKILL}, "was killed by signal killed", 137},
		{Exit{}, "exited with status 0", 0},
	} {
		if tc.e.String() != tc.s || tc.e.Status() != tc.status || tc.e.Success() != (tc.status == 0) {
			t.Errorf("%+v: %q %d", tc.e, tc.e.String(), tc.e.Status())
		}
	}
}
