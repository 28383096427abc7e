// Package ctlauth authenticates the messages of the mpios control plane (NATS), where any
// client of a shared server can publish on any subject it is permitted to.
//
// Two schemes share one envelope format (Envelope) and one replay defence (ReplayGuard):
//
//   - Job messages (requests, events, votes, profiles, piece requests, manifests) carry an
//     HMAC-SHA256 tag under a JobKey derived from the job's secret, which only the job's
//     launcher and ranks hold. A JobWrapper wraps, a JobVerifier verifies. Symmetric keys fit
//     here: every holder is equally trusted by the job's owner, and verification costs
//     about a microsecond.
//   - Messages whose receiver does not hold the job's secret, or that must be verifiable by
//     anyone (spawn requests to a node, a node's own announcements), are signed with an NKey
//     (ed25519, package nkeys). A KeyWrapper signs, a KeyVerifier verifies against a KeySet:
//     a node's AuthorizedKeys (launchers its operator allows, one NKey user public key a line
//     as in SSH's authorized_keys) or a launcher's known nodes.
//
// Every envelope binds the NATS subject it was published on, the sender's identity, a
// per-sender sequence number and the sending time: a message moved to another subject, a
// tag forged or computed under another job's key, a replayed message and one older than
// ReplayOptions.MaxSkew are all refused, each with its own error (ErrForged, ErrReplay,
// ErrStale). The job's secret itself never travels in clear: SealSecret encrypts it for
// one node's curve key (nkeys' x25519 box), published in the node's signed NodeCard.
//
// A node holds the keys of the jobs it runs ranks of in one JobKeyring: learned from the
// secrets of verified spawn requests, pinned (another secret for a known job id is refused),
// and used to verify what those jobs send the node (piece requests, buddy copies, manifest
// requests) and to authenticate its replies. A one-time offer the node makes (a piece to
// fetch, a copy to send) is taken with an OfferProof, an HMAC of its token under the job key.
//
// Everything here is pure: time and randomness are passed in, no goroutine is started, no
// I/O is done, except by JobKeyring.Persist's directory of keys. docs/security.md says where each mechanism is used.
package ctlauth
