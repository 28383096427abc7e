package state

import (
	"fmt"
	"reflect"
	"unsafe"
)

// MaxNameLen is the longest registration name.
const MaxNameLen = 128

// Kind is the element code of a raw entry, as recorded in the stream.
type Kind uint8

// Element codes of raw entries. The values are part of the stream format.
const (
	KindInvalid Kind = iota
	KindInt8
	KindInt16
	KindInt32
	KindInt64
	KindInt // platform int; the stream records its size, 4 or 8
	KindUint8
	KindUint16
	KindUint32
	KindUint64
	KindUint // platform uint; the stream records its size, 4 or 8
	KindFloat32
	KindFloat64
	KindComplex64
	KindComplex128
)

var kindNames = [...]string{"invalid", "int8", "int16", "int32", "int64", "int", "uint8",
	"uint16", "uint32", "uint64", "uint", "float32", "float64", "complex64", "complex128"}

// String returns the Go name of the element type, e.g. "float64".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// rawKind maps a reflect.Kind to its raw element code, or KindInvalid if values of that kind
// are not written raw.
func rawKind(k reflect.Kind) Kind {
	switch k {
	case reflect.Int8:
		return KindInt8
	case reflect.Int16:
		return KindInt16
	case reflect.Int32:
		return KindInt32
	case reflect.Int64:
		return KindInt64
	case reflect.Int:
		return KindInt
	case reflect.Uint8:
		return KindUint8
	case reflect.Uint16:
		return KindUint16
	case reflect.Uint32:
		return KindUint32
	case reflect.Uint64:
		return KindUint64
	case reflect.Uint:
		return KindUint
	case reflect.Float32:
		return KindFloat32
	case reflect.Float64:
		return KindFloat64
	case reflect.Complex64:
		return KindComplex64
	case reflect.Complex128:
		return KindComplex128
	}
	return KindInvalid
}

// swapUnit is the size of the units whose bytes must be reversed to convert between host and
// little-endian order: complex numbers are pairs of floats.
func (k Kind) swapUnit(elemSize int) int {
	if k == KindComplex64 || k == KindComplex128 {
		return elemSize / 2
	}
	return elemSize
}

type encoding uint8

const (
	encRaw     encoding = 1
	encMsgpack encoding = 2
)

// Entry flag bits.
const (
	flagSlice = 1 << 0
	flagNil   = 1 << 1
)

type entry struct {
	name     string
	ptr      reflect.Value // the registered pointer
	typ      reflect.Type  // the pointee's type
	enc      encoding
	kind     Kind // raw only
	slice    bool // raw only: pointee is a slice (else a scalar)
	elemSize int  // raw only
}

// Registry is the set of named values that make up a rank's state. The zero value is ready to
// use. A Registry is not safe for concurrent use; the PCM library drives it from the rank's
// main goroutine at iteration boundaries.
type Registry struct {
	entries []*entry
	byName  map[string]*entry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Register adds the value ptr points to under name. ptr must be a non-nil pointer; the value
// is read by WriteTo and replaced by ReadFrom, so ptr must stay valid for the registry's
// lifetime. Names are 1 to MaxNameLen characters from [A-Za-z0-9_.-] and must be unique.
//
// Pointers to slices or scalars of fixed-size numeric kinds are written raw; any other value
// is encoded with msgpack (exported struct fields only). Functions, channels and
// unsafe.Pointer values cannot be registered.
func (r *Registry) Register(name string, ptr any) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("state: register %q: %w", name, err)
	}
	if _, dup := r.byName[name]; dup {
		return fmt.Errorf("state: register %q: %w", name, ErrDuplicate)
	}
	v := reflect.ValueOf(ptr)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("state: register %q: got %T: %w", name, ptr, ErrInvalidPointer)
	}
	e := &entry{name: name, ptr: v, typ: v.Type().Elem()}
	switch e.typ.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return fmt.Errorf("state: register %q: %s values cannot be serialized: %w", name, e.typ, ErrInvalidPointer)
	case reflect.Slice:
		if k := rawKind(e.typ.Elem().Kind()); k != KindInvalid {
			e.enc, e.kind, e.slice, e.elemSize = encRaw, k, true, int(e.typ.Elem().Size())
		}
	default:
		if k := rawKind(e.typ.Kind()); k != KindInvalid {
			e.enc, e.kind, e.elemSize = encRaw, k, int(e.typ.Size())
		}
	}
	if e.enc == 0 {
		e.enc = encMsgpack
	}
	if r.byName == nil {
		r.byName = make(map[string]*entry)
	}
	r.entries = append(r.entries, e)
	r.byName[name] = e
	return nil
}

