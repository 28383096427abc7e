package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// benchRanks runs body on n goroutine ranks, timing b.N iterations of it on every rank.
func benchRanks(b *testing.B, tr mpitest.Transport, n int, body func(c *mpi.Comm, iters int) error) {
	iters := b.N
	b.ResetTimer()
	mpitest.Run(b, tr, n, func(c *mpi.Comm) error { return body(c, iters) })
}

// BenchmarkPingPong measures a round trip between two goroutine ranks: the matching engine,
// request completion and (over TCP) framing and the kernel.
func BenchmarkPingPong(b *testing.B) {
	for _, tr := range []mpitest.Transport{mpitest.InProc, mpitest.TCP, mpitest.SHM} {
		for _, size := range []int{2, 8192, 1 << 17} {
			b.Run(fmt.Sprintf("%v/%dB", tr, size*8), func(b *testing.B) {
				b.SetBytes(int64(2 * size * 8))
				benchRanks(b, tr, 2, func(c *mpi.Comm, iters int) error {
					buf := make([]float64, size)
					for i := 0; i < iters; i++ {
						if c.Rank() == 0 {
							if err := mpi.Send(c, buf, 1, 0); err != nil {
								return err
							}
							if _, err := mpi.Recv(c, buf, 1, 0); err != nil {
								return err
							}
						} else {
							if _, err := mpi.Recv(c, buf, 0, 0); err != nil {
								return err
							}
							if err := mpi.Send(c, buf, 0, 0); err != nil {
								return err
							}
						}
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkMatchingDeepQueue measures matching when many unexpected messages with other tags
// are queued ahead of the one received.
func BenchmarkMatchingDeepQueue(b *testing.B) {
	benchRanks(b, mpitest.InProc, 1, func(c *mpi.Comm, iters int) error {
		one := []int{1}
		for t := 1; t <= 100; t++ {
			if err := mpi.Send(c, one, 0, t); err != nil {
				return err
			}
		}
		for i := 0; i < iters; i++ {
			if err := mpi.Send(c, one, 0, 0); err != nil {
				return err
			}
			if _, err := mpi.Recv(c, one, 0, 0); err != nil {
				return err
			}
		}
		for t := 1; t <= 100; t++ {
			if _, err := mpi.Recv(c, one, 0, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAllreduce measures a float64 Sum Allreduce on goroutine ranks over the in-process
// transport (the algorithms, matching and allocations; allocations are counted for all ranks
// together) and, for two ranks, over TCP on loopback (as bench/allreduce does between
// processes).
func BenchmarkAllreduce(b *testing.B) {
	for _, n := range []int{1, 8, 1024, 65536, 262144} {
		for _, p := range []int{2, 4, 5} {
			b.Run(fmt.Sprintf("np%d/%d", p, n), func(b *testing.B) {
				benchAllreduce(b, mpitest.InProc, p, n)
			})
		}
	}
	for _, n := range []int{8, 4096, 262144} {
		b.Run(fmt.Sprintf("tcp/np2/%d", n), func(b *testing.B) {
			benchAllreduce(b, mpitest.TCP, 2, n)
		})
	}
}

func benchAllreduce(b *testing.B, tr mpitest.Transport, p, n int) {
	b.SetBytes(int64(n * 8))
	benchRanks(b, tr, p, func(c *mpi.Comm, iters int) error {
		send, recv := make([]float64, n), make([]float64, n)
		for i := 0; i < iters; i++ {
			if err := mpi.Allreduce(c, send, recv, mpi.Sum); err != nil {
				return err
			}
		}
		return nil
	})
}

func BenchmarkBarrier(b *testing.B) {
	for _, p := range []int{2, 4, 7} {
		b.Run(fmt.Sprintf("np%d", p), func(b *testing.B) {
			benchRanks(b, mpitest.InProc, p, func(c *mpi.Comm, iters int) error {
				for i := 0; i < iters; i++ {
					if err := c.Barrier(); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

func BenchmarkBcast(b *testing.B) {
	for _, n := range []int{8, 1 << 17} {
		b.Run(fmt.Sprintf("np4/%d", n), func(b *testing.B) {
			benchRanks(b, mpitest.InProc, 4, func(c *mpi.Comm, iters int) error {
				buf := make([]float64, n)
				for i := 0; i < iters; i++ {
					if err := mpi.Bcast(c, buf, 0); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
