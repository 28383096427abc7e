// Command malleable is a small malleable SPMD program for the resize tests: a 1-D diffusion
// over a row-block-distributed array (pcm's temporary block until pcm.NewBlock is merged),
// whose result is bitwise the same for any number of ranks and any resize sequence.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "malleable:", err)
		os.Exit(1)
	}
}

func run() error {
	rows := flag.Int("rows", 64, "global rows")
	cols := flag.Int("cols", 16, "values per row")
	iters := flag.Int("iters", 400, "iterations")
	pace := flag.Duration("pace", 0, "sleep per iteration")
	dump := flag.String("dump", "", "write the final array (float64 little-endian) here")
	joinerExits := flag.Bool("joiner-exits", false, "a process joining at a resize exits with status 3 before taking its data (failure tests)")
	joinerStalls := flag.Duration("joiner-stalls", 0, "a process joining at a resize waits this long before taking its data, holding the old ranks inside the resize (failure tests)")
	flag.Parse()
	world, err := mpi.Init()
	if err != nil {
		return err
	}
	p, err := pcm.Init(world)
	if err != nil {
		return err
	}
	if *joinerExits && p.Status() == pcm.Joined {
		os.Exit(3)
	}
	if *joinerStalls > 0 && p.Status() == pcm.Joined {
		time.Sleep(*joinerStalls)
	}
	u, err := pcm.NewBlock[float64](p, "u", *rows, *cols)
	if err != nil {
		return err
	}
	iter := 0
	if err := p.Register("iter", &iter); err != nil {
		return err
	}
	if err := p.Load(); err != nil {
		return err
	}
	world = p.World()
	// The halo exchange runs on a communicator derived from the world, which a resize
	// revokes: it is re-created from the new world.
	halo, err := world.Dup()
	if err != nil {
		return err
	}
	if p.Status() == pcm.New {
		for i := range u.Local() {
			g := u.Offset()*(*cols) + i
			u.Local()[i] = math.Sin(float64(g) * 0.37)
		}
	}
	for iter < *iters {
		if err := step(halo, u, *rows, *cols); err != nil {
			return fmt.Errorf("iteration %d: %w", iter, err)
		}
		iter++
		act, err := p.Reconfigure(iter)
		if err != nil {
			return err
		}
		switch act {
		case pcm.Leave:
			if err := p.Close(); err != nil {
				return err
			}
			return mpi.Finalize()
		case pcm.Resized:
			if err := halo.Barrier(); !errors.Is(err, mpi.ErrRevoked) {
				return fmt.Errorf("a communicator of the old world after a resize: %v, want mpi.ErrRevoked", err)
			}
			world = p.World()
			if halo, err = world.Dup(); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "rank %d of %d after a resize at iteration %d\n", world.Rank(), world.Size(), iter)
		}
		if *pace > 0 {
			time.Sleep(*pace)
		}
	}
	if err := p.Close(); err != nil {
		return err
	}
	if *dump != "" {
		if err := gather(world, u, *rows, *cols, *dump); err != nil {
			return err
		}
	}
	return mpi.Finalize()
}

// step is one diffusion step across the rows: each value becomes the mean of itself and the
// same column in the rows above and below (the first and last global rows are fixed). Every
// rank holds at least one row (rows >= ranks).
func step(c *mpi.Comm, u *pcm.Block[float64], rows, cols int) error {
	loc := u.Local()
	n := len(loc) / cols
	if n == 0 {
		return fmt.Errorf("rank %d holds no row", c.Rank())
	}
	up, down := c.Rank()-1, c.Rank()+1
	if up < 0 {
		up = mpi.ProcNull
	}
	if down >= c.Size() {
		down = mpi.ProcNull
	}
	above, below := make([]float64, cols), make([]float64, cols)
	if _, err := mpi.Sendrecv(c, loc[:cols], up, 2, below, down, 2); err != nil {
		return err
	}
	if _, err := mpi.Sendrecv(c, loc[(n-1)*cols:], down, 3, above, up, 3); err != nil {
		return err
	}
	next := make([]float64, len(loc))
	for i := range n {
		g := u.Offset() + i
		prev, after := above, below
		if i > 0 {
			prev = loc[(i-1)*cols : i*cols]
		}
		if i < n-1 {
			after = loc[(i+1)*cols : (i+2)*cols]
		}
		for j := range cols {
			v := loc[i*cols+j]
			if g > 0 && g < rows-1 {
				v = (prev[j] + v + after[j]) / 3
			}
			next[i*cols+j] = v
		}
	}
	copy(loc, next)
	return nil
}

// gather writes the whole array, collected on rank 0.
func gather(c *mpi.Comm, u *pcm.Block[float64], rows, cols int, path string) error {
	loc := u.Local()
	if c.Rank() != 0 {
		if err := mpi.Send(c, []int64{int64(u.Offset()), int64(len(loc))}, 0, 8); err != nil {
			return err
		}
		return mpi.Send(c, loc, 0, 9)
	}
	all := make([]float64, rows*cols)
	copy(all[u.Offset()*cols:], loc)
	for r := 1; r < c.Size(); r++ {
		hdr := make([]int64, 2)
		if _, err := mpi.Recv(c, hdr, r, 8); err != nil {
			return err
		}
		if _, err := mpi.Recv(c, all[hdr[0]*int64(cols):hdr[0]*int64(cols)+hdr[1]], r, 9); err != nil {
			return err
		}
	}
	buf := make([]byte, 0, 8*len(all))
	for _, v := range all {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
	}
	return os.WriteFile(path, buf, 0o644)
}
