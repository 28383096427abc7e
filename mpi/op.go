package mpi

import "fmt"

// Op is a reduction operation. The predefined operations are commutative and associative up to
// floating-point rounding; every collective applies them in an order fixed by the communicator
// size and root, so results are bitwise reproducible from run to run and identical on all ranks.
type Op struct {
	id   uint8
	name string
}

// Predefined reduction operations.
var (
	Sum  = Op{1, "Sum"}
	Prod = Op{2, "Prod"}
	Max  = Op{3, "Max"}
	Min  = Op{4, "Min"}
)

func (op Op) String() string {
	if op.name == "" {
		return "Op(invalid)"
	}
	return op.name
}

func (op Op) valid() error {
	if op.id < 1 || op.id > 4 {
		return fmt.Errorf("%w: %v", ErrOp, op)
	}
	return nil
}

// apply computes inout[i] = in[i] op inout[i] for every i.
func apply[T Number](op Op, in, inout []T) {
	in = in[:len(inout)]
	switch op.id {
	case 1:
		for i := range inout {
			inout[i] = in[i] + inout[i]
		}
	case 2:
		for i := range inout {
			inout[i] = in[i] * inout[i]
		}
	case 3:
		for i := range inout {
			if in[i] > inout[i] {
				inout[i] = in[i]
			}
		}
	case 4:
		for i := range inout {
			if in[i] < inout[i] {
				inout[i] = in[i]
			}
		}
	}
}
