package pieceserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// "Piece offers are capped per requester and in total" (issue 14, item 8).
func TestOffersAreCappedPerRequesterAndInTotal(t *testing.T) {
	o := newOffers(3, 2)
	for _, who := range []string{"a", "a", "b"} {
		if err := o.take(who); err != nil {
			t.Fatalf("take(%s): %v", who, err)
		}
	}
	if err := o.take("a"); !errors.Is(err, ErrTooManyOffers) || !strings.Contains(err.Error(), "2 for this requester, at most 2") {
		t.Errorf("a's third offer: %v", err)
	}
	if err := o.take("c"); !errors.Is(err, ErrTooManyOffers) || !strings.Contains(err.Error(), "3 on this node, at most 3") {
		t.Errorf("an offer beyond the total: %v", err)
	}
	o.release("a")
	o.release("nobody") // never counted: no effect
	if err := o.take("c"); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if o.total != 3 || o.by["a"] != 1 || o.by["b"] != 1 || o.by["c"] != 1 {
		t.Errorf("counts %d %v", o.total, o.by)
	}
	for _, who := range []string{"a", "b", "c"} {
		o.release(who)
	}
	if o.total != 0 || len(o.by) != 0 {
		t.Errorf("after releasing all: %d %v", o.total, o.by)
	}
}

func TestRequesterOf(t *testing.T) {
	for reply, want := range map[string]string{
		"_INBOX.k3Xq9.Tz81": "_INBOX.k3Xq9", // nats.go's request: one inbox per connection
		"_INBOX.k3Xq9.Tz82": "_INBOX.k3Xq9",
		"_INBOX.oldstyle":   "_INBOX.oldstyle",
		"reply":             "reply",
	} {
		if got := requesterOf(reply); got != want {
			t.Errorf("requesterOf(%q) = %q, want %q", reply, got, want)
		}
	}
}

// pieceData is the content of the test checkpoint's piece of rank.
func pieceData(rank int) []byte {
	return bytes.Repeat([]byte{byte('a' + rank)}, 1000+rank)
}

// secretOf is the secret of the test job id.
func secretOf(id string) []byte { return bytes.Repeat([]byte(id), 32)[:32] }

