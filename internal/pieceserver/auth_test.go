package pieceserver

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
)

// "Piece requests return any job's checkpoint pieces to anyone" (issue 14, item 6): a
// request is served only if it verifies under the key of the job it is published for, and
// that job may read the piece's job.
func TestPieceRequestsOfOtherJobsAreRefused(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 8, 8)
	nc := testbin.Connect(t, url)
	want := job.PieceRequest{Job: "j", Seq: 1, Rank: 0}
	// A process of another job the node knows asks for j's piece.
	if rep := requestAs(t, nc, channel(t, "other", 0), want); !strings.Contains(rep.Error, "job other may not read the checkpoints of job j") || rep.Addr != "" {
		t.Errorf("another job's process: %+v", rep)
	}
	// A job the node never ran.
	if rep := requestAs(t, nc, channel(t, "stranger", 0), want); !strings.Contains(rep.Error, "has not learned its key") || rep.Addr != "" {
		t.Errorf("an unknown job: %+v", rep)
	}
	// Someone claiming to be a process of j, under a secret of its own.
	evil, err := ctlauth.NewJobChannel("j", []byte("not the job's secret at all!!!!!"), ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	subject := job.PieceSubject("n1", "j")
	data, _ := evil.Encode(subject, want, time.Now())
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep job.PieceReply
	if _, err := channel(t, "j", 0).Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil || !strings.Contains(rep.Error, "authentication failed") || rep.Addr != "" {
		t.Errorf("a forged request: %+v %v", rep, err)
	}
	// The job's own request is served.
	if rep := request(t, nc, 0); rep.Error != "" || !bytes.Equal(take(t, rep), pieceData(0)) {
		t.Errorf("the job's own request: %+v", rep)
	}
}

// The token of an offer travels on NATS, where others may read it; connecting with it
// alone, or with a proof under another key, takes nothing, and the job's process still
// takes the offer afterwards.
func TestAnOfferNeedsTheJobKeyNotJustItsToken(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 8, 8)
	rep := request(t, testbin.Connect(t, url), 1)
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	evil, _ := ctlauth.NewJobChannel("j", []byte("not the job's secret at all!!!!!"), ctlauth.Sender{Role: ctlauth.RoleRank}, time.Now())
	for name, proof := range map[string][]byte{
		"the raw token, padded": append(bytes.Clone(rep.Token), make([]byte, ctlauth.OfferProofSize-len(rep.Token))...),
		"another key's proof":   evil.OfferProof(rep.Token),
	} {
		if got := takeWith(t, rep, proof); len(got) != 0 {
			t.Errorf("%s: read %d bytes of the piece", name, len(got))
		}
	}
	if got := take(t, rep); !bytes.Equal(got, pieceData(1)) {
		t.Errorf("the job's process then reads %d bytes, want the piece", len(got))
	}
}

// A job keeps buddy copies of its own pieces only.
func TestBuddyCopiesOfAnotherJobsPiecesAreRefused(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 8, 8)
	nc := testbin.Connect(t, url)
	as := channel(t, "other", 0)
	subject := job.PieceCopySubject("n1", "other")
	data, _ := as.Encode(subject, job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 1, Rank: 0}, Size: 10, Checksum: "x"}, time.Now())
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep job.PieceReply
	if _, err := as.Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil || !strings.Contains(rep.Error, "job other may not store pieces of job j") {
		t.Errorf("a copy of another job's piece: %+v %v", rep, err)
	}
	// Unsigned, as an attacker without any key would send it.
	plain, _ := job.Encode(job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 1, Rank: 0}, Size: 10, Checksum: "x"})
	msg, err = nc.Request(job.PieceCopySubject("n1", "j"), plain, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := channel(t, "j", 0).Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil || rep.Addr != "" || !strings.Contains(rep.Error, "malformed envelope") {
		t.Errorf("an unsigned copy: %+v %v", rep, err)
	}
}

// Manifest lists go only to processes of a job that may read them, under its key; other
// requests get no answer at all.
func TestManifestListsAreAnsweredOnlyUnderTheJobKey(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	startServer(t, url, 8, 8)
	nc := testbin.Connect(t, url)
	ask := func(as *ctlauth.JobChannel, data []byte) (*job.ManifestsReply, error) {
		subject := job.ManifestsSubject(as.Job())
		if data == nil {
			data, _ = as.Encode(subject, job.ManifestsRequest{Job: "j"}, time.Now())
		}
		msg, err := nc.Request(subject, data, 300*time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var rep job.ManifestsReply
		if _, err := as.Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil {
			return nil, err
		}
		return &rep, nil
	}
	rep, err := ask(channel(t, "j", 0), nil)
	if err != nil || rep == nil || rep.Node != "n1" || len(rep.Manifests) != 1 {
		t.Fatalf("the job's own request: %+v %v", rep, err)
	}
	if rep, err := ask(channel(t, "other", 0), nil); rep != nil || err != nil {
		t.Errorf("another job's request was answered: %+v %v", rep, err)
	}
	plain, _ := job.Encode(job.ManifestsRequest{Job: "j"})
	if rep, err := ask(channel(t, "j", 0), plain); rep != nil || err != nil {
		t.Errorf("an unsigned request was answered: %+v %v", rep, err)
	}
}
