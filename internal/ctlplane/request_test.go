package ctlplane_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/natsembed"
	"github.com/mpios/mpios/internal/testbin"
)

// answer subscribes on subject and answers every request with reply after delay.
func answer(t *testing.T, nc *nats.Conn, subject string, delay time.Duration, reply func(*nats.Msg)) {
	t.Helper()
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { time.Sleep(delay); reply(m) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// takeGenuine accepts only the reply "genuine".
func takeGenuine(got *string) func(*nats.Msg) error {
	return func(m *nats.Msg) error {
		if string(m.Data) != "genuine" {
			return fmt.Errorf("%q does not verify", m.Data)
		}
		*got = string(m.Data)
		return nil
	}
}

// "Anyone on the NATS server can answer a request, and answer first": an attacker's reply
// and a forged "no responders" status, both ahead of the responder's, are skipped.
func TestRequestTakesTheReplyThatVerifiesNotTheFirst(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	responder, attacker, asker := testbin.Connect(t, url), testbin.Connect(t, url), testbin.Connect(t, url)
	answer(t, responder, "svc", 100*time.Millisecond, func(m *nats.Msg) { m.Respond([]byte("genuine")) })
	answer(t, attacker, "svc", 0, func(m *nats.Msg) {
		m.Respond([]byte("forged"))
		status := nats.NewMsg(m.Reply)
		status.Header.Set("Status", "503")
		attacker.PublishMsg(status)
	})
	var got string
	if err := ctlplane.Request(asker, "svc", nil, 5*time.Second, takeGenuine(&got)); err != nil || got != "genuine" {
		t.Fatalf("Request = %v, took %q; want the genuine reply", err, got)
	}
}

// A "no responders" status is believed once no reply is taken within the grace: a subject
// nobody serves fails at once, not after the whole wait.
func TestRequestBelievesNoRespondersAfterTheGrace(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	var got string
	start := time.Now()
	err := ctlplane.Request(testbin.Connect(t, url), "nobody", nil, 10*time.Second, takeGenuine(&got))
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Request to nobody = %v, want nats.ErrNoResponders", err)
	}
	if took := time.Since(start); took < ctlplane.NoRespondersGrace || took > 5*time.Second {
		t.Errorf("took %v, want the grace (%v), not the wait", took, ctlplane.NoRespondersGrace)
	}
}

// Only refused replies within the wait: a timeout that says why the last was refused.
func TestRequestWithOnlyRefusedRepliesTimesOutSayingWhy(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	attacker := testbin.Connect(t, url)
	answer(t, attacker, "svc", 0, func(m *nats.Msg) { m.Respond([]byte("forged")) })
	var got string
	err := ctlplane.Request(testbin.Connect(t, url), "svc", nil, 300*time.Millisecond, takeGenuine(&got))
	var refused *ctlplane.RefusedError
	if !errors.Is(err, nats.ErrTimeout) || !errors.As(err, &refused) || refused.Refused != 1 ||
		!strings.Contains(err.Error(), `1 replies refused, the last: "forged" does not verify`) {
		t.Fatalf("Request = %v, want a timeout naming the refused reply", err)
	}
}

// A Tentative answer (a refusal in clear from the responder itself) ends the wait early, and
// is the error if no reply is taken meanwhile; a reply taken within it still wins.
func TestATentativeAnswerEndsTheWaitUnlessABetterOneComes(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	refuser, asker := testbin.Connect(t, url), testbin.Connect(t, url)
	answer(t, refuser, "svc", 0, func(m *nats.Msg) { m.Respond([]byte("refused in clear")) })
	tentative := func(got *string) func(*nats.Msg) error {
		genuine := takeGenuine(got)
		return func(m *nats.Msg) error {
			if string(m.Data) == "refused in clear" {
				return &ctlplane.Tentative{Err: errors.New("the node refuses"), Wait: 200 * time.Millisecond}
			}
			return genuine(m)
		}
	}
	var got string
	start := time.Now()
	err := ctlplane.Request(asker, "svc", nil, 10*time.Second, tentative(&got))
	var tent *ctlplane.Tentative
	if !errors.As(err, &tent) || err.Error() != "the node refuses" {
		t.Fatalf("Request = %v, want the tentative refusal", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v: the tentative answer did not end the wait", took)
	}
	answer(t, testbin.Connect(t, url), "svc", 50*time.Millisecond, func(m *nats.Msg) { m.Respond([]byte("genuine")) })
	if err := ctlplane.Request(asker, "svc", nil, 10*time.Second, tentative(&got)); err != nil || got != "genuine" {
		t.Fatalf("Request = %v, took %q; want the genuine reply that came within the tentative wait", err, got)
	}
}

func ExampleRequest() {
	srv, err := natsembed.Start("127.0.0.1", "example")
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	responder, _ := nats.Connect(srv.URL())
	defer responder.Close()
	attacker, _ := nats.Connect(srv.URL())
	defer attacker.Close()
	asker, _ := nats.Connect(srv.URL())
	defer asker.Close()
	// The service answers after a moment; an attacker answers at once.
	responder.Subscribe("svc", func(m *nats.Msg) { time.Sleep(50 * time.Millisecond); m.Respond([]byte("signed: 42")) })
	attacker.Subscribe("svc", func(m *nats.Msg) { m.Respond([]byte("forged: 0")) })
	responder.Flush()
	attacker.Flush()

	var answer string
	err = ctlplane.Request(asker, "svc", nil, 5*time.Second, func(m *nats.Msg) error {
		if !strings.HasPrefix(string(m.Data), "signed: ") { // stands for a signature check
			return errors.New("not signed")
		}
		answer = strings.TrimPrefix(string(m.Data), "signed: ")
		return nil
	})
	fmt.Println(answer, err)
	// Output: 42 <nil>
}

// A scatter request gathers every reply within the wait: a forged "no responders" status
// sent first ends nothing, and verifying the replies is the caller's part.
func TestGatherCollectsEveryReplyWithinTheWait(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	a, b, attacker, asker := testbin.Connect(t, url), testbin.Connect(t, url), testbin.Connect(t, url), testbin.Connect(t, url)
	answer(t, attacker, "all", 0, func(m *nats.Msg) {
		status := nats.NewMsg(m.Reply)
		status.Header.Set("Status", "503")
		attacker.PublishMsg(status)
	})
	answer(t, a, "all", 50*time.Millisecond, func(m *nats.Msg) { m.Respond([]byte("a")) })
	answer(t, b, "all", 100*time.Millisecond, func(m *nats.Msg) { m.Respond([]byte("b")) })
	msgs, err := ctlplane.Gather(asker, "all", nil, time.Second)
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Data))
	}
	if err != nil || strings.Join(got, " ") != "a b" {
		t.Fatalf("Gather = %q, %v; want a and b", got, err)
	}
}
