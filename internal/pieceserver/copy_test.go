package pieceserver

import (
	"bufio"
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// offerCopy sends a copy of data as rank 0's piece of checkpoint 2 of job j, claimed to be
// want (size and checksum), to node n2, and returns the refusal or the node's answer line.
func offerCopy(t *testing.T, url string, want ckptstore.PieceInfo, data []byte) string {
	t.Helper()
	return offerCopyAs(t, url, want, false, data)
}

// offerCopyAs is offerCopy, offering a sparse stream if sparse (data is then the stream),
// and failing unless the node takes the copy in the form offered.
func offerCopyAs(t *testing.T, url string, want ckptstore.PieceInfo, sparse bool, data []byte) string {
	t.Helper()
	return offerCopyFrom(t, url, "", want, sparse, data)
}

// offerCopyFrom is offerCopyAs from a rank that names its node from.
func offerCopyFrom(t *testing.T, url, from string, want ckptstore.PieceInfo, sparse bool, data []byte) string {
	t.Helper()
	rep := askCopy(t, url, job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 2, Rank: 0}, Size: want.Size, Checksum: want.Checksum, Sparse: sparse, From: from})
	if rep.Error != "" {
		return rep.Error
	}
	if rep.Sparse != sparse {
		t.Fatalf("offered a sparse copy: %v; the node takes it sparse: %v", sparse, rep.Sparse)
	}
	c, err := net.Dial("tcp", rep.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(channel(t, "j", 0).OfferProof(rep.Token))
	c.Write(data)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// sourcePiece stores data as rank 0's piece of job j's checkpoint 2 on node n1, as the rank
// that copies it would have, and returns the piece's record and data with one bit flipped.
func sourcePiece(t *testing.T, data []byte) (ckptstore.PieceInfo, []byte) {
	t.Helper()
	src, err := ckptstore.Open(t.TempDir(), &ckptstore.Options{Node: "n1", Checksum: ckptstore.CRC32C})
	if err != nil {
		t.Fatal(err)
	}
	info, err := src.PutPiece("j", 2, 0, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(data)
	damaged[7] ^= 1
	return info, damaged
}

// A buddy copy is acknowledged only once it is verified and durable; a damaged one is
// refused; one beyond the node's cap is refused before any byte moves.
func TestBuddyCopyIsVerifiedBeforeItIsAcknowledged(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir := filepath.Join(t.TempDir(), "store")
	srv, err := Start(nc, Config{Node: "n2", Store: dir, Advertise: "127.0.0.1", Cap: 1 << 20, Keys: keyring(t, "n2", "j")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	data := bytes.Repeat([]byte("piece"), 1000)
	want, damaged := sourcePiece(t, data)
	if got := offerCopy(t, url, want, damaged); !strings.Contains(got, "checksum mismatch") {
		t.Errorf("a damaged copy: answer %q, want a checksum mismatch", got)
	}
	if got := offerCopy(t, url, want, data); got != "ok" {
		t.Fatalf("a good copy: answer %q, want ok", got)
	}
	if err := commitCopy(dir, want); err != nil {
		t.Errorf("the acknowledged copy does not verify: %v", err)
	}
	big := want
	big.Size = 2 << 20
	if got := offerCopy(t, url, big, nil); !strings.Contains(got, "store full") {
		t.Errorf("a copy beyond the cap: %q, want it refused as store full", got)
	}
}

// A buddy copy offered as a sparse stream (the zero blocks left out) is taken as one,
// verified against the owner's size and checksum, and reads back as the whole piece.
func TestSparseBuddyCopyIsVerifiedBeforeItIsAcknowledged(t *testing.T) {
	url, dir := startBuddy(t)
	data := make([]byte, 100*ckptstore.DirectAlign)
	copy(data[50*ckptstore.DirectAlign:], bytes.Repeat([]byte("piece"), 1000))
	want, stream := sparseSourcePiece(t, data)
	damaged := bytes.Clone(stream.Bytes())
	damaged[100] ^= 1
	if got := offerCopyAs(t, url, want, true, damaged); !strings.Contains(got, "checksum mismatch") {
		t.Errorf("a damaged sparse copy: answer %q, want a checksum mismatch", got)
	}
	if got := offerCopyAs(t, url, want, true, stream.Bytes()); got != "ok" {
		t.Fatalf("a good sparse copy: answer %q, want ok", got)
	}
	if err := commitCopy(dir, want); err != nil {
		t.Errorf("the acknowledged sparse copy does not verify: %v", err)
	}
}

// sparseSourcePiece stores data as rank 0's piece of job j's checkpoint 2 on node n1 from a
// snapshot, as a background checkpoint does, and returns its record and sparse stream.
func sparseSourcePiece(t *testing.T, data []byte) (ckptstore.PieceInfo, *bytes.Buffer) {
	t.Helper()
	var pb ckptstore.PieceBuffer
	pb.Write(data)
	src, err := ckptstore.Open(t.TempDir(), &ckptstore.Options{Node: "n1", Checksum: ckptstore.CRC32C})
	if err != nil {
		t.Fatal(err)
	}
	want, err := src.PutPieceBuffer("j", 2, 0, &pb)
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := pb.WriteSparseTo(&stream); err != nil {
		t.Fatal(err)
	}
	return want, &stream
}

// commitCopy commits checkpoint 2 of job j, with want as its one piece, in node n2's store
// in dir and verifies the copy there.
func commitCopy(dir string, want ckptstore.PieceInfo) error {
	st, err := ckptstore.Open(dir, &ckptstore.Options{Node: "n2"})
	if err != nil {
		return err
	}
	want.Copies = []string{"n2"}
	if err := st.CommitManifest(ckptstore.Manifest{Job: "j", Seq: 2, Size: 1, Pieces: []ckptstore.PieceInfo{want}}); err != nil {
		return err
	}
	_, err = st.VerifyPiece("j", 2, 0)
	return err
}

// A buddy copy is the node's measurement of its link to the sender: a verified copy from a
// rank that names its node is told to Config.Transfer with the bytes that came and the
// time from the connection to the last byte; a damaged copy, or one from a process that
// does not name its node (an older one), is not; a malformed node name is refused.
func TestBuddyCopyMeasuresTheLinkFromItsSender(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	type seen struct {
		from  string
		bytes int64
		d     time.Duration
	}
	got := make(chan seen, 8)
	srv, err := Start(nc, Config{Node: "n2", Store: filepath.Join(t.TempDir(), "store"), Advertise: "127.0.0.1", Keys: keyring(t, "n2", "j"),
		Transfer: func(from string, bytes int64, d time.Duration) { got <- seen{from, bytes, d} }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	data := bytes.Repeat([]byte("piece"), 200_000)
	want, damaged := sourcePiece(t, data)
	if ans := offerCopyFrom(t, url, "n1", want, false, damaged); !strings.Contains(ans, "checksum mismatch") {
		t.Fatalf("a damaged copy: answer %q", ans)
	}
	if ans := offerCopyFrom(t, url, "", want, false, data); ans != "ok" {
		t.Fatalf("a copy without its node: answer %q", ans)
	}
	if ans := offerCopyFrom(t, url, "n1/../x", want, false, data); !strings.Contains(ans, "from") {
		t.Fatalf("a copy from a malformed node name: answer %q, want refused", ans)
	}
	if ans := offerCopyFrom(t, url, "n1", want, false, data); ans != "ok" {
		t.Fatalf("a good copy: answer %q", ans)
	}
	// The transfer is told before the copy is acknowledged: only the good named copy is.
	select {
	case s := <-got:
		if s.from != "n1" || s.bytes != int64(len(data)) || s.d <= 0 {
			t.Fatalf("measured %+v, want %d bytes from n1 in a positive time", s, len(data))
		}
	default:
		t.Fatal("the good copy from n1 was not measured")
	}
	select {
	case s := <-got:
		t.Fatalf("measured another copy: %+v", s)
	default:
	}
}

// A rank that stops sending in the middle of a copy (frozen, cut off) while its connection
// stays open does not hold the node's offer for good: after the idle limit the node gives
// the copy up, says why, and keeps nothing.
func TestACopyWhoseSenderFallsSilentIsGivenUp(t *testing.T) {
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	dir := filepath.Join(t.TempDir(), "store")
	srv, err := Start(nc, Config{Node: "n2", Store: dir, Advertise: "127.0.0.1", Keys: keyring(t, "n2", "j"), IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	data := bytes.Repeat([]byte("piece"), 1000)
	want, _ := sourcePiece(t, data)
	as := channel(t, "j", 0)
	subject := job.PieceCopySubject("n2", "j")
	req, _ := as.Encode(subject, job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 2, Rank: 0}, Size: want.Size, Checksum: want.Checksum}, time.Now())
	msg, err := testbin.Connect(t, url).Request(subject, req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep job.PieceReply
	if _, err := as.Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil || rep.Error != "" {
		t.Fatal(err, rep.Error)
	}
	c, err := net.Dial("tcp", rep.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(channel(t, "j", 0).OfferProof(rep.Token))
	c.Write(data[:len(data)/2]) // and then nothing, the connection open
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "timeout") {
		t.Fatalf("the node's answer to a copy that stopped: %q, %v; want it given up on a timeout", line, err)
	}
	st, _ := ckptstore.Open(dir, &ckptstore.Options{Node: "n2"})
	if _, err := st.VerifyPiece("j", 2, 0); err == nil {
		t.Error("the node kept half a copy")
	}
}

// copyInline sends stream inside the copy request of rank 0's piece of checkpoint 2 of job
// j (as the piece want), with sparse as the request says, and returns the node's reply.
func copyInline(t *testing.T, url string, want ckptstore.PieceInfo, sparse bool, stream []byte) job.PieceReply {
	t.Helper()
	return askCopy(t, url, job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 2, Rank: 0}, Size: want.Size, Checksum: want.Checksum,
		Sparse: sparse, Inline: stream})
}

// askCopy sends req to node n2 as rank 0 of job j and returns the node's reply.
func askCopy(t *testing.T, url string, req job.PieceCopyRequest) job.PieceReply {
	t.Helper()
	return ask(t, testbin.Connect(t, url), channel(t, "j", 0), job.PieceCopySubject("n2", "j"), req)
}

// A piece that is mostly zeros travels inside its copy request (MPI's eager protocol): the
// node stores it without an offer, verified against the owner's size and checksum, and
// says so; a damaged one, one that is not a sparse stream, one with bytes after the
// stream's end and one too large to go inline are refused.
func TestASmallSparseCopyIsStoredFromItsRequest(t *testing.T) {
	url, dir := startBuddy(t)
	data := make([]byte, 256*ckptstore.DirectAlign) // 1 MiB, one block of it not zero
	copy(data[70*ckptstore.DirectAlign:], "piece")
	want, stream := sparseSourcePiece(t, data)
	if stream.Len() > job.MaxInlineCopy {
		t.Fatalf("the sparse stream has %d bytes, more than go inline", stream.Len())
	}
	damaged := bytes.Clone(stream.Bytes())
	damaged[20] ^= 1
	for _, c := range []struct {
		what   string
		sparse bool
		stream []byte
		want   string
	}{
		{"a damaged stream", true, damaged, "checksum mismatch"},
		{"a stream not said to be sparse", false, stream.Bytes(), "not a sparse stream"},
		{"bytes after the end", true, append(bytes.Clone(stream.Bytes()), 0), "after the sparse stream's end"},
		{"a stream too large", true, make([]byte, job.MaxInlineCopy+1), "at most"},
	} {
		if rep := copyInline(t, url, want, c.sparse, c.stream); rep.Stored || !strings.Contains(rep.Error, c.want) {
			t.Errorf("%s: stored %v, error %q; want it refused with %q", c.what, rep.Stored, rep.Error, c.want)
		}
	}
	if rep := copyInline(t, url, want, true, stream.Bytes()); !rep.Stored || rep.Error != "" || rep.Addr != "" {
		t.Fatalf("a good inline copy: reply %+v, want it stored without an offer", rep)
	}
	if err := commitCopy(dir, want); err != nil {
		t.Errorf("the stored inline copy does not verify: %v", err)
	}
}

// startBuddy starts node n2's piece server, which knows job j, on a new NATS server, and
// returns the server's URL and the node's store.
func startBuddy(t *testing.T) (url, dir string) {
	t.Helper()
	url = testbin.NATSServer(t, "", "")
	dir = filepath.Join(t.TempDir(), "store")
	srv, err := Start(testbin.Connect(t, url), Config{Node: "n2", Store: dir, Advertise: "127.0.0.1", Keys: keyring(t, "n2", "j")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return url, dir
}
