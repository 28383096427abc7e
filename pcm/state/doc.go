// Package state is the registry of a rank's checkpointable state and its serialization.
//
// MPI/IOS uses semi-transparent checkpointing: instead of saving the whole process image, the
// application names the data structures that make up its state (Register) and the PCM library
// saves and restores exactly those, at iteration boundaries. A Registry holds those
// registrations; WriteTo streams their current values and ReadFrom restores them.
//
// # Encodings
//
// Pointers to slices of fixed-size numbers (int8…int64, int, uint8…uint64, uint, float32,
// float64, complex64, complex128, and named types whose underlying kind is one of those) and
// pointers to such scalars are "raw" entries: their memory is written as little-endian bytes
// straight from the backing array, in chunks, with no per-element encoding, so a multi-GiB
// array streams at close to memory bandwidth in bounded memory. Everything else (structs, maps,
// strings, [][]float64, …) is encoded with msgpack; only exported struct fields are saved.
//
// # Stream format (version 1)
//
// All integers are little-endian; CRCs are CRC-32C (Castagnoli).
//
//	header   magic "MPIOSTAT" | version u16 | reserved u16 (0)
//	entry*   'E' | nameLen u8 | name | enc u8 | elem u8 | flags u8 | elemSize u8 | length u64
//	         | headerCRC u32 | data[length] | entryCRC u32
//	trailer  'T' | entries u32 | streamCRC u32
//
// enc is 1 (raw) or 2 (msgpack). For raw entries elem is the element code (see Kind), flags
// bit 0 marks a slice (clear: a scalar) and bit 1 a nil slice, and elemSize is the element size
// in bytes. For msgpack entries elem is the reflect.Kind of the registered value. headerCRC
// covers the entry from 'E' through length, so a damaged length is caught before it is used;
// entryCRC covers the entry header and its data. streamCRC covers the stream header, every
// entry header with both of its CRCs, and the trailer's tag and count: it covers every byte,
// the data through the entry CRCs, and detects dropped, duplicated or reordered entries.
//
// # Reading
//
// ReadFrom validates everything and reports problems as *CorruptError (damaged or truncated
// stream, matching ErrCorrupt) or *MismatchError (the stream does not fit the registry: unknown
// or missing entry, different kind or element type, matching ErrMismatch), naming the entry.
// ReadFrom is all-or-nothing: values are decoded into fresh memory and assigned to the
// registered pointers only after the trailer has been verified, so on error no registered value
// is modified. The price is that old and new state coexist briefly; release large slices
// before ReadFrom (set them to nil) if that matters.
//
// Lengths are capped (MaxRawEntryBytes, MaxMsgpackEntryBytes) and, when the reader reveals how
// much input remains (Len() int as bytes.Reader has, or io.Seeker as *os.File has), checked
// against it before anything is allocated. For other readers raw slices grow geometrically as
// data actually arrives, so a short hostile stream cannot make ReadFrom allocate much. msgpack
// entries are read into memory, checksummed and structurally validated before being decoded.
// ReadFrom never reads past the trailer, so a state stream can be embedded in a larger one.
package state
