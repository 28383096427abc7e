package mpi

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"
)

// Structured element types, the Go counterpart of MPI's derived datatypes. A slice of
// fixed-size values (structs of numbers, bools and arrays, nested) travels as its memory, with
// no per-element encoding: StructBytes views it as bytes that every call taking []byte sends,
// receives, broadcasts or gathers. Padding between fields travels as it is; both sides use
// the same type, compiled for the same architecture (the job's program), so the layout agrees.
// A Vector picks strided elements out of a slice (a column of a row-major matrix) and packs
// them contiguously, as MPI_Type_vector does.

// ErrStructType reports an element type that cannot travel as memory (see *StructTypeError).
var ErrStructType = errors.New("mpi: element type holds references")

// StructTypeError names the field of an element type that cannot travel as memory: a pointer,
// slice, string, map, channel, function, interface or uintptr, whose bytes would mean nothing
// in another process.
type StructTypeError struct {
	Type  string // the element type
	Field string // the path to the offending field ("" for the type itself)
	Kind  string // what it is
}

func (e *StructTypeError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("mpi: element type %s is a %s: it cannot be sent as memory", e.Type, e.Kind)
	}
	return fmt.Sprintf("mpi: element type %s: field %s is a %s: it cannot be sent as memory", e.Type, e.Field, e.Kind)
}

// Is makes errors.Is(err, ErrStructType) true.
func (e *StructTypeError) Is(target error) bool { return target == ErrStructType }

// checkedTypes caches the validation of each element type: nil or its *StructTypeError.
var checkedTypes sync.Map // reflect.Type -> error

// CheckStruct reports whether T can travel as memory: nil, or a *StructTypeError naming the
// first field that cannot. The answer is computed once per type.
func CheckStruct[T any]() error {
	typ := reflect.TypeFor[T]()
	if v, ok := checkedTypes.Load(typ); ok {
		err, _ := v.(error)
		return err
	}
	var err error
	if typ.Size() == 0 {
		err = &StructTypeError{Type: typ.String(), Kind: "zero-size type"}
	} else if field, kind := flatField(typ, ""); kind != "" {
		err = &StructTypeError{Type: typ.String(), Field: field, Kind: kind}
	}
	checkedTypes.Store(typ, err)
	return err
}

// flatField returns the path and kind of the first part of t that is not plain memory, or
// kind "" if there is none.
func flatField(t reflect.Type, path string) (string, string) {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return "", ""
	case reflect.Array:
		return flatField(t.Elem(), path+"[]")
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			if fp, kind := flatField(f.Type, p); kind != "" {
				return fp, kind
			}
		}
		return "", ""
	case reflect.Uintptr:
		return path, "uintptr"
	case reflect.Pointer, reflect.UnsafePointer:
		return path, "pointer"
	}
	return path, t.Kind().String()
}

// StructBytes returns the memory of s as bytes, without copying, for any call that takes a
// []byte buffer (MPI's derived datatypes): Send, Recv, Isend, Irecv, Bcast, Gather, Allgather,
// Alltoall and the others. The element type is validated at first use; a type with pointers,
// slices, strings or other references fails with a *StructTypeError. The receiving side views
// its buffer the same way; StructCount turns its Status.Count (bytes) into elements.
//
//	type particle struct{ X, Y, Z, Mass float64; ID int32 }
//	b, err := mpi.StructBytes(particles)
//	err = mpi.Send(c, b, dest, tag)
func StructBytes[T any](s []T) ([]byte, error) {
	if err := CheckStruct[T](); err != nil {
		return nil, err
	}
	if len(s) == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0]))), nil
}

// StructCount returns the number of T elements in nbytes bytes (a Status.Count of a receive
// into StructBytes), and an error wrapping ErrCount if they are not a whole number of them.
func StructCount[T any](nbytes int) (int, error) {
	var z T
	size := int(unsafe.Sizeof(z))
	if size == 0 || nbytes%size != 0 {
		return 0, fmt.Errorf("mpi: StructCount: %w: %d bytes are not whole %T elements of %d bytes", ErrCount, nbytes, z, size)
	}
	return nbytes / size, nil
}

// Vector describes Count blocks of BlockLen consecutive elements whose starts are Stride
// elements apart (MPI_Type_vector). Column j of a row-major matrix of r rows and w columns is
// Vector{Count: r, BlockLen: 1, Stride: w} over m[j:].
type Vector struct {
	Count, BlockLen, Stride int
}

// Column is the vector of one column of a row-major matrix with the given number of rows and
// row length (apply it to the matrix sliced at the column's index).
func Column(rows, rowLen int) Vector { return Vector{Count: rows, BlockLen: 1, Stride: rowLen} }

// Len returns the number of elements v selects.
func (v Vector) Len() int { return v.Count * v.BlockLen }

// Extent returns the length a slice must have for v to fit in it.
func (v Vector) Extent() int {
	if v.Count == 0 {
		return 0
	}
	return (v.Count-1)*v.Stride + v.BlockLen
}

func (v Vector) check(op string, strided, packed int) error {
	if v.Count < 0 || v.BlockLen < 0 || (v.Count > 1 && v.Stride < v.BlockLen) {
		return fmt.Errorf("mpi: %s: %w: vector %+v (blocks overlap or lengths are negative)", op, ErrCount, v)
	}
	if strided < v.Extent() || packed < v.Len() {
		return fmt.Errorf("mpi: %s: %w: vector %+v needs %d strided and %d packed elements, have %d and %d",
			op, ErrCount, v, v.Extent(), v.Len(), strided, packed)
	}
	return nil
}

// Pack copies the elements of src that v selects into dst, contiguously (MPI_Pack of a vector
// type), and returns dst[:v.Len()].
func Pack[T any](dst, src []T, v Vector) ([]T, error) {
	if err := v.check("Pack", len(src), len(dst)); err != nil {
		return nil, err
	}
	for i := 0; i < v.Count; i++ {
		copy(dst[i*v.BlockLen:(i+1)*v.BlockLen], src[i*v.Stride:i*v.Stride+v.BlockLen])
	}
	return dst[:v.Len()], nil
}

// Unpack copies packed, contiguous elements into the places of dst that v selects
// (MPI_Unpack of a vector type).
func Unpack[T any](dst, packed []T, v Vector) error {
	if err := v.check("Unpack", len(dst), len(packed)); err != nil {
		return err
	}
	for i := 0; i < v.Count; i++ {
		copy(dst[i*v.Stride:i*v.Stride+v.BlockLen], packed[i*v.BlockLen:(i+1)*v.BlockLen])
	}
	return nil
}
