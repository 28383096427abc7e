package state

import "github.com/mpios/mpios/internal/msgpackcheck"

// maxMsgpackDepth bounds the nesting of msgpack arrays and maps (see package msgpackcheck).
const maxMsgpackDepth = msgpackcheck.MaxDepth

// checkMsgpack verifies that b holds exactly one well-formed msgpack object that the decoder
// can take without allocating more than in proportion to len(b).
func checkMsgpack(b []byte) error { return msgpackcheck.Check(b) }
