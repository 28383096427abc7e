package mpi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mpios/mpios/mpi"
)

// Large eager messages (32-64 KiB) whose receive is posted before they arrive: over TCP the
// payload is read straight into the receive buffer when the receive takes it whole, and the
// usual way (truncation, type mismatch) otherwise. The results must be the same either way.
func TestLargeEagerIntoPostedReceives(t *testing.T) {
	const n = 5000 // 40000 bytes of float64: eager, and above the transport's direct-read size
	forEach(t, 2, func(c *mpi.Comm) error {
		for round := 0; round < 5; round++ {
			if c.Rank() == 0 {
				if err := c.Barrier(); err != nil { // rank 1's receives are posted
					return err
				}
				for tag := 0; tag < 4; tag++ {
					if err := mpi.Send(c, seq(n, float64(round*10+tag)), 1, tag); err != nil {
						return err
					}
				}
				continue
			}
			whole := make([]float64, n+1)
			short := make([]float64, n-1)
			wrong := make([]int64, n)
			anyBuf := make([]float64, n)
			r0, err := mpi.Irecv(c, whole, 0, 0)
			if err != nil {
				return err
			}
			r1, err := mpi.Irecv(c, short, 0, 1)
			if err != nil {
				return err
			}
			r2, err := mpi.Irecv(c, wrong, 0, 2)
			if err != nil {
				return err
			}
			r3, err := mpi.Irecv(c, anyBuf, mpi.AnySource, mpi.AnyTag)
			if err != nil {
				return err
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			st, err := r0.Wait()
			if err != nil || st.Count != n || st.Source != 0 || st.Tag != 0 {
				return fmt.Errorf("round %d whole: %+v, %v", round, st, err)
			}
			if err := equal(whole[:n], seq(n, float64(round*10))); err != nil {
				return fmt.Errorf("round %d whole: %v", round, err)
			}
			var te *mpi.TruncationError
			if _, err := r1.Wait(); !errors.As(err, &te) || te.Need != n {
				return fmt.Errorf("round %d short: %v, want truncation", round, err)
			}
			if err := equal(short, seq(n-1, float64(round*10+1))); err != nil {
				return fmt.Errorf("round %d short: the part that fits: %v", round, err)
			}
			var me *mpi.TypeMismatchError
			if _, err := r2.Wait(); !errors.As(err, &me) {
				return fmt.Errorf("round %d wrong type: %v, want type mismatch", round, err)
			}
			st, err = r3.Wait()
			if err != nil || st.Tag != 3 || st.Count != n {
				return fmt.Errorf("round %d any: %+v, %v", round, st, err)
			}
			if err := equal(anyBuf, seq(n, float64(round*10+3))); err != nil {
				return fmt.Errorf("round %d any: %v", round, err)
			}
		}
		return nil
	})
}
