package iosbridge

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Config configures a Node. Zero durations and thresholds take the documented defaults.
type Config struct {
	// ID is this node's name on the peer network (required).
	ID string
	// Policy is the decision component; nil means PolicyByName(DefaultPolicy). NewNode always
	// wraps it in Stabilize(PerRank(Policy), Stability): ranks whose profile names a policy
	// of their own (RankProfile.Policy) are decided by that one.
	Policy Policy
	// Stability configures the guard; the zero value means DefaultStability().
	Stability Stability
	// Rand is the node's only randomness: peer choice, S-RAS, backoff jitter (required).
	Rand Rand
	// StealThreshold: the node steals when its availability is at least this (default 0.25).
	// The thesis triggers "when the local CPU usage drops below a certain threshold"; its
	// extra condition "more than one autonomous actor present locally" is dropped because
	// in MPI/IOS a newly joined, empty node must steal to get work at all.
	StealThreshold float64
	// TTL is the time to live of a new steal request (default 3: it visits up to 4 nodes).
	TTL int
	// StealTimeout frees the one outstanding steal if no answer came (default 5s).
	StealTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait after a failed or lost steal; it doubles per
	// consecutive failure, with jitter in [b/2, b] (defaults 1s and 30s).
	BackoffMin, BackoffMax time.Duration
	// HeartbeatInterval is how often neighbours are pinged (default 2s); PeerTimeout is the
	// silence after which a neighbour is dropped (default 10s).
	HeartbeatInterval, PeerTimeout time.Duration
	// PendingTimeout bounds how long a given or promised rank is booked while the migration
	// is in flight and the profile has not caught up (default 2m).
	PendingTimeout time.Duration
}

func (c *Config) defaults() error {
	if c.ID == "" {
		return errors.New("iosbridge: node config: empty ID")
	}
	if c.Rand == nil {
		return fmt.Errorf("iosbridge: node %s: config needs a Rand (e.g. rand.New(rand.NewPCG(seed, 0)))", c.ID)
	}
	if c.Policy == nil {
		p, err := PolicyByName(DefaultPolicy)
		if err != nil {
			return err
		}
		c.Policy = p
	}
	if c.Stability == (Stability{}) {
		c.Stability = DefaultStability()
	}
	if err := c.Stability.Validate(); err != nil {
		return err
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.StealTimeout, 5*time.Second)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, 30*time.Second)
	def(&c.HeartbeatInterval, 2*time.Second)
	def(&c.PeerTimeout, 10*time.Second)
	def(&c.PendingTimeout, 2*time.Minute)
	if c.StealThreshold == 0 {
		c.StealThreshold = 0.25
	}
	if c.TTL == 0 {
		c.TTL = 3
	}
	switch {
	case !finite(c.StealThreshold) || c.StealThreshold < 0 || c.StealThreshold > 1:
		return fmt.Errorf("iosbridge: node %s: steal threshold %v not in [0,1]", c.ID, c.StealThreshold)
	case c.TTL < 0 || c.TTL > MaxTTL:
		return fmt.Errorf("iosbridge: node %s: TTL %d not in [0,%d]", c.ID, c.TTL, MaxTTL)
	case c.StealTimeout < 0 || c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin || c.HeartbeatInterval < 0 || c.PeerTimeout < 0 || c.PendingTimeout < 0:
		return fmt.Errorf("iosbridge: node %s: negative duration or BackoffMax < BackoffMin", c.ID)
	}
	return nil
}

// Migration is an order for the local PCM layer: checkpoint Rank and restart it on node To.
// The protocol has already told To (StealAccept); pcmd only has to carry it out.
type Migration struct {
	// Rank moves to node To; RequestID is the steal it answers (Origin's numbering).
	Rank      RankID `msgpack:"rank"`
	To        string `msgpack:"to"`
	RequestID uint64 `msgpack:"request_id"`
	// Gain, Policy and Reason copy the Decision, for the event log; At is when it was made.
	Gain   float64   `msgpack:"gain"`
	Policy string    `msgpack:"policy"`
	Reason string    `msgpack:"reason"`
	At     time.Time `msgpack:"at"`
}

