package offerconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// listen accepts one connection on loopback and hands it to serve.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return ln.Addr().String()
}

// "A peer that froze ... would otherwise block the fetch for good": a node that takes the
// proof and then nothing more fails the requester's write once no byte moved for the limit.
func TestAWriteToAPeerThatTakesNothingFailsAfterTheIdleLimit(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	addr := listen(t, func(c net.Conn) {
		io.ReadFull(c, make([]byte, 4)) // the proof, then nothing
		<-stop
	})
	c, err := Dial(addr, []byte("prf!"), time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	// Far more than the socket buffers of both ends hold.
	_, err = c.Write(make([]byte, 256<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that reads nothing: %v, want a deadline exceeded", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the write failed after %v", took)
	}
}

// The same for a read: a node that sends nothing (a buddy that never acknowledges).
func TestAReadFromASilentPeerFailsAfterTheIdleLimit(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	addr := listen(t, func(net.Conn) { <-stop })
	c, err := Dial(addr, []byte("prf!"), time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a silent peer: %v, want a deadline exceeded", err)
	}
}

// The limit is on silence, not on the transfer: a peer that keeps moving bytes, slowly,
// takes far longer than the limit in all without failing.
func TestAPeerThatKeepsMovingBytesIsNotCutOff(t *testing.T) {
	const parts, part = 8, 1 << 10
	addr := listen(t, func(c net.Conn) {
		io.ReadFull(c, make([]byte, 4))
		for i := range parts {
			time.Sleep(60 * time.Millisecond)
			c.Write(bytes.Repeat([]byte{byte(i)}, part))
		}
	})
	c, err := Dial(addr, []byte("prf!"), time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	got, err := io.ReadAll(io.LimitReader(c, parts*part))
	if err != nil || len(got) != parts*part {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, parts*part)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("took %v: the test did not outlast the idle limit", took)
	}
}

// Idle is the node's end: the same limit on a connection it accepted.
func TestIdleLimitsTheNodesEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Idle(c, 100*time.Millisecond).Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a requester that sends nothing: %v, want a deadline exceeded", err)
	}
}

func ExampleDial() {
	// A node's offer: it takes the proof and answers "ok".
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, _ := ln.Accept()
		defer c.Close()
		io.ReadFull(Idle(c, 0), make([]byte, 5))
		c.Write([]byte("ok\n"))
	}()
	c, err := Dial(ln.Addr().String(), []byte("proof"), time.Second, 0)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	answer, _ := io.ReadAll(c)
	os.Stdout.Write(answer)
	// Output: ok
}