// Names returns the registered names in registration order (the order WriteTo writes them).
func (r *Registry) Names() []string {
	names := make([]string, len(r.entries))
	for i, e := range r.entries {
		names[i] = e.name
	}
	return names
}

// Select returns a registry of the entries whose names keep accepts, in the same order and
// sharing the registered pointers: writing or reading it writes or restores only those.
func (r *Registry) Select(keep func(name string) bool) *Registry {
	sub := NewRegistry()
	for _, e := range r.entries {
		if keep(e.name) {
			if sub.byName == nil {
				sub.byName = make(map[string]*entry)
			}
			sub.entries = append(sub.entries, e)
			sub.byName[e.name] = e
		}
	}
	return sub
}

// Len returns the number of registered values.
func (r *Registry) Len() int { return len(r.entries) }

func validName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return ErrInvalidName
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return ErrInvalidName
		}
	}
	return nil
}

// rawBytes returns the memory of a raw entry's current value. The result aliases the value:
// no copy is made.
func (e *entry) rawBytes() []byte {
	v := e.ptr.Elem()
	if !e.slice {
		return unsafe.Slice((*byte)(e.ptr.UnsafePointer()), e.elemSize)
	}
	if v.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), v.Len()*e.elemSize)
}

// isNil reports whether a raw slice entry's value is a nil slice.
func (e *entry) isNil() bool { return e.slice && e.ptr.Elem().IsNil() }

// entryOverhead is the size of an entry's framing excluding name and data.
const entryOverhead = 1 + 1 + 4 + 8 + 4 + 4

// Size estimates the number of bytes WriteTo would write: exact for raw entries, an estimate
// for msgpack ones (computed without encoding them). It is meant for migration-cost
// estimates.
func (r *Registry) Size() int64 {
	n := int64(headerLen + trailerLen)
	for _, e := range r.entries {
		n += entryOverhead + int64(len(e.name))
		if e.enc == encRaw {
			if e.slice {
				n += int64(e.ptr.Elem().Len()) * int64(e.elemSize)
			} else {
				n += int64(e.elemSize)
			}
			continue
		}
		n += estimateMsgpack(e.ptr.Elem(), 0)
	}
	return n
}

// estimateMsgpack approximates the msgpack size of v without encoding it; slices of
// fixed-size numbers cost O(1). Recursion is cut off at a fixed depth so cyclic pointers
// terminate.
func estimateMsgpack(v reflect.Value, depth int) int64 {
	if depth > 32 || !v.IsValid() {
		return 1
	}
	switch v.Kind() {
	case reflect.Bool:
		return 1
	case reflect.Int8, reflect.Uint8:
		return 2
	case reflect.Int16, reflect.Uint16:
		return 3
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return 5
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Float64, reflect.Uintptr:
		return 9
	case reflect.Complex64, reflect.Complex128:
		return 2 * 9
	case reflect.String:
		return 5 + int64(v.Len())
	case reflect.Slice, reflect.Array:
		n := int64(v.Len())
		if v.Kind() == reflect.Slice && v.IsNil() {
			return 1
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 5 + n // []byte is msgpack bin
		}
		if n == 0 {
			return 1
		}
		if rawKind(v.Type().Elem().Kind()) != KindInvalid {
			return 5 + n*estimateMsgpack(v.Index(0), depth+1)
		}
		s := int64(5)
		for i := 0; i < v.Len(); i++ {
			s += estimateMsgpack(v.Index(i), depth+1)
		}
		return s
	case reflect.Map:
		s := int64(5)
		it := v.MapRange()
		for it.Next() {
			s += estimateMsgpack(it.Key(), depth+1) + estimateMsgpack(it.Value(), depth+1)
		}
		return s
	case reflect.Struct:
		s := int64(3)
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() {
				s += 1 + int64(len(f.Name)) + estimateMsgpack(v.Field(i), depth+1)
			}
		}
		return s
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 1
		}
		return estimateMsgpack(v.Elem(), depth+1)
	}
	return 1
}
