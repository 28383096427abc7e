package mpi

import (
	"errors"
	"testing"

	"github.com/mpios/mpios/comm"
)

// A peer announcing a value of comm.MaxMessage bytes (1 TiB) must get a refusal, not make the
// receiver allocate it (which would kill the process).
func TestRecvValueRefusesAnAnnouncedSizeBeforeAllocating(t *testing.T) {
	nw := comm.NewInProcNetwork(2)
	w0, err := Attach(nw.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	w1, err := Attach(nw.Endpoint(1))
	if err != nil {
		t.Fatal(err)
	}
	defer w0.e.close()
	defer w1.e.close()
	for _, total := range []uint64{comm.MaxMessage, maxValueBytes + 1} {
		rts := &comm.Header{Kind: comm.KindRTS, Ctx: w1.ctx, Tag: 5, Elem: elemValue, Total: total, ID: 99}
		if err := w0.e.ep.Send(1, rts, nil); err != nil {
			t.Fatal(err)
		}
		var v []byte
		_, err := RecvValue(w1, &v, 0, 5)
		var te *TruncationError
		if !errors.As(err, &te) || te.Have != maxValueBytes || uint64(te.Need) != total {
			t.Errorf("announced %d bytes: %v, want a TruncationError", total, err)
		}
	}
	// The ranks still talk: an ordinary value goes through.
	go func() { _ = SendValue(w0, "after", 1, 6) }()
	var s string
	if _, err := RecvValue(w1, &s, 0, 6); err != nil || s != "after" {
		t.Errorf("value after the refusals: %q, %v", s, err)
	}
}
