package pieceserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// BenchmarkCopyCPU is the CPU time (getrusage: user and system, every thread of the process,
// the in-process NATS server included) of one buddy copy into a memory store as pcm makes it
// (pcm's copyToBuddy): the signed request over NATS, the one-time offer, the connection with
// its proof, the sparse stream, the node's verification and write, its acknowledgement; then
// the commit and prune that let the next copy reuse the piece's file. The pieces are 8 MiB,
// as heat2d N=2048 at P=4 (its first rows non-zero: 0 is a rank the heat has not reached;
// all but the first block non-zero is a dense state, as heat2d -init 1 has).
func BenchmarkCopyCPU(b *testing.B) {
	const size = 8 << 20
	for _, nice := range []int{0, 10} {
		for _, hot := range []int{0, 150 * 2050 * 8, size - 4096} {
			b.Run(fmt.Sprintf("nice-%d/nonzero-%dKiB", nice, hot>>10), func(b *testing.B) {
				dir, err := os.MkdirTemp("/dev/shm", "pieceserver-bench-")
				if err != nil {
					b.Skipf("no /dev/shm: %v", err)
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
				url := testbin.NATSServer(b, "", "")
				srv, err := Start(testbin.Connect(b, url), Config{Node: "n2", Store: dir, Advertise: "127.0.0.1", CopyNice: nice, Keys: keyring(b, "n2", "j")})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(srv.Stop)
				owner, err := ckptstore.Open(b.TempDir(), &ckptstore.Options{Node: "n1", Checksum: ckptstore.CRC32C})
				if err != nil {
					b.Fatal(err)
				}
				buddy, err := ckptstore.Open(dir, &ckptstore.Options{Node: "n2", Checksum: ckptstore.CRC32C, CommitSizeOnly: true})
				if err != nil {
					b.Fatal(err)
				}
				data := make([]byte, size)
				for i := range 4096 + hot {
					data[i] = byte(i%251) + 1
				}
				var pb ckptstore.PieceBuffer
				pb.Write(data)
				nc := testbin.Connect(b, url)
				as := channel(b, "j", 0)
				seq := uint64(0)
				var cpu time.Duration
				for b.Loop() {
					seq++
					want, err := owner.PutPieceBuffer("j", seq, 0, &pb)
					if err != nil {
						b.Fatal(err)
					}
					t := testbin.CPUTime()
					subject := job.PieceCopySubject("n2", "j")
					req, _ := as.Encode(subject, job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: seq, Rank: 0}, Size: want.Size, Checksum: want.Checksum, Sparse: true}, time.Now())
					msg, err := nc.Request(subject, req, 5*time.Second)
					if err != nil {
						b.Fatal(err)
					}
					var rep job.PieceReply
					if _, err := as.Decode(msg.Subject, msg.Data, &rep, time.Now()); err != nil || rep.Error != "" {
						b.Fatal(err, rep.Error)
					}
					c, err := net.Dial("tcp", rep.Addr)
					if err != nil {
						b.Fatal(err)
					}
					w := bufio.NewWriterSize(c, 64<<10)
					w.Write(as.OfferProof(rep.Token))
					pb.WriteSparseTo(w)
					w.Flush()
					line, _ := bufio.NewReader(c).ReadString('\n')
					c.Close()
					cpu += testbin.CPUTime() - t
					if strings.TrimSpace(line) != "ok" {
						b.Fatalf("copy: %q", line)
					}
					want.Node = "n2"
					m := ckptstore.Manifest{Job: "j", Seq: seq, Size: 1, Pieces: []ckptstore.PieceInfo{want}}
					if err := buddy.CommitManifest(m); err != nil {
						b.Fatal(err)
					}
					if err := buddy.Prune("j", 2); err != nil {
						b.Fatal(err)
					}
					m.Pieces[0].Node = "n1"
					if err := owner.CommitManifest(m); err != nil {
						b.Fatal(err)
					}
					if err := owner.Prune("j", 2); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/copy")
			})
		}
	}
}
