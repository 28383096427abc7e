package mpi

import (
	"fmt"
	"reflect"
	"unsafe"
)

// Op is a reduction operation: one of the predefined ones below, or a user-defined one made
// with NewOp. The zero Op is invalid (ErrOp).
//
// Every collective applies an operation in an order fixed by the communicator size and root,
// so results are bitwise reproducible from run to run and identical on all ranks. The
// predefined operations are commutative (and associative up to floating-point rounding); a
// non-commutative user-defined operation is applied in rank order.
type Op struct {
	id   uint8
	name string
	user *userOp // opUser only; a pointer keeps Op comparable
}

// Operation ids; the kernel of each is in combine.
const (
	opSum uint8 = iota + 1
	opProd
	opMax
	opMin
	opLAnd
	opLOr
	opLXor
	opBAnd
	opBOr
	opBXor
	opMaxLoc
	opMinLoc
	opUser
)

// Predefined reduction operations (MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR,
// MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC).
var (
	Sum  = Op{id: opSum, name: "Sum"}
	Prod = Op{id: opProd, name: "Prod"}
	Max  = Op{id: opMax, name: "Max"}
	Min  = Op{id: opMin, name: "Min"}
	// LAnd, LOr and LXor are logical: an element is true when it is not zero, and the result
	// is 1 or 0.
	LAnd = Op{id: opLAnd, name: "LAnd"}
	LOr  = Op{id: opLOr, name: "LOr"}
	LXor = Op{id: opLXor, name: "LXor"}
	// BAnd, BOr and BXor are bitwise; they take integer elements only (ErrOp for floats).
	BAnd = Op{id: opBAnd, name: "BAnd"}
	BOr  = Op{id: opBOr, name: "BOr"}
	BXor = Op{id: opBXor, name: "BXor"}
	// MaxLoc and MinLoc reduce (value, index) pairs stored one after the other in the slice
	// (element 2k is a value, 2k+1 its index, as MPI's MPI_2INT and MPI_2DOUBLE_PRECISION
	// types): the result is the largest (smallest) value and, among equal values, the smallest
	// index. The slices must have an even length (ErrCount).
	MaxLoc = Op{id: opMaxLoc, name: "MaxLoc"}
	MinLoc = Op{id: opMinLoc, name: "MinLoc"}
)

// userOp is the function of a user-defined operation.
type userOp struct {
	fn      any // func(in, inout []T) for the element type the Op was made for
	elem    reflect.Type
	commute bool
}

// NewOp returns a user-defined reduction operation on elements of type T (MPI_Op_create).
// fn must set inout[i] = in[i] ∘ inout[i] for every i, where in holds the contribution of
// lower ranks; ∘ must be associative. A commutative operation may be applied in any fixed
// order; a non-commutative one is applied in rank order, so that a reduction over ranks
// 0..P-1 computes x0 ∘ x1 ∘ ... ∘ x(P-1). Using the Op with another element type fails with
// ErrOp. fn must not keep the slices or call mpi.
func NewOp[T Number](name string, commutative bool, fn func(in, inout []T)) Op {
	if fn == nil {
		return Op{name: name}
	}
	return Op{id: opUser, name: name, user: &userOp{fn: fn, elem: reflect.TypeFor[T](), commute: commutative}}
}

func (op Op) String() string {
	if op.name == "" {
		return "Op(invalid)"
	}
	return op.name
}

// commutative reports whether op may be applied in an order other than rank order.
func (op Op) commutative() bool { return op.user == nil || op.user.commute }

// elementwise reports whether element i of the result depends on element i of the inputs
// only, so that vectors may be cut anywhere (the ring algorithms) and reduced in any order.
func (op Op) elementwise() bool { return op.id >= opSum && op.id <= opBXor }

// validFor checks that op is defined and applies to n elements of type T.
func validFor[T Number](op Op, n int) error {
	switch {
	case op.id >= opSum && op.id <= opLXor:
		return nil
	case op.id >= opBAnd && op.id <= opBXor:
		if k := reflect.TypeFor[T]().Kind(); k == reflect.Float32 || k == reflect.Float64 {
			return fmt.Errorf("%w: %v is bitwise and takes integers, not %v", ErrOp, op, reflect.TypeFor[T]())
		}
		return nil
	case op.id == opMaxLoc || op.id == opMinLoc:
		if n%2 != 0 {
			return fmt.Errorf("%w: %v takes (value, index) pairs, got %d elements", ErrCount, op, n)
		}
		return nil
	case op.id == opUser:
		if _, ok := op.user.fn.(func(in, inout []T)); !ok {
			return fmt.Errorf("%w: %v is defined for %v, used with %v", ErrOp, op, op.user.elem, reflect.TypeFor[T]())
		}
		return nil
	}
	return fmt.Errorf("%w: %v", ErrOp, op)
}

// apply computes inout[i] = in[i] ∘ inout[i] for every i, where in holds the contribution of
// lower ranks when op is not commutative.
func apply[T Number](op Op, in, inout []T) {
	if op.user != nil {
		op.user.fn.(func(in, inout []T))(in[:len(inout)], inout)
		return
	}
	combine(op, in, inout, inout)
}

