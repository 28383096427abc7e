// Package spawner runs the ranks of one node for pcmd: it admits spawn requests against the
// node's policy (the --allow list, its slots, one process per rank of a job), starts the
// ranks in their own process groups from one thread (so they die with pcmd, Linux
// Pdeathsig), relays their output and exit status over NATS, signals them on request, and
// stops them when their launcher's lease runs out or the node shuts down.
//
// The decisions are made by Table, a deterministic type with no processes, sockets or
// clock; Manager is the thin loop around it that owns NATS and the processes. Anything that
// arrives over NATS is untrusted: it is decoded, validated and checked against the node's
// policy, and refused with a clear reply otherwise.
package spawner
