package state

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these where callers may need to
// branch; use errors.Is.
var (
	// ErrInvalidName: a registration name is empty, too long or has characters outside
	// [A-Za-z0-9_.-].
	ErrInvalidName = errors.New("invalid name")
	// ErrDuplicate: a name is registered twice.
	ErrDuplicate = errors.New("name already registered")
	// ErrInvalidPointer: Register was given something other than a non-nil pointer to a
	// serializable value.
	ErrInvalidPointer = errors.New("need a non-nil pointer to a serializable value")
	// ErrNotState: the stream does not start with the state magic.
	ErrNotState = errors.New("not a state stream")
	// ErrUnsupportedVersion: the stream was written by a newer, incompatible format version.
	ErrUnsupportedVersion = errors.New("unsupported state format version")
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("corrupt state stream")
	// ErrMismatch is matched by every *MismatchError.
	ErrMismatch = errors.New("state stream does not match registry")
	// ErrTooLarge: a value is too large to be written (see MaxRawEntryBytes,
	// MaxMsgpackEntryBytes).
	ErrTooLarge = errors.New("value too large")
)

// CorruptError reports a damaged or truncated stream.
type CorruptError struct {
	Entry  string // entry name; "" when the stream header or trailer is damaged
	Offset int64  // stream offset at which the damage was detected
	Reason string // e.g. "checksum mismatch", "truncated"
	Err    error  // underlying error, if any (e.g. io.ErrUnexpectedEOF)
}

// Error describes the damage and where it was found.
func (e *CorruptError) Error() string {
	where := "stream"
	if e.Entry != "" {
		where = fmt.Sprintf("entry %q", e.Entry)
	}
	s := fmt.Sprintf("state: corrupt %s at offset %d: %s", where, e.Offset, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// MismatchError reports a well-formed stream that does not fit the registry: an entry that
// is not registered, a registered entry that is missing, or an entry whose kind, element type
// or structure differs from the registered value.
type MismatchError struct {
	Entry  string
	Reason string
	Err    error // underlying error, e.g. the msgpack decoding error
}

// Error names the entry and the mismatch.
func (e *MismatchError) Error() string {
	s := fmt.Sprintf("state: entry %q: %s", e.Entry, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *MismatchError) Unwrap() error { return e.Err }

// Is reports whether target is ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }
