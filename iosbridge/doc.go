// Package iosbridge is the deterministic core of the IOS agent that mpios runs inside pcmd:
// the profiling data model, the decision policies and the Random Actor Stealing protocol,
// written as pure state machines in the style of etcd's raft. Nothing here touches sockets,
// NATS, clocks or the global random source; time (now time.Time) and randomness (Rand) are
// passed in, so every run replays exactly from a seed.
//
// The design follows these papers:
//
//   - the MPI/IOS paper (El Maghraoui, Szymanski, Varela: "An architecture for
//     reconfigurable iterative MPI applications in dynamic environments"): an IOS agent has a profiling, a decision and a protocol
//     component; idle or newly joined nodes send steal requests carrying their profile; the
//     receiver's decision component predicts the gain of migrating a process and PCM moves
//     it. The default policy "mpiios" is the paper's gain,
//     Γ = (Σ_r w_r·Δ_r)·log(L) − M, Δ_r = (a_r − u_r)/(a_r + u_r), with L the remaining
//     life (remaining iterations × iteration time) and M the migration cost (state bytes /
//     bandwidth); migrate only if Γ > 0. See MPIIOS for the interpretation.
//
//   - Desell's thesis ("Autonomic grid computing using malleability and migration: an
//     actor-oriented software framework") §2.2.1: the RAS protocol (Node): steal when CPU usage is below a
//     threshold, random neighbour, TTL, forward with TTL−1 or fail at TTL 0, one
//     outstanding steal. §2.2.1.1 S-RAS ("sras"), §2.2.1.2 ATS-RAS eq. 2.1–2.3 ("atsras"),
//     §2.2.1.3 FLC-RAS tables 2.2/2.3 and the four Sugeno rules with threshold 0.5
//     ("flcras"). Where a printed formula contradicts the prose (the sign of eq. 2.1 and
//     g_c of table 2.2, eq. 2.3 as a whole) the doc comment of the policy says what we did
//     and why. ATS-RAS's F(A) is measured by package profiler.
//
//   - the IO middleware paper (Szymanski, Varela, Cummings, Napolitano: "Dynamically
//     reconfigurable scientific computing on large-scale heterogeneous grids"): RS/ARS random stealing over a peer network, steal packets
//     with a time to live, joining through peer servers, no central coordination.
//
//   - the grid strategies (grid.go): the IO paper's RS, ARS (eq. 1–3) and NRS with its latency
//     locales ("rs", "ars", "nrs", "nrs-ars"; round trips timed by echoed heartbeats),
//     Satin's cluster-aware random stealing ("crs": steals inside Config.Cluster plus at
//     most one asynchronous wide-area steal), and Bustos' Robin-Hood push from overloaded
//     nodes, Nottingham-Sheriff ranked stealing and both ("robinhood", "sheriff", "rhns").
//     A policy that needs another protocol than RAS says so through ProtocolPolicy.
//
//   - Desell's thesis §2.2.2, the hierarchical malleability policy (hierarchy.go): processing
//     power (eq. 2.4), managers elected per cluster and for the grid (ElectManager,
//     Aggregate), the data split of eq. 2.5–2.15 (DistributeData), the granularity of eq.
//     2.9–2.10 and the restrictions of §2.2.2.3, triggered when iteration times diverge;
//     HierarchyConfig.Plan returns a MalleabilityDecision of resize, migrate and rebalance
//     requests. Not wired yet: the agent driver is to send Resize as the job.ControlRequest
//     of kind "resize" (being added with malleability), Migrations as today's migrate
//     requests, and Rebalance once jobs accept a data redistribution.
//
// Package iossim runs Node and the policies on a simulated grid of up to 10,000 nodes.
//
// A job may choose its own policy (mpirun --policy): RankProfile.Policy, applied by PerRank,
// which NewNode puts inside the stability guard; a job that chose "none" is never moved.
//
// Stability (Stabilize, applied by NewNode around every policy) adds what the thesis found
// missing: a cooldown per migrated rank, a no-flip hysteresis on free CPUs (a margin relative
// to node size) so similar nodes never ping-pong, and no migration without positive gain.
// For "atsras", "flcras" and "ars" it also lets busy nodes exchange ranks by communication
// (exchange.go: single moves to a node no denser in ranks per CPU, swaps of one or two ranks
// and three-way exchanges that cut the traffic crossing nodes), each lowering a potential so that none is
// ever undone, and each carried out whole or not at all (exchange_commit.go: a late or lost
// answer moves nothing).
// A load change ends a node's steal back-off, so the network reacts to it within a sampling
// period and a heartbeat.
//
// # Wiring (pcmd)
//
// One goroutine owns a Node:
//
//   - at start: NewNode(Config{ID, Policy: PolicyByName(flag), Rand: rand.New(...)}), then
//     Join(now, seeds); later Join again for every node that appears in pcmd's heartbeat
//     table, and Step a Leave for every node that disappears from it;
//   - every sample period: Sampler.Sample plus the ranks' profiles (package profiler,
//     completed with their processes' CPU time and memory) → Update(now, ...);
//   - on a timer (≈500 ms): Tick(now);
//   - on every protocol message from NATS (msgpack-decoded Message): Step(now, msg);
//     errors mean a bad or misaddressed message and are logged, not fatal;
//   - after each of the above: Ready(); publish every Message to its To node's subject, in
//     order; ask the job of every Migration to move the rank to Migration.To (a control
//     request to its mpirun), and call MigrationFailed and Cooldown if the job refuses or
//     does not answer; keep Ready().Decisions for the status page;
//   - at shutdown: Leave(now), publish Ready().Messages.
package iosbridge