// applyAfter computes inout[i] = inout[i] ∘ in[i], where in holds the contribution of higher
// ranks when op is not commutative. in may be overwritten.
func applyAfter[T Number](op Op, in, inout []T) {
	if op.commutative() {
		apply(op, in, inout)
		return
	}
	in = in[:len(inout)]
	op.user.fn.(func(in, inout []T))(inout, in)
	copy(inout, in)
}

// reduceLocal computes acc[i] = acc[i] ∘ local[i], where acc holds a partial result received
// from another rank and local is this rank's contribution: the same operands in the same order
// as apply(op, received, local), so both give the same bits. op is elementwise.
func reduceLocal[T Number](op Op, acc, local []T) {
	combine(op, acc, local[:len(acc)], acc)
}

// combine is the kernel table of the predefined operations: out[i] = a[i] ∘ b[i] for every i,
// where out is a or b (each element is read before it is written).
func combine[T Number](op Op, a, b, out []T) {
	a, b = a[:len(out)], b[:len(out)]
	switch op.id {
	case opSum:
		// Eight elements per iteration: independent operations the CPU overlaps, and an eighth
		// of the loop overhead. Each element's operation is the same as in the plain loop.
		n := len(out) &^ 7
		for i := 0; i < n; i += 8 {
			x, y, o := a[i:i+8:i+8], b[i:i+8:i+8], out[i:i+8:i+8]
			o[0], o[1], o[2], o[3] = x[0]+y[0], x[1]+y[1], x[2]+y[2], x[3]+y[3]
			o[4], o[5], o[6], o[7] = x[4]+y[4], x[5]+y[5], x[6]+y[6], x[7]+y[7]
		}
		for i := n; i < len(out); i++ {
			out[i] = a[i] + b[i]
		}
	case opProd:
		n := len(out) &^ 7
		for i := 0; i < n; i += 8 {
			x, y, o := a[i:i+8:i+8], b[i:i+8:i+8], out[i:i+8:i+8]
			o[0], o[1], o[2], o[3] = x[0]*y[0], x[1]*y[1], x[2]*y[2], x[3]*y[3]
			o[4], o[5], o[6], o[7] = x[4]*y[4], x[5]*y[5], x[6]*y[6], x[7]*y[7]
		}
		for i := n; i < len(out); i++ {
			out[i] = a[i] * b[i]
		}
	case opMax:
		for i := range out {
			if a[i] > b[i] {
				out[i] = a[i]
			} else {
				out[i] = b[i]
			}
		}
	case opMin:
		for i := range out {
			if a[i] < b[i] {
				out[i] = a[i]
			} else {
				out[i] = b[i]
			}
		}
	case opLAnd:
		for i := range out {
			out[i] = truth[T](a[i] != 0 && b[i] != 0)
		}
	case opLOr:
		for i := range out {
			out[i] = truth[T](a[i] != 0 || b[i] != 0)
		}
	case opLXor:
		for i := range out {
			out[i] = truth[T]((a[i] != 0) != (b[i] != 0))
		}
	case opBAnd, opBOr, opBXor:
		switch sizeOf[T]() {
		case 1:
			bitwise(op.id, reinterpret[uint8](a), reinterpret[uint8](b), reinterpret[uint8](out))
		case 2:
			bitwise(op.id, reinterpret[uint16](a), reinterpret[uint16](b), reinterpret[uint16](out))
		case 4:
			bitwise(op.id, reinterpret[uint32](a), reinterpret[uint32](b), reinterpret[uint32](out))
		default:
			bitwise(op.id, reinterpret[uint64](a), reinterpret[uint64](b), reinterpret[uint64](out))
		}
	case opMaxLoc, opMinLoc:
		for i := 0; i+1 < len(out); i += 2 {
			va, ia, vb, ib := a[i], a[i+1], b[i], b[i+1]
			first := va > vb
			if op.id == opMinLoc {
				first = va < vb
			}
			switch {
			case first:
				out[i], out[i+1] = va, ia
			case va == vb:
				out[i], out[i+1] = va, min(ia, ib)
			default:
				out[i], out[i+1] = vb, ib
			}
		}
	}
}

func truth[T Number](b bool) T {
	if b {
		return 1
	}
	return 0
}

// bitwise is the kernel of BAnd, BOr and BXor on unsigned words of the elements' size (the
// bits are the same whatever the signedness).
func bitwise[U uint8 | uint16 | uint32 | uint64](id uint8, a, b, out []U) {
	switch id {
	case opBAnd:
		for i := range out {
			out[i] = a[i] & b[i]
		}
	case opBOr:
		for i := range out {
			out[i] = a[i] | b[i]
		}
	default:
		for i := range out {
			out[i] = a[i] ^ b[i]
		}
	}
}

// reinterpret views s as a slice of U, which has the size of T.
func reinterpret[U, T any](s []T) []U {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*U)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
