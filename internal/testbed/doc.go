// Package testbed emulates a small cluster of mpios nodes on one machine, for tests and
// experiments: it starts N "pcmd serve" daemons, each one a node with its own CPU quota and,
// when the process runs as root, its own network namespace and IP address, so that a rank
// migrated from one node to another really changes host address, and a node's ranks really
// compete for a bounded amount of CPU.
//
// # Layout (isolated mode)
//
// Start creates a Linux bridge mpios-br0 with the address 10.77.0.1/24 in the calling
// (root) network namespace, and, unless Options.NATSURL is given, an embedded NATS server
// listening on 10.77.0.1 with random credentials. AddNode(name, cpus) then
//
//   - creates the network namespace mpios-NAME, a veth pair mpios-vK (root side, a port of
//     the bridge) / eth0 (inside), and gives eth0 the address 10.77.0.(K+2)/24 with a default
//     route via the bridge; mpirun and the NATS server in the root namespace reach every node,
//     and the nodes reach each other, over the bridge;
//   - creates the cgroup mpios/NAME with a CFS quota of cpus × period (cgroup v1
//     cpu.cfs_quota_us or cgroup v2 cpu.max, whichever hierarchy holds the cpu controller),
//     with two children: mpios/NAME/work for pcmd and its ranks and mpios/NAME/load for the
//     load generator;
//   - starts "pcmd serve --node NAME --advertise 10.77.0.(K+2) ..." inside the namespace
//     and the work cgroup, through the small helper testbed/nodeexec, which writes its pid
//     to cgroup.procs, enters the namespace (setns) and executes pcmd; the ranks pcmd spawns
//     inherit both. Unlike "ip netns exec" it leaves the mount namespace alone, so pcmd and
//     the ranks see /sys/fs/cgroup and their quota;
//   - waits until the node's heartbeat (job.NodeInfo on mpios.nodes.heartbeat) arrives.
//
// SetLoad(name, share) emulates a competing CPU-bound user, the method of the MPI/IOS
// experiments: it runs the busy-loop program of testbed/loadgen in mpios/NAME/load and sets
// the two children's weights to share and 1-share and their quotas to share and 1-share of
// the node's quota. The load generator, which never sleeps, then takes share of the node's
// CPU however many threads the ranks compete with, and the ranks get the rest. Share 0
// stops the load generator and lifts the children's quotas.
//
// SetLink(a, b, Link{RateBytes, Delay}) emulates the network between two groups of nodes
// (two "clusters" on one machine): on every node's eth0 an htb root qdisc sends the packets
// for each node of the other group through a class of that rate (traffic inside a group
// and to the bridge stays unshaped), and packets are delayed by Delay each way: by a netem
// child of the class where the kernel has netem (sch_netem), else by the userspace delay
// router. That router (where netem is missing, as on the machine this was written on, or
// with Options.UserspaceDelay) is the network namespace mpios-.delay on the bridge with the
// address RouterIP and a TUN device: each node routes its packets for the peers behind a
// delayed link via RouterIP (host routes of protocol 77); in the router namespace a policy
// rule (iif eth0) sends them into the TUN, where a goroutine of the testbed process holds
// each one until its release time (arrival plus its flow's delay, never before an earlier
// packet of the flow) and writes it back, and the kernel forwards it to its destination.
// Without netem and /dev/net/tun SetLink returns ErrNoNetem for a link with a delay.
//
// Options.Sites (site name → nodes) makes the control plane a grid's: every site gets its
// own NATS server (the testbed/natsd program, the embedded nats-server of this module) in a
// network namespace of its own on the bridge (mpios-nats.SITE, an address from the nodes'
// pool, no CPU quota), started through nodeexec with a configuration file of mode 0600 that
// holds the random client and route credentials. The servers are joined by authenticated
// routes (a NATS cluster), each site's nodes connect to their site's server, and the
// testbed and mpirun (NATSURL) to the first site's. SetLink's groups may name a site's
// server (SiteServer(S)), so that the routes between sites cross the delayed link: then a
// message from an agent at one site to an agent at the other, and its echo, take the
// link's round trip, which is what NRS's latency locales measure.
//
// RemoveNode stops a node's pcmd gracefully (SIGTERM: pcmd stops its ranks and deregisters)
// and removes its namespace, veth and cgroups. Nodes can be added and removed while a job
// runs. Close removes everything the cluster made. Stale mpios-* namespaces, links and
// cgroups of a crashed run are removed by Cleanup, which Start calls. Only one isolated
// cluster runs on a machine at a time: Start waits for a machine-wide lock (a file lock,
// /run/mpios-testbed.lock), so concurrent test binaries take turns instead of destroying
// each other's bridge.
//
// # Fallback
//
// Without root, without the ip command or network namespaces, or without a writable cgroup
// cpu controller, Isolation "auto" falls back to loopback: every node advertises 127.0.0.1,
// no quota applies, SetLoad runs an unconstrained duty-cycled load generator, and Start logs
// why. Isolated reports which mode is in force. Isolation "netns" fails instead of falling
// back.
package testbed