// keyring returns a keyring of node that knows the keys of jobs.
func keyring(t testing.TB, node string, jobs ...string) *ctlauth.JobKeyring {
	t.Helper()
	r, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range jobs {
		if err := r.Learn(id, secretOf(id), ""); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// channel is a process of job id (its rank), holding the job's key.
func channel(t testing.TB, id string, rank int) *ctlauth.JobChannel {
	t.Helper()
	c, err := ctlauth.NewJobChannel(id, secretOf(id), ctlauth.Sender{Role: ctlauth.RoleRank, Rank: rank}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startServer runs a piece server for node n1 over a store holding checkpoint 1 of job j
// (two ranks); the node knows the keys of jobs j and other.
func startServer(t *testing.T, url string, maxOffers, perRequester int) *Server {
	t.Helper()
	return startServerWith(t, url, maxOffers, perRequester, keyring(t, "n1", "j", "other"))
}

func startServerWith(t *testing.T, url string, maxOffers, perRequester int, keys *ctlauth.JobKeyring) *Server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := ckptstore.Open(dir, &ckptstore.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	m := ckptstore.Manifest{Job: "j", Seq: 1, Iteration: 100, Size: 2}
	for rank := range 2 {
		info, err := st.PutPiece("j", 1, rank, bytes.NewReader(pieceData(rank)))
		if err != nil {
			t.Fatal(err)
		}
		m.Pieces = append(m.Pieces, info)
	}
	if err := st.CommitManifest(m); err != nil {
		t.Fatal(err)
	}
	nc := testbin.Connect(t, url)
	s, err := Start(nc, Config{Node: "n1", Store: dir, Advertise: "127.0.0.1", MaxOffers: maxOffers, MaxOffersPerRequester: perRequester, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// request asks n1 for rank's piece of checkpoint 1 of job j as a process of job j.
func request(t *testing.T, nc *nats.Conn, rank int) job.PieceReply {
	t.Helper()
	return requestAs(t, nc, channel(t, "j", rank), job.PieceRequest{Job: "j", Seq: 1, Rank: rank})
}

// requestAs sends req as a process of as's job and returns the reply, verified under that
// job's key (a refusal of a job the node does not know comes in clear).
func requestAs(t *testing.T, nc *nats.Conn, as *ctlauth.JobChannel, req job.PieceRequest) job.PieceReply {
	t.Helper()
	return ask(t, nc, as, job.PieceSubject("n1", as.Job()), req)
}

// ask sends req on subject as a process of as's job and returns the reply, verified under
// that job's key (a refusal of a job the node does not know comes in clear).
func ask(t *testing.T, nc *nats.Conn, as *ctlauth.JobChannel, subject string, req any) job.PieceReply {
	t.Helper()
	data, err := as.Encode(subject, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep job.PieceReply
	if _, err := as.Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil {
		if job.Decode(msg.Data, &rep) != nil || rep.Addr != "" {
			t.Fatalf("reply does not verify: %v", err)
		}
	}
	return rep
}

// take reads the piece an offer names, proving the offer with job j's key.
func take(t *testing.T, rep job.PieceReply) []byte {
	t.Helper()
	return takeWith(t, rep, channel(t, "j", 0).OfferProof(rep.Token))
}

// takeWith connects to an offer and presents proof.
func takeWith(t *testing.T, rep job.PieceReply, proof []byte) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", rep.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(proof); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A requester that leaves its offers open cannot make the node open more than the caps
// allow (each is a socket and a file); others are served until the total is reached, and
// an offer taken makes room again.
func TestPieceOffersAreCapped(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 3, 2)
	greedy, other := testbin.Connect(t, url), testbin.Connect(t, url)
	var open []job.PieceReply
	for range 2 {
		rep := request(t, greedy, 0)
		if rep.Error != "" {
			t.Fatal(rep.Error)
		}
		open = append(open, rep)
	}
	if rep := request(t, greedy, 0); !strings.Contains(rep.Error, "too many piece offers open: 2 for this requester, at most 2") {
		t.Errorf("greedy requester's third offer: %+v", rep)
	}
	if rep := request(t, other, 1); rep.Error != "" || rep.Size != int64(len(pieceData(1))) {
		t.Fatalf("another requester: %+v", rep)
	} else if got := take(t, rep); !bytes.Equal(got, pieceData(1)) {
		t.Errorf("piece of rank 1: %d bytes, want %d", len(got), len(pieceData(1)))
	}
	// The other requester's offer was taken: room for one more in total, then none.
	var third job.PieceReply
	testbin.WaitFor(t, 5*time.Second, "the taken offer to be released", func() bool {
		third = request(t, other, 1)
		return third.Error == ""
	})
	if rep := request(t, testbin.Connect(t, url), 1); !strings.Contains(rep.Error, "3 on this node, at most 3") {
		t.Errorf("an offer beyond the total: %+v", rep)
	}
	if got := take(t, open[0]); !bytes.Equal(got, pieceData(0)) {
		t.Errorf("piece of rank 0: %d bytes", len(got))
	}
	testbin.WaitFor(t, 5*time.Second, "the greedy requester's offer to be released", func() bool {
		return request(t, greedy, 0).Error == ""
	})
}

// Requests that cannot be served are refused with the reason and hold nothing.
func TestPieceRequestRefusals(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 1, 1)
	nc := testbin.Connect(t, url)
	for range 3 { // refusals do not use up the single offer
		if rep := request(t, nc, 7); !strings.Contains(rep.Error, "pcmd: node n1: ") || rep.Addr != "" {
			t.Errorf("a piece that does not exist: %+v", rep)
		}
	}
	msg, err := nc.Request(job.PieceSubject("n1", "j"), []byte("\xc1garbage"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep job.PieceReply
	if _, err := channel(t, "j", 0).Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil ||
		!strings.Contains(rep.Error, "pcmd: node n1: piece request: ctlauth: malformed envelope") {
		t.Errorf("garbage: %+v %v", rep, err)
	}
	if rep := request(t, nc, 0); rep.Error != "" {
		t.Errorf("the one offer after refusals: %+v", rep)
	}
}
