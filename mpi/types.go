package mpi

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// Elem is the set of element types that travel as raw little-endian bytes, with no
// per-element encoding. Named types (type Celsius float64) match their underlying type.
type Elem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uint |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Number is the set of element types that reductions accept.
type Number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uint |
		~float32 | ~float64
}

// Wildcards and the null process.
const (
	// AnySource matches a message from any rank of the communicator (receives and probes only).
	AnySource = -1
	// AnyTag matches a message with any tag (receives and probes only).
	AnyTag = -1
	// ProcNull is a rank that does not exist: sends to it and receives from it complete at once
	// (a receive with Status{Source: ProcNull, Tag: AnyTag, Count: 0}). It lets boundary ranks
	// of a decomposition run the same code as interior ranks.
	ProcNull = -2
	// MaxTag is the largest tag an application may use.
	MaxTag = 1<<30 - 1
	// Undefined as the color of Split leaves the calling rank out of every new communicator.
	Undefined = -32766
)

// Status describes a received (or probed) message.
type Status struct {
	Source int // rank of the sender in the communicator
	Tag    int
	Count  int // elements received (or, for a probe, elements in the message)
	// Cancelled is set for a receive withdrawn by Request.Cancel (MPI_Test_cancelled).
	Cancelled bool
}

// Element type codes on the wire. The order is part of the protocol.
const (
	elemRaw uint8 = iota
	elemInt8
	elemInt16
	elemInt32
	elemInt64
	elemInt
	elemUint8
	elemUint16
	elemUint32
	elemUint64
	elemUint
	elemFloat32
	elemFloat64
	elemComplex64
	elemComplex128
	elemValue // a msgpack-encoded Go value (SendValue)
)

var elemNames = [...]string{"bytes", "int8", "int16", "int32", "int64", "int", "uint8", "uint16",
	"uint32", "uint64", "uint", "float32", "float64", "complex64", "complex128", "value"}

func elemName(code uint8) string {
	switch {
	case int(code) < len(elemNames):
		return elemNames[code]
	case code == elemAgree:
		return "length agreement of a large Allreduce"
	case code == elemAbort:
		return "abort"
	}
	return fmt.Sprintf("elem(%d)", code)
}

// elemCode returns the wire code of T (by its underlying kind).
func elemCode[T Elem]() uint8 {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return elemInt8
	case reflect.Int16:
		return elemInt16
	case reflect.Int32:
		return elemInt32
	case reflect.Int64:
		return elemInt64
	case reflect.Int:
		return elemInt
	case reflect.Uint8:
		return elemUint8
	case reflect.Uint16:
		return elemUint16
	case reflect.Uint32:
		return elemUint32
	case reflect.Uint64:
		return elemUint64
	case reflect.Uint:
		return elemUint
	case reflect.Float32:
		return elemFloat32
	case reflect.Float64:
		return elemFloat64
	case reflect.Complex64:
		return elemComplex64
	default:
		return elemComplex128
	}
}

// asBytes views a slice's backing array as bytes, without copying.
func asBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

func sizeOf[T Elem]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// Errors. Callers branch with errors.Is (sentinels) or errors.As (typed errors).
var (
	// ErrNotInitialized: a call before Init.
	ErrNotInitialized = errors.New("mpi: not initialized")
	// ErrInitialized: Init called twice.
	ErrInitialized = errors.New("mpi: already initialized")
	// ErrFinalized: a call after Finalize.
	// ErrMigrated reports a call in a process that handed its rank to a successor
	// (pcm.Reconfigure returned pcm.Leave).
	ErrMigrated  = errors.New("mpi: this process handed its rank to a successor")
	ErrFinalized = errors.New("mpi: finalized")
	// ErrRank: a rank outside the communicator.
	ErrRank = errors.New("mpi: invalid rank")
	// ErrTag: a tag outside [0, MaxTag] (or AnyTag where a tag must be given).
	ErrTag = errors.New("mpi: invalid tag")
	// ErrCount: buffers whose lengths do not fit the operation.
	ErrCount = errors.New("mpi: invalid count")
	// ErrComm: a nil or freed communicator.
	ErrComm = errors.New("mpi: invalid communicator")
	// ErrOp: a reduction operation that is not defined.
	ErrOp = errors.New("mpi: invalid operation")
	// ErrTruncate: the message was longer than the receive buffer (see *TruncationError).
	ErrTruncate = errors.New("mpi: message truncated")
	// ErrTypeMismatch: sender and receiver disagree on the element type (see *TypeMismatchError).
	ErrTypeMismatch = errors.New("mpi: element type mismatch")
	// ErrProcFailed: a rank of the job failed (see *ProcFailedError).
	ErrProcFailed = errors.New("mpi: process failed")
	// ErrPeerFinalized: a receive names a rank that has already finalized.
	ErrPeerFinalized = errors.New("mpi: peer finalized")
	// ErrPending: an operation that needs quiescence found nonblocking operations pending.
	ErrPending = errors.New("mpi: nonblocking operations pending")
)

// TruncationError reports a message longer than the receive buffer. The message is consumed;
// the buffer holds its first elements.
type TruncationError struct {
	Source, Tag int
	Have, Need  int // elements: buffer length and message length
}

func (e *TruncationError) Error() string {
	return fmt.Sprintf("mpi: message from rank %d tag %d truncated: %d elements do not fit a buffer of %d", e.Source, e.Tag, e.Need, e.Have)
}

// Is makes errors.Is(err, ErrTruncate) true.
func (e *TruncationError) Is(target error) bool { return target == ErrTruncate }

// TypeMismatchError reports a message whose element type differs from the receive buffer's.
// The message is consumed and the buffer untouched.
type TypeMismatchError struct {
	Source, Tag int
	Sent, Want  string
}

func (e *TypeMismatchError) Error() string {
	return fmt.Sprintf("mpi: message from rank %d tag %d holds %s, receive buffer is %s", e.Source, e.Tag, e.Sent, e.Want)
}

// Is makes errors.Is(err, ErrTypeMismatch) true.
func (e *TypeMismatchError) Is(target error) bool { return target == ErrTypeMismatch }

// ProcFailedError reports that a rank of the job failed (died, was killed, or its connection
// broke). Rank is the world rank of the failed process.
type ProcFailedError struct {
	Rank   int
	Reason string
}

func (e *ProcFailedError) Error() string {
	return fmt.Sprintf("mpi: rank %d failed: %s", e.Rank, e.Reason)
}

// Is makes errors.Is(err, ErrProcFailed) true.
func (e *ProcFailedError) Is(target error) bool { return target == ErrProcFailed }