// Ready is what the state machine wants done after Step/Tick: messages to send (each to
// Message.To) and migrations to execute. Like raft's Ready, it is drained by Node.Ready.
type Ready struct {
	// Messages must be sent in order, each to the node named in Message.To.
	Messages []Message
	// Migrations must be handed to PCM; each was already promised to its To node.
	Migrations []Migration
	// Decisions records every answer the decision component gave to another node's steal
	// request, migrate or not, with its reason: for the event log and status pages only,
	// nothing needs to be done with them.
	Decisions []DecisionRecord
}

// DecisionRecord is one decision the node made on a steal request: Origin asked (request
// RequestID, received from From) and the stabilized policy answered Decision.
type DecisionRecord struct {
	At        time.Time `msgpack:"at"`
	Origin    string    `msgpack:"origin"`
	From      string    `msgpack:"from"`
	RequestID uint64    `msgpack:"request_id"`
	// Candidates is how many local ranks the policy could have given.
	Candidates int      `msgpack:"candidates"`
	Decision   Decision `msgpack:"decision"`
}

// Stats counts protocol events, for metrics and tests.
type Stats struct {
	// Steals this node started, and how they ended (accepted, failed, timed out); a late
	// accept answers a steal that had already timed out.
	StealsSent, StealsAccepted, StealsFailed, StealsTimedOut, LateAccepts uint64
	// Other nodes' requests this node forwarded, answered with a fail, or granted.
	RequestsForwarded, RequestsFailed, RanksGiven uint64
}

// ErrLeft is returned by Step after Leave: the node is no longer part of the network.
var ErrLeft = errors.New("iosbridge: node has left the network")

type peerState struct {
	lastSeen time.Time
	profile  *NodeProfile
}

type pending struct {
	peer string
	at   time.Time
	cpu  float64
}

type steal struct {
	id     uint64
	target string
	sentAt time.Time
}

// Node is one IOS agent's protocol component (thesis §2.2.1) as a deterministic state
// machine: no I/O, no clock, no global randomness. Inputs are Update (profiling component),
// Step (a message arrived) and Tick (time passed); outputs are drained with Ready. It keeps
// at most one steal outstanding, decides on incoming steals with its (stabilized) policy,
// forwards undecided ones to random neighbours with TTL−1, and tracks neighbours through
// Join/Announce/Heartbeat/Leave with heartbeat expiry. Not safe for concurrent use: pcmd
// must drive it from one goroutine.
type Node struct {
	cfg    Config
	policy Policy

	left  bool
	peers map[string]*peerState
	// peerNames caches the sorted keys of peers (nil when stale): Tick and every forwarded
	// steal walk them in order, and re-sorting per message dominated a 10,000-node simulation.
	peerNames []string
	local     NodeProfile
	hasLocal  bool
	ranks     []RankProfile

	outgoing map[RankID]pending // given away, still listed locally until PCM finishes
	incoming map[RankID]pending // promised to us, not yet listed locally
	arrived  map[RankID]time.Time

	steal         *steal
	seq           uint64
	backoff       time.Duration
	nextSteal     time.Time
	lastHeartbeat time.Time

	out   Ready
	stats Stats
}

// NewNode validates cfg, fills defaults and returns a node with no peers and no profile.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Node{
		cfg:      cfg,
		policy:   Stabilize(PerRank(cfg.Policy), cfg.Stability),
		peers:    map[string]*peerState{},
		outgoing: map[RankID]pending{},
		incoming: map[RankID]pending{},
		arrived:  map[RankID]time.Time{},
	}, nil
}

// ID returns the node's name.
func (n *Node) ID() string { return n.cfg.ID }

// PolicyName is the name of the decision policy in use.
func (n *Node) PolicyName() string { return n.policy.Name() }

// Stats returns a copy of the event counters.
func (n *Node) Stats() Stats { return n.stats }

// Peers returns the current neighbour names, sorted.
func (n *Node) Peers() []string { return append([]string(nil), n.sortedPeers()...) }

