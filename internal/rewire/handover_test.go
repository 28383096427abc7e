package rewire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

var secret = []byte("job secret of the test")

// successorSide dials pred as rank's successor and returns the state it received.
func successorSide(t *testing.T, spec Spec, key []byte, rank int, final chan<- Final) {
	t.Helper()
	s, err := Dial(spec, key, rank, "127.0.0.1:5555", 5*time.Second)
	if err != nil {
		final <- Final{Abort: "dial: " + err.Error()}
		return
	}
	defer s.Close()
	blob, err := s.ReceiveState()
	if err != nil {
		final <- Final{Abort: "state: " + err.Error()}
		return
	}
	s.Ack(nil)
	f, err := s.ReceiveFinal(5 * time.Second)
	if err != nil {
		final <- Final{Abort: "final: " + err.Error()}
		return
	}
	if f.Abort == "" {
		s.Ack(nil)
	}
	f.Snap.Unexpected = append(f.Snap.Unexpected, Message{Data: blob})
	final <- f
}

// The whole exchange: the successor authenticates, receives the state in pieces larger
// than one frame, and gets the final address table and snapshot.
func TestHandOverCarriesStateAndFinal(t *testing.T) {
	pred, err := Listen("127.0.0.1", secret, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer pred.Close()
	spec, err := ParseSpec(pred.Spec().String())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Final, 1)
	go successorSide(t, spec, secret, 3, got)
	addr, err := pred.Accept(5 * time.Second)
	if err != nil || addr != "127.0.0.1:5555" {
		t.Fatalf("Accept = %q, %v", addr, err)
	}
	state := bytes.Repeat([]byte("0123456789abcdef"), stateChunk/16*2+5) // three frames
	if err := pred.SendState(int64(len(state)), func(w io.Writer) error { _, err := w.Write(state); return err }); err != nil {
		t.Fatal(err)
	}
	want := Final{Addrs: []string{"a:1", "b:2", "c:3", "127.0.0.1:5555"}, Snap: Snapshot{NextCtx: 4, Unexpected: []Message{{Ctx: 1, Peer: 2, Tag: 7, Data: []byte("x")}}}}
	if err := pred.SendFinal(want, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f := <-got
	if f.Abort != "" {
		t.Fatal(f.Abort)
	}
	blob := f.Snap.Unexpected[len(f.Snap.Unexpected)-1].Data
	if !bytes.Equal(blob, state) {
		t.Fatalf("state of %d bytes arrived as %d bytes", len(state), len(blob))
	}
	if strings.Join(f.Addrs, ",") != strings.Join(want.Addrs, ",") || f.Snap.NextCtx != 4 || f.Snap.Unexpected[0].Tag != 7 {
		t.Fatalf("final %+v, want %+v", f, want)
	}
}

// A process that does not know the job's secret, or claims another rank, is not taken for
// the successor; the real successor still is.
func TestHandOverRefusesImpostors(t *testing.T) {
	pred, err := Listen("127.0.0.1", secret, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pred.Close()
	spec := pred.Spec()
	accepted := make(chan error, 1)
	go func() {
		_, err := pred.Accept(5 * time.Second)
		accepted <- err
	}()
	for _, imp := range []struct {
		key  []byte
		rank int
	}{{[]byte("wrong secret"), 1}, {secret, 2}} {
		s, err := Dial(spec, imp.key, imp.rank, "127.0.0.1:6666", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The predecessor drops the connection: reading fails.
		if _, err := s.ReceiveState(); err == nil {
			t.Fatalf("impostor (rank %d) received state", imp.rank)
		}
		s.Close()
	}
	got := make(chan Final, 1)
	go successorSide(t, spec, secret, 1, got)
	if err := <-accepted; err != nil {
		t.Fatalf("the real successor was not accepted: %v", err)
	}
	pred.SendState(1, func(w io.Writer) error { _, err := w.Write([]byte{1}); return err })
	pred.SendFinal(Final{Abort: "test over"}, 0)
	if f := <-got; f.Abort != "test over" {
		t.Fatalf("final %+v, want the abort", f)
	}
}

// Cancel ends a wait for a successor that is known to be gone, with the reason.
func TestCancelEndsAccept(t *testing.T) {
	pred, err := Listen("127.0.0.1", secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pred.Close()
	done := make(chan error, 1)
	go func() {
		_, err := pred.Accept(time.Minute)
		done <- err
	}()
	pred.Cancel("successor exited with status 3")
	if err := <-done; err == nil || !strings.Contains(err.Error(), "status 3") {
		t.Fatalf("Accept = %v, want the cancel reason", err)
	}
}

// A successor that refuses the state says why, and the predecessor's SendState fails with
// it.
func TestRefusedStateIsAnError(t *testing.T) {
	pred, err := Listen("127.0.0.1", secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pred.Close()
	go func() {
		s, err := Dial(pred.Spec(), secret, 0, "127.0.0.1:7777", 5*time.Second)
		if err != nil {
			return
		}
		defer s.Close()
		if _, err := s.ReceiveState(); err == nil {
			s.Ack(errors.New("registered values differ"))
		}
		s.ReceiveFinal(5 * time.Second)
	}()
	if _, err := pred.Accept(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	err = pred.SendState(3, func(w io.Writer) error { _, err := w.Write([]byte("abc")); return err })
	if err == nil || !strings.Contains(err.Error(), "registered values differ") {
		t.Fatalf("SendState = %v, want the refusal", err)
	}
}

func TestParseSpecRejectsBadSpecs(t *testing.T) {
	for _, s := range []string{"", "127.0.0.1:1", "127.0.0.1:1/zz", "127.0.0.1:1/0011", "nohost/00112233445566778899aabbccddeeff"} {
		if _, err := ParseSpec(s); err == nil {
			t.Errorf("ParseSpec(%q) succeeded", s)
		}
	}
	in := Spec{Addr: "10.1.2.3:4567", Token: bytes.Repeat([]byte{0xab}, 16)}
	if out, err := ParseSpec(in.String()); err != nil || out.Addr != in.Addr || !bytes.Equal(out.Token, in.Token) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
}
