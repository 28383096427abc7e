// Package pcmd is the node daemon of mpios, after the per-node PCM daemon of MPI/IOS: one
// pcmd runs on every node of a cluster. It registers the node on the NATS control plane
// (heartbeats with its slots and load), spawns ranks for launchers such as mpirun --hosts
// and relays their output and exit status, signals them on request, and hands them the
// node's checkpoint store (MPIOS_CKPT_DIR), and runs the node's IOS agent (agent.go): it
// samples the node's resources, keeps its ranks' profiles, steals work for the node from
// random peers and asks jobs to migrate ranks when the decision policy predicts a gain. The
// decisions themselves are made by package iosbridge, which the agent drives from one
// goroutine.
//
// The subjects and messages are defined in internal/job. Anything that arrives over NATS is
// untrusted: it is decoded, validated, checked against the node's policy (--allow, slots)
// and refused with a clear reply otherwise. Ranks run under pcmd's user in their own process
// group, and die with pcmd (Linux Pdeathsig).
//
// Serve runs the daemon; DiscoverStatus and Control are the client side used by the pcmd
// status, migrate and checkpoint commands.
package pcmd
