// Package pcmd is the node daemon of mpios, after the per-node PCM daemon of MPI/IOS: one
// pcmd runs on every node of a cluster. Serve registers the node on the NATS control plane
// (heartbeats with its slots and load, answers to discovery), keeps the view of its peers,
// and runs, for the node:
//   - its ranks (package spawner: spawn admission against --allow and the slots, leases,
//     output relay, signals), with the node's own MPIOS_BIND, MPIOS_NODE and MPIOS_CKPT_DIR;
//   - its IOS agent (package agentdriver around iosbridge.Node): resource sampling, the
//     ranks' profiles, random stealing and migration requests to the jobs;
//   - its checkpoint piece server (package pieceserver), through which ranks restarting on
//     other nodes read the pieces in this node's store.
//
// At shutdown it leaves the IOS peer network, stops its ranks, sends a last "leaving"
// heartbeat and drains its NATS connection. The client side used by "pcmd status",
// "pcmd migrate" and "pcmd checkpoint" is package nodestatus.
//
// The subjects and messages are defined in internal/job. Anything that arrives over NATS is
// untrusted: it is decoded, validated, checked against the node's policy and refused with a
// clear reply otherwise. Ranks run under pcmd's user in their own process group, and die
// with pcmd (Linux Pdeathsig).
package pcmd