// sortedPeers is the cached sorted neighbour list; callers must not modify it, and must not
// keep it across a change of n.peers.
func (n *Node) sortedPeers() []string {
	if n.peerNames == nil {
		n.peerNames = make([]string, 0, len(n.peers))
		for p := range n.peers {
			n.peerNames = append(n.peerNames, p)
		}
		sort.Strings(n.peerNames)
	}
	return n.peerNames
}

func (n *Node) addPeer(name string, ps *peerState) {
	n.peers[name] = ps
	n.peerNames = nil
}

func (n *Node) dropPeer(name string) {
	delete(n.peers, name)
	n.peerNames = nil
}

// PeerProfile returns the last profile a neighbour sent (heartbeat, join, announce), for
// status pages and future peer selection; ok is false if unknown.
func (n *Node) PeerProfile(name string) (NodeProfile, bool) {
	ps := n.peers[name]
	if ps == nil || ps.profile == nil {
		return NodeProfile{}, false
	}
	return *ps.profile, true
}

// Local returns this node's profile as the protocol currently sees it: the last Update,
// corrected for migrations in flight (see effectiveLocal).
func (n *Node) Local() NodeProfile { return n.effectiveLocal() }

// Outstanding reports the steal in flight, if any: its id and first target.
func (n *Node) Outstanding() (id uint64, target string, ok bool) {
	if n.steal == nil {
		return 0, "", false
	}
	return n.steal.id, n.steal.target, true
}

// Ready drains and returns the pending output. Call it after every Step/Tick/Update/Join/
// Leave and send every message (order preserved) and execute every migration.
func (n *Node) Ready() Ready {
	r := n.out
	n.out = Ready{}
	return r
}

// HasReady reports whether Ready would return anything.
func (n *Node) HasReady() bool {
	return len(n.out.Messages)+len(n.out.Migrations)+len(n.out.Decisions) > 0
}

