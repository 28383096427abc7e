package ckptstore_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

// BenchmarkCheckpointCPU is the CPU time (user and system, of every thread of the process,
// from getrusage) of the data path of one replicated checkpoint in memory stores, as heat2d
// N=2048 takes it at P=4 on two pcmd nodes (pcmd serve --ckpt-store mem): four ranks of
// 8 MiB each, ranks 0 and 1 on n1 and 2 and 3 on n2; only rank 0 holds the heat front (its
// first hot rows non-zero), the others are all zeros. Per checkpoint: every rank's snapshot
// (pcm's startCheckpoint), its capacity check and write into its node's store, its sparse
// copy over a TCP connection on loopback to the other node's store (capacity check,
// PutSparseCopy, acknowledgement; the connection is made per copy, as pcmd's one-time
// offers are), and the commit and prune (keep 2) of the manifest in both stores. The
// machine may be shared, so the figure is CPU time, not wall time: cpu-ms/ckpt. Each step is
// also a sub-benchmark of its own (the other steps run outside the count). Not measured here:
// NATS requests and the collectives, which move no piece data.
func BenchmarkCheckpointCPU(b *testing.B) {
	const rows, cols, capacity = 512, 2050, 4 << 30
	for _, hot := range []int{0, 50, 150, rows} {
		c := newCkptCluster(b, rows, cols, hot, capacity)
		steps := []struct {
			name string
			run  func(b *testing.B)
		}{{"snapshot", c.snapshot}, {"put", c.put}, {"copy", c.copyAll}, {"commit-prune", c.commitPrune}}
		name := fmt.Sprintf("rows-%d-of-%d-nonzero", hot, rows)
		b.Run(name+"/all", func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				c.seq++
				t := testbin.CPUTime()
				for _, s := range steps {
					s.run(b)
				}
				cpu += testbin.CPUTime() - t
			}
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/ckpt")
		})
		for k, step := range steps {
			b.Run(name+"/"+step.name, func(b *testing.B) {
				var cpu time.Duration
				for b.Loop() {
					c.seq++
					for _, before := range steps[:k] {
						before.run(b)
					}
					t := testbin.CPUTime()
					step.run(b)
					cpu += testbin.CPUTime() - t
					for _, after := range steps[k+1:] {
						after.run(b)
					}
				}
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/ckpt")
			})
		}
	}
}

// ckptCluster is BenchmarkCheckpointCPU's two nodes and four ranks.
type ckptCluster struct {
	capacity int64
	seq      uint64
	regs     []*state.Registry
	snaps    []ckptstore.PieceBuffer
	stores   []*ckptstore.Store // each rank's own Store of its node's directory
	dirs     [2]string          // n1's and n2's store
	infos    []ckptstore.PieceInfo
	ln       net.Listener
}

func newCkptCluster(b *testing.B, rows, cols, hot int, capacity int64) *ckptCluster {
	c := &ckptCluster{capacity: capacity, snaps: make([]ckptstore.PieceBuffer, 4), infos: make([]ckptstore.PieceInfo, 4)}
	for n := range c.dirs {
		c.dirs[n] = memStore(b, &ckptstore.Options{Node: nodeName(n)}).Dir()
	}
	for r := range 4 {
		h := 0
		if r == 0 {
			h = hot
		}
		c.regs = append(c.regs, heatFront(b, rows, cols, h))
		c.snaps[r].Grow(int(c.regs[r].Size()) + 4096)
		s, err := ckptstore.Open(c.dirs[r/2], &ckptstore.Options{Node: nodeName(r / 2), Checksum: ckptstore.CRC32C, CommitSizeOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		c.stores = append(c.stores, s)
	}
	var err error
	if c.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		b.Skipf("no loopback: %v", err)
	}
	b.Cleanup(func() { c.ln.Close() })
	return c
}

func nodeName(n int) string { return fmt.Sprintf("n%d", n+1) }

func (c *ckptCluster) snapshot(b *testing.B) {
	for r := range c.regs {
		c.snaps[r].Reset()
		if _, err := c.regs[r].WriteTo(&c.snaps[r]); err != nil {
			b.Fatal(err)
		}
	}
}

func (c *ckptCluster) put(b *testing.B) {
	for r, s := range c.stores {
		err := s.Reserve(int64(c.snaps[r].Len()), c.capacity)
		if err == nil {
			c.infos[r], err = s.PutPieceBuffer("bench", c.seq, r, &c.snaps[r])
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// copyAll copies every rank's piece to the other node, one connection each, the sender
// as pcm's copyToBuddy and the receiver as pcmd's piece server.
func (c *ckptCluster) copyAll(b *testing.B) {
	for r := range c.stores {
		buddy := 1 - r/2
		want := c.infos[r]
		want.Node = nodeName(buddy)
		done := make(chan error, 1)
		go func() {
			conn, err := c.ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer conn.Close()
			s, err := ckptstore.Open(c.dirs[buddy], &ckptstore.Options{Node: nodeName(buddy)})
			if err == nil {
				err = s.Reserve(want.Size, c.capacity)
			}
			if err == nil {
				err = s.PutSparseCopy("bench", c.seq, want, conn)
			}
			answer := "ok\n"
			if err != nil {
				answer = err.Error() + "\n"
			}
			io.WriteString(conn, answer)
			done <- err
		}()
		conn, err := net.Dial("tcp", c.ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(conn, 64<<10)
		if _, err := c.snaps[r].WriteSparseTo(w); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if strings.TrimSpace(line) != "ok" || err != nil {
			b.Fatalf("copy of rank %d: %q, %v", r, line, err)
		}
		c.infos[r].Copies = []string{nodeName(buddy)}
	}
}

func (c *ckptCluster) commitPrune(b *testing.B) {
	m := ckptstore.Manifest{Job: "bench", Seq: c.seq, Size: 4, Pieces: c.infos}
	for _, leader := range []int{0, 2} {
		if err := c.stores[leader].CommitManifest(m); err != nil {
			b.Fatal(err)
		}
		if err := c.stores[leader].Prune("bench", 2); err != nil {
			b.Fatal(err)
		}
	}
}
