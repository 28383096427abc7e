package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is the type of a data-plane frame.
type Kind uint8

// Frame kinds. The numbering is part of the wire protocol.
const (
	// KindEager carries a whole message in its payload; it is matched on arrival.
	KindEager Kind = 1
	// KindRTS announces a large message (ready to send); it is matched like an eager message,
	// and the payload follows only after the receiver answers KindCTS, so unexpected large
	// messages cost the receiver no memory.
	KindRTS Kind = 2
	// KindCTS answers an RTS (clear to send): ID is the sender's request, ID2 the receiver's.
	// FlagDiscard tells the sender that the receive failed and no data is wanted.
	KindCTS Kind = 3
	// KindData carries a chunk [Offset, Offset+Len) of a rendezvous message for request ID2.
	KindData Kind = 4
	// KindBye ends a connection in an orderly way; Flags says why.
	KindBye Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindEager:
		return "eager"
	case KindRTS:
		return "rts"
	case KindCTS:
		return "cts"
	case KindData:
		return "data"
	case KindBye:
		return "bye"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Frame flags.
const (
	// FlagDiscard on a CTS: the receiver will not take the data (truncation or type mismatch).
	FlagDiscard uint8 = 1 << 0
	// FlagMigrated on a Bye: the process hands its rank to a successor; it did not fail.
	FlagMigrated uint8 = 1 << 1
	// FlagRemote on a Data frame in a shared-memory ring: the payload stays in the sender's
	// memory, and a descriptor for process_vm_readv follows the header instead.
	FlagRemote uint8 = 1 << 2
)

// Wire constants.
const (
	Magic0, Magic1 = 'M', 'P'
	Version        = 1
	// HeaderSize is the fixed size of an encoded Header.
	HeaderSize = 56
	// MaxFramePayload bounds one frame's payload; larger messages travel as several Data frames.
	MaxFramePayload = 16 << 20
	// MaxEagerPayload bounds an eager frame: eager payloads are buffered whole by the receiver.
	MaxEagerPayload = 128 << 10
	// MaxMessage bounds the total size announced by an RTS (1 TiB): a sanity check on input.
	MaxMessage = 1 << 40
	// MaxElemType is the largest element-type code a frame may carry.
	MaxElemType = 63
)

// Header is the fixed part of every frame. Src is not carried: the connection identifies the
// sending rank, so a peer cannot claim to be someone else.
type Header struct {
	Kind   Kind
	Elem   uint8  // element type code chosen by the mpi layer (0: raw bytes)
	Flags  uint8  // Flag* bits
	Ctx    uint32 // communicator context
	Tag    int32
	Len    uint32 // payload bytes in this frame
	Total  uint64 // message size in bytes (Eager: == Len; RTS, Data: whole message)
	ID     uint64 // sender's request id (RTS, CTS)
	ID2    uint64 // receiver's request id (CTS, Data); Data also uses Offset
	Offset uint64 // Data: offset of this chunk in the message
}

// Errors returned by DecodeHeader. They are wrapped in a *FrameError.
var (
	ErrBadMagic   = errors.New("bad magic")
	ErrBadVersion = errors.New("unsupported version")
	ErrBadKind    = errors.New("unknown frame kind")
	ErrBadLength  = errors.New("bad length")
)

// FrameError reports a frame that failed validation; the connection that carried it is closed.
type FrameError struct {
	Kind Kind
	Err  error
	Info string
}

func (e *FrameError) Error() string {
	if e.Info != "" {
		return fmt.Sprintf("comm: invalid %v frame: %v: %s", e.Kind, e.Err, e.Info)
	}
	return fmt.Sprintf("comm: invalid %v frame: %v", e.Kind, e.Err)
}

func (e *FrameError) Unwrap() error { return e.Err }

// AppendHeader appends the encoding of h to b.
func AppendHeader(b []byte, h *Header) []byte {
	var w [HeaderSize]byte
	w[0], w[1], w[2], w[3] = Magic0, Magic1, Version, byte(h.Kind)
	w[4], w[5] = h.Elem, h.Flags
	// w[6:8] reserved, zero.
	binary.LittleEndian.PutUint32(w[8:], h.Ctx)
	binary.LittleEndian.PutUint32(w[12:], uint32(h.Tag))
	binary.LittleEndian.PutUint32(w[16:], h.Len)
	// w[20:24] reserved, zero.
	binary.LittleEndian.PutUint64(w[24:], h.Total)
	binary.LittleEndian.PutUint64(w[32:], h.ID)
	binary.LittleEndian.PutUint64(w[40:], h.ID2)
	binary.LittleEndian.PutUint64(w[48:], h.Offset)
	return append(b, w[:]...)
}

// DecodeHeader decodes and validates a header. Every field that later code trusts (lengths,
// kinds, element codes) is checked here, so a hostile or corrupt peer cannot make the receiver
// allocate without bound or index out of range.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, &FrameError{Err: ErrBadLength, Info: fmt.Sprintf("header is %d bytes, want %d", len(b), HeaderSize)}
	}
	if b[0] != Magic0 || b[1] != Magic1 {
		return h, &FrameError{Err: ErrBadMagic, Info: fmt.Sprintf("%#x %#x", b[0], b[1])}
	}
	if b[2] != Version {
		return h, &FrameError{Err: ErrBadVersion, Info: fmt.Sprintf("version %d, want %d", b[2], Version)}
	}
	h.Kind = Kind(b[3])
	h.Elem, h.Flags = b[4], b[5]
	h.Ctx = binary.LittleEndian.Uint32(b[8:])
	h.Tag = int32(binary.LittleEndian.Uint32(b[12:]))
	h.Len = binary.LittleEndian.Uint32(b[16:])
	h.Total = binary.LittleEndian.Uint64(b[24:])
	h.ID = binary.LittleEndian.Uint64(b[32:])
	h.ID2 = binary.LittleEndian.Uint64(b[40:])
	h.Offset = binary.LittleEndian.Uint64(b[48:])
	return h, h.Validate()
}

// Validate checks the consistency of a header's fields for its kind.
func (h *Header) Validate() error {
	bad := func(format string, args ...any) error {
		return &FrameError{Kind: h.Kind, Err: ErrBadLength, Info: fmt.Sprintf(format, args...)}
	}
	if h.Elem > MaxElemType {
		return &FrameError{Kind: h.Kind, Err: ErrBadKind, Info: fmt.Sprintf("element type %d", h.Elem)}
	}
	if h.Kind != KindData && h.Offset != 0 {
		return bad("%v frame with offset %d", h.Kind, h.Offset)
	}
	switch h.Kind {
	case KindEager:
		if h.Len > MaxEagerPayload || uint64(h.Len) != h.Total {
			return bad("eager payload %d, total %d (max %d)", h.Len, h.Total, MaxEagerPayload)
		}
	case KindRTS:
		if h.Len != 0 || h.Total > MaxMessage {
			return bad("rts payload %d, total %d", h.Len, h.Total)
		}
	case KindCTS, KindBye:
		if h.Len != 0 || h.Total != 0 {
			return bad("%v frame with payload %d, total %d", h.Kind, h.Len, h.Total)
		}
	case KindData:
		if h.Len == 0 || h.Len > MaxFramePayload || h.Total > MaxMessage || h.Offset > h.Total || uint64(h.Len) > h.Total-h.Offset {
			return bad("data chunk [%d,+%d) of %d", h.Offset, h.Len, h.Total)
		}
	default:
		return &FrameError{Kind: h.Kind, Err: ErrBadKind}
	}
	return nil
}