// Update installs a fresh snapshot from the profiling component: this node's resource
// profile and its ranks' profiles. It also settles bookings: a given rank no longer listed
// has left, a promised rank now listed has arrived (its cooldown starts now).
func (n *Node) Update(now time.Time, local NodeProfile, ranks []RankProfile) error {
	if local.Node == "" {
		local.Node = n.cfg.ID
	}
	if local.Node != n.cfg.ID {
		return fmt.Errorf("iosbridge: node %s: update with profile of %s", n.cfg.ID, local.Node)
	}
	if err := local.Validate(); err != nil {
		return err
	}
	for _, r := range ranks {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	if n.hasLocal && n.local.Availability < n.cfg.StealThreshold && local.Availability >= n.cfg.StealThreshold {
		n.loadChanged(now) // this node just became free: look for work now
	}
	n.local = local
	n.local.Ranks = append([]RankID(nil), local.Ranks...)
	n.ranks = append([]RankProfile(nil), ranks...)
	n.hasLocal = true
	for id := range n.outgoing {
		if !local.Hosts(id) {
			delete(n.outgoing, id)
		}
	}
	for id := range n.incoming {
		if local.Hosts(id) {
			delete(n.incoming, id)
			n.arrived[id] = now
		}
	}
	n.expire(now)
	return nil
}

// MigrationFailed tells the node that PCM could not move rank, so it becomes a candidate
// again instead of staying booked for PendingTimeout.
func (n *Node) MigrationFailed(rank RankID) { delete(n.outgoing, rank) }

// Cooldown starts rank's stability cooldown at now, as if it had just arrived: it is not
// given away again for Stability.Cooldown. pcmd calls it with MigrationFailed when a job
// refuses a migration, so that the job is not asked again at every steal request.
func (n *Node) Cooldown(now time.Time, rank RankID) {
	if t, ok := n.arrived[rank]; !ok || now.After(t) {
		n.arrived[rank] = now
	}
}

// Join (re)enters the network by sending Join to the seed nodes (IOS "peer servers" or
// nodes named on the command line, §2.2.1). Seeds become neighbours when they Announce.
func (n *Node) Join(now time.Time, seeds []string) {
	n.left = false
	for _, s := range seeds {
		if s != "" && s != n.cfg.ID {
			n.send(Message{Kind: KindJoin, To: s, Profile: n.profilePtr()})
		}
	}
}

// Leave announces departure to every neighbour and stops the node: no more steals, Step
// returns ErrLeft until the next Join. Ranks still hosted are pcmd's concern.
func (n *Node) Leave(now time.Time) {
	for _, p := range n.sortedPeers() {
		n.send(Message{Kind: KindLeave, To: p})
	}
	n.peers = map[string]*peerState{}
	n.peerNames = nil
	n.steal = nil
	n.left = true
}

// Tick advances time: it drops silent neighbours, expires bookings, sends heartbeats,
// abandons a steal that outlived StealTimeout (with backoff) and, if the node has spare CPU
// and no steal in flight, starts a new one. Call it periodically (e.g. every 500ms).
func (n *Node) Tick(now time.Time) {
	if n.left {
		return
	}
	var silent []string
	for _, p := range n.sortedPeers() {
		if now.Sub(n.peers[p].lastSeen) > n.cfg.PeerTimeout {
			silent = append(silent, p)
		}
	}
	for _, p := range silent {
		n.dropPeer(p)
	}
	n.expire(now)
	if len(n.peers) > 0 && now.Sub(n.lastHeartbeat) >= n.cfg.HeartbeatInterval {
		n.lastHeartbeat = now
		prof := n.profilePtr() // one snapshot for all: nothing changes between the sends
		for _, p := range n.sortedPeers() {
			n.send(Message{Kind: KindHeartbeat, To: p, Profile: prof})
		}
	}
	if n.steal != nil && now.Sub(n.steal.sentAt) >= n.cfg.StealTimeout {
		n.steal = nil
		n.stats.StealsTimedOut++
		n.backOff(now)
	}
	n.maybeSteal(now)
}

// Step processes one message from the network. Invalid messages, or messages for another
// node, are rejected with an error and change nothing.
func (n *Node) Step(now time.Time, m Message) error {
	if n.left {
		return ErrLeft
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if m.To != n.cfg.ID {
		return fmt.Errorf("iosbridge: node %s: message for %s", n.cfg.ID, m.To)
	}
	if m.Kind == KindLeave {
		n.dropPeer(m.From)
		return nil
	}
	n.touch(now, m)
	switch m.Kind {
	case KindJoin:
		var others []string
		for _, p := range n.sortedPeers() {
			if p != m.From {
				others = append(others, p)
			}
		}
		n.send(Message{Kind: KindAnnounce, To: m.From, Peers: others, Profile: n.profilePtr()})
	case KindAnnounce:
		for _, p := range m.Peers {
			if p != n.cfg.ID && n.peers[p] == nil {
				// Learned second hand: give it one PeerTimeout to prove itself via heartbeat.
				n.addPeer(p, &peerState{lastSeen: now})
			}
		}
	case KindHeartbeat:
	case KindStealRequest:
		n.onStealRequest(now, m)
	case KindStealAccept:
		n.incoming[m.Rank] = pending{peer: m.From, at: now, cpu: m.CPUUse}
		if n.steal != nil && n.steal.id == m.ID {
			n.steal = nil
			n.backoff = 0
			n.nextSteal = now
			n.stats.StealsAccepted++
		} else {
			n.stats.LateAccepts++ // the rank comes anyway; it is booked above
		}
	case KindStealFail:
		n.stealFailed(now, m.ID)
	}
	return nil
}

func (n *Node) onStealRequest(now time.Time, m Message) {
	if m.Origin != n.cfg.ID {
		in := DecisionInput{Local: n.effectiveLocal(), Ranks: n.candidates(), Remote: *m.Profile, Now: now, Rand: n.cfg.Rand}
		d := n.policy.Decide(in)
		n.out.Decisions = append(n.out.Decisions, DecisionRecord{At: now, Origin: m.Origin, From: m.From,
			RequestID: m.ID, Candidates: len(in.Ranks), Decision: d})
		if d.Migrate {
			n.give(now, m, d, in)
			return
		}
		m.Reason = d.Reason
	}
	if m.TTL == 0 {
		n.failSteal(now, m, "TTL exhausted: "+m.Reason)
		return
	}
	target, ok := n.pickPeer(m.Origin, m.From)
	if !ok {
		n.failSteal(now, m, "no peer to forward to")
		return
	}
	fwd := m
	prof := *m.Profile // do not alias the caller's decoded message
	prof.Ranks = append([]RankID(nil), prof.Ranks...)
	fwd.Profile = &prof
	fwd.From, fwd.To, fwd.TTL, fwd.Reason = n.cfg.ID, target, m.TTL-1, ""
	n.stats.RequestsForwarded++
	n.send(fwd)
}

func (n *Node) give(now time.Time, m Message, d Decision, in DecisionInput) {
	cpu := 0.0
	for _, r := range in.Ranks {
		if r.ID() == d.Rank {
			cpu = r.cpuUse(in.Local)
		}
	}
	n.outgoing[d.Rank] = pending{peer: m.Origin, at: now, cpu: cpu}
	n.stats.RanksGiven++
	n.send(Message{Kind: KindStealAccept, To: m.Origin, Origin: m.Origin, ID: m.ID, Rank: d.Rank, CPUUse: cpu, Gain: d.Gain, Reason: d.Reason})
	n.out.Migrations = append(n.out.Migrations, Migration{Rank: d.Rank, To: m.Origin, RequestID: m.ID, Gain: d.Gain, Policy: d.Policy, Reason: d.Reason, At: now})
}

func (n *Node) failSteal(now time.Time, m Message, reason string) {
	n.stats.RequestsFailed++
	if m.Origin == n.cfg.ID { // our own request came back to us
		n.stealFailed(now, m.ID)
		return
	}
	n.send(Message{Kind: KindStealFail, To: m.Origin, Origin: m.Origin, ID: m.ID, Reason: reason})
}

func (n *Node) stealFailed(now time.Time, id uint64) {
	if n.steal == nil || n.steal.id != id {
		return // late answer to a request that already timed out
	}
	n.steal = nil
	n.stats.StealsFailed++
	n.backOff(now)
}

func (n *Node) backOff(now time.Time) {
	if n.backoff == 0 {
		n.backoff = n.cfg.BackoffMin
	} else {
		n.backoff = min(2*n.backoff, n.cfg.BackoffMax)
	}
	wait := n.backoff
	if half := int(n.backoff / 2); half > 0 {
		wait = n.backoff/2 + time.Duration(pick(n.cfg.Rand, half+1))
	}
	n.nextSteal = now.Add(wait)
}

func (n *Node) maybeSteal(now time.Time) {
	if n.steal != nil || !n.hasLocal || len(n.peers) == 0 || now.Before(n.nextSteal) {
		return
	}
	eff := n.effectiveLocal()
	if eff.EffectiveCPUs <= 0 || eff.Availability < n.cfg.StealThreshold {
		return
	}
	target, ok := n.pickPeer(n.cfg.ID, "")
	if !ok {
		return
	}
	n.seq++
	n.steal = &steal{id: n.seq, target: target, sentAt: now}
	n.stats.StealsSent++
	n.send(Message{Kind: KindStealRequest, To: target, Origin: n.cfg.ID, ID: n.seq, TTL: n.cfg.TTL, Profile: &eff})
}

// pickPeer chooses a random neighbour other than origin, preferring one other than avoid.
func (n *Node) pickPeer(origin, avoid string) (string, bool) {
	// Two passes over the sorted list instead of building the candidate lists: this runs
	// for every steal forwarded, and the choice (the k-th eligible peer in sorted order) is
	// the same.
	peers := n.sortedPeers()
	eligible := func(p string, skipAvoid bool) bool {
		return p != origin && p != n.cfg.ID && (!skipAvoid || p != avoid)
	}
	all, pref := 0, 0
	for _, p := range peers {
		if eligible(p, false) {
			all++
			if p != avoid {
				pref++
			}
		}
	}
	skipAvoid, count := pref > 0, all
	if skipAvoid {
		count = pref
	}
	if count == 0 {
		return "", false
	}
	k := pick(n.cfg.Rand, count)
	for _, p := range peers {
		if eligible(p, skipAvoid) {
			if k == 0 {
				return p, true
			}
			k--
		}
	}
	return "", false
}

// effectiveLocal is the sampled profile corrected for migrations in flight: ranks given away
// no longer count (and their CPU is free), ranks promised to us already count (and their
// CPU is booked). Without this a node would give away, or steal, several ranks on the
// strength of one stale sample.
func (n *Node) effectiveLocal() NodeProfile {
	p := n.local
	p.Node = n.cfg.ID
	p.Ranks = nil
	free := p.FreeCPUs()
	for _, r := range n.local.Ranks {
		if o, ok := n.outgoing[r]; ok {
			free += o.cpu
			continue
		}
		p.Ranks = append(p.Ranks, r)
	}
	for _, id := range sortedIDs(n.incoming) {
		if !n.local.Hosts(id) {
			p.Ranks = append(p.Ranks, id)
			free -= n.incoming[id].cpu
		}
	}
	if p.EffectiveCPUs > 0 {
		p.Availability = clamp01(free / p.EffectiveCPUs)
		p.Availability = math.Round(p.Availability*1e9) / 1e9 // keep float noise out of comparisons
	}
	return p
}

// candidates are the local ranks that may be given: listed, not already given, with the
// cooldown clock set to the later of the profile's and our own arrival record.
func (n *Node) candidates() []RankProfile {
	var out []RankProfile
	for _, r := range n.ranks {
		id := r.ID()
		if _, gone := n.outgoing[id]; gone || !n.local.Hosts(id) {
			continue
		}
		if t, ok := n.arrived[id]; ok && t.After(r.LastMigration) {
			r.LastMigration = t
		}
		out = append(out, r)
	}
	return out
}

func (n *Node) expire(now time.Time) {
	for id, p := range n.outgoing {
		if now.Sub(p.at) > n.cfg.PendingTimeout {
			delete(n.outgoing, id)
		}
	}
	for id, p := range n.incoming {
		if now.Sub(p.at) > n.cfg.PendingTimeout {
			delete(n.incoming, id)
		}
	}
	for id, t := range n.arrived {
		if now.Sub(t) > n.cfg.Stability.Cooldown {
			delete(n.arrived, id)
		}
	}
}

func (n *Node) touch(now time.Time, m Message) {
	ps := n.peers[m.From]
	if ps == nil {
		if m.Kind != KindJoin && m.Kind != KindAnnounce && m.Kind != KindHeartbeat {
			// Steal traffic comes from nodes up to TTL hops away; making each of them a
			// neighbour (heartbeated both ways from then on) grew every node's neighbourhood
			// towards the whole grid in a 10,000-node simulation. Membership stays with the
			// membership messages.
			return
		}
		ps = &peerState{}
		n.addPeer(m.From, ps)
	}
	ps.lastSeen = now
	if m.Profile != nil && m.Profile.Node == m.From {
		p := *m.Profile
		if n.loaded(p) && (ps.profile == nil || !n.loaded(*ps.profile)) {
			n.loadChanged(now) // a neighbour just became loaded: it may give work now
		}
		if ps.profile == nil {
			ps.profile = new(NodeProfile)
		}
		*ps.profile = p // in place: a heartbeat per neighbour every interval adds up
	}
}

// loaded reports whether a node with profile p may give work away: it hosts ranks and has
// less spare CPU than the steal threshold.
func (n *Node) loaded(p NodeProfile) bool {
	return len(p.Ranks) > 0 && p.Availability < n.cfg.StealThreshold
}

// loadChanged ends the steal back-off: the back-off is for a network with nothing to give,
// and a load that changed makes earlier failures stale. So a load change is acted on at the
// next Tick after it is sampled and heard of (a sampling period and a heartbeat), not after
// up to BackoffMax.
func (n *Node) loadChanged(now time.Time) {
	n.backoff = 0
	if now.Before(n.nextSteal) {
		n.nextSteal = now
	}
}

func (n *Node) profilePtr() *NodeProfile {
	if !n.hasLocal {
		return nil
	}
	p := n.effectiveLocal()
	return &p
}

func (n *Node) send(m Message) {
	m.From = n.cfg.ID
	n.out.Messages = append(n.out.Messages, m)
}

func sortedIDs(m map[RankID]pending) []RankID {
	out := make([]RankID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Job != out[j].Job {
			return out[i].Job < out[j].Job
		}
		return out[i].Rank < out[j].Rank
	})
	return out
}
