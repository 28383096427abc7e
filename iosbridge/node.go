package iosbridge

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// Cluster names this node's cluster; it travels in the node's profile and CRS (the
	// policy's Protocol, see ProtocolPolicy) steals inside it.
	Cluster string
	// MeasureLatency makes the node time round trips to its neighbours (heartbeats carry a
	// ping ID and are echoed) even when its policy does not need them (NRS does).
	MeasureLatency bool
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
	case len(c.Cluster) > MaxClusterName:
		return fmt.Errorf("iosbridge: node %s: cluster name of %d bytes (at most %d)", c.ID, len(c.Cluster), MaxClusterName)
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
	// Parties, for a rank given in an exchange, are the nodes that give ranks in it, sorted,
	// and Origin the node that asked for it (RequestID is its numbering): the job moves
	// every node's part of one exchange together, all or none, so that full nodes can
	// swap ranks. Empty for a move on its own.
	Origin  string   `msgpack:"origin,omitempty"`
	Parties []string `msgpack:"parties,omitempty"`
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
	// Steals this node started, and how they ended (accepted, failed, timed out: no answer
	// within StealTimeout, or lost with the neighbour it was sent to); a late accept answers
	// a steal that had already timed out.
	StealsSent, StealsAccepted, StealsFailed, StealsTimedOut, LateAccepts uint64
	// Other nodes' requests this node forwarded, answered with a fail, or granted.
	RequestsForwarded, RequestsFailed, RanksGiven uint64
	// CRS's asynchronous wide-area steals, and how many brought a rank.
	WideStealsSent, WideStealsAccepted uint64
	// Steal requests this node sent (its own, wide-area ones, and forwarded ones) to a
	// neighbour of its own cluster and of another cluster (Config.Cluster and the
	// neighbour's profile; not counted while either is unknown), whatever the policy: how
	// much of the stealing stays inside a cluster.
	StealRequestsInCluster, StealRequestsAcross uint64
	// Robin-Hood: balance requests this node sent (one per round, to several neighbours),
	// ranks it pushed, offers it made to others and ranks pushed to it.
	PushRounds, RanksPushed, OffersMade, PushesReceived uint64
	// Exchanges (exchange.go): requests sent while busy, and ranks this node sent away as
	// the offered half of a swap.
	ExchangesSent, RanksSwapped uint64
	// Three-way exchanges: forwarded exchange requests this node added a relay to, ranks
	// it sent away as a relay, and rotations it completed as the third node.
	RelaysOffered, RanksRelayed, RotationsDecided uint64
	// BulkRanks: ranks beyond the first that this node's accepted steals brought
	// (Protocol.Bulk); HintedSteals: steals it sent to a host named by a hint.
	BulkRanks, HintedSteals uint64
	// Exchanges that moved nothing (exchange_commit.go): answers this node refused (a late or
	// mismatched accept, relay accept or relay ready) and holds it released (cancelled or
	// expired).
	ExchangesRefused, ExchangesCancelled uint64
}

// ErrLeft is returned by Step after Leave: the node is no longer part of the network.
var ErrLeft = errors.New("iosbridge: node has left the network")

type peerState struct {
	lastSeen time.Time
	profile  *NodeProfile
	// The last ping sent (heartbeat ID) and the smoothed round trip of the answered ones.
	pingID     uint64
	pingAt     time.Time
	rtt        time.Duration
	rttSamples int
	// recent holds the last rttWindow round trips (a ring, next at recentAt), whose
	// minimum is the base round trip NRS classifies.
	recent   [rttWindow]time.Duration
	recentAt int
	// The hint lists of its last heartbeat (Protocol.Hints), read-only.
	best, hosts []Hint
	// bw is the smoothed bandwidth of the bulk transfers measured from this neighbour
	// (ObserveTransfer); bw.Samples 0: none yet. told is the one the neighbour measured
	// from this node, as its last heartbeat said (0: none).
	bw   LinkProfile
	told float64
}

// rttWindow is how many recent round trips the base round trip is the minimum of: with the
// default 2 s heartbeats, the last 16 s.
const rttWindow = 8

// baseRTT is the minimum of the recent round trips; 0 if none.
func (ps *peerState) baseRTT() time.Duration {
	var m time.Duration
	for i, d := range ps.recent[:min(ps.rttSamples, rttWindow)] {
		if i == 0 || d < m {
			m = d
		}
	}
	return m
}

type pending struct {
	peer string
	at   time.Time
	cpu  float64
	// origin and id are the request the rank is given for (origin's numbering; 0 for a
	// push): a giver whose migration PCM failed names it to peer (MigrationFailed).
	origin string
	id     uint64
}

// sentSteal is a steal request of this node's, sent to neighbour to at at.
type sentSteal struct {
	at time.Time
	to string
}

// notComing is a rank node from said it would not send for request id, told at at.
type notComing struct {
	from string
	id   uint64
	at   time.Time
}

type steal struct {
	id     uint64
	target string
	sentAt time.Time
	locale Locale // NRS: the locale it travels in
	offer  RankID // the rank offered to swap (exchange requests); zero if none
	// partner is offered with offer for a pair swap; zero if none
	partner RankID
	// ranks: this node's ranks when it offered; an exchange is committed only on them
	ranks []RankID
}

// relayHold is the rank this node put into a forwarded exchange request as a relay: held for
// Origin's request ID until the relay accept comes or StealTimeout passes.
type relayHold struct {
	origin      string
	id          uint64
	rank, offer RankID
	at          time.Time
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
	proto  Protocol

	left  bool
	peers map[string]*peerState
	// peerNames caches the sorted keys of peers (nil when stale): Tick and every forwarded
	// steal walk them in order, and re-sorting per message dominated a 10,000-node simulation.
	peerNames  []string
	peerStates []*peerState // peers[peerNames[i]], cached with peerNames
	local      NodeProfile
	hasLocal   bool
	ranks      []RankProfile

	outgoing map[RankID]pending // given away, still listed locally until PCM finishes
	incoming map[RankID]pending // promised to us, not yet listed locally
	arrived  map[RankID]time.Time

	steal *steal
	wide  *steal // CRS: the one asynchronous wide-area steal
	// unanswered: this node's steals that may still bring a rank it does not know of yet,
	// kept until their accept or fail comes, PendingTimeout passes, or the neighbour they
	// were sent to is found gone since before they were sent (peerGone; exchange_commit.go:
	// no exchange is judged while one is).
	unanswered map[uint64]sentSteal
	// notComing: ranks whose giver said their migration failed (KindMigrationFailed) before
	// their accept came, kept for PendingTimeout: the accept then books nothing.
	notComing     map[RankID]notComing
	locale        Locale // NRS: the locale of the next steal
	seq           uint64
	backoff       time.Duration
	nextSteal     time.Time
	lastHeartbeat time.Time
	// quietUntil: no neighbour can have been silent for PeerTimeout before this (the
	// oldest lastSeen at the last scan + PeerTimeout; lastSeen only grows), so Tick skips
	// the scan until then: it walked every neighbour twice a second, the largest cost of a
	// 10,000-node simulation.
	quietUntil  time.Time
	push        *steal // Robin-Hood: the balance request waiting for an offer
	relay       *relayHold
	holds       []*exchangeHold // promises of exchanges, kept until what comes back arrived
	pushBackoff time.Duration
	nextPush    time.Time
	pingSeq     uint64
	// accepted is the last steal of ours answered with a rank: more ranks may follow for it
	// (Protocol.Bulk). best and hosts are this node's hint lists (hints.go).
	accepted    uint64
	best, hosts []Hint

	out   Ready
	stats Stats
}

// NewNode validates cfg, fills defaults and returns a node with no peers and no profile.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	proto := protocolOf(cfg.Policy)
	proto.Ping = proto.Ping || cfg.MeasureLatency
	if proto.Push && proto.PushFanout < 1 {
		proto.PushFanout = 1
	}
	return &Node{
		cfg:        cfg,
		proto:      proto,
		locale:     LocaleLocal,
		policy:     Stabilize(PerRank(cfg.Policy), cfg.Stability),
		peers:      map[string]*peerState{},
		outgoing:   map[RankID]pending{},
		incoming:   map[RankID]pending{},
		arrived:    map[RankID]time.Time{},
		unanswered: map[uint64]sentSteal{},
		notComing:  map[RankID]notComing{},
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
		n.peerStates = make([]*peerState, len(n.peerNames))
		for i, p := range n.peerNames {
			n.peerStates[i] = n.peers[p]
		}
	}
	return n.peerNames
}

// sortedPeerStates is the states of sortedPeers, in the same order: the walks over every
// neighbour's state (hints at each heartbeat) without a map lookup each.
func (n *Node) sortedPeerStates() []*peerState {
	n.sortedPeers()
	return n.peerStates
}

func (n *Node) addPeer(name string, ps *peerState) {
	n.peers[name] = ps
	n.peerNames = nil
}

func (n *Node) dropPeer(name string) {
	delete(n.peers, name)
	n.peerNames = nil
}

// peerGone drops neighbour name, found silent for PeerTimeout or leaving, and forgets the
// steals of this node's that were lost with it: those sent to it after the last message
// heard from it. The failure detector's verdict is that it has been gone since then, so
// such a request reached no node that answers, and no rank comes for it. Without this a
// request lost to a dead neighbour kept the node out of every exchange for PendingTimeout
// (exchange_commit.go) and its steal outstanding for StealTimeout. A request sent before
// that was received while the neighbour lived: it keeps its bound, as any other.
//
// The verdict can be wrong: a neighbour frozen, or whose heartbeats alone were lost, may
// have forwarded the request to a node that gives a rank. Its accept then comes as a late
// one and books the rank; only if that accept is lost too does a rank arrive that this
// node did not count (as if its Update had been late).
func (n *Node) peerGone(now time.Time, name string) {
	ps := n.peers[name]
	if ps == nil {
		return
	}
	for id, u := range n.unanswered {
		if u.to == name && !u.at.Before(ps.lastSeen) {
			delete(n.unanswered, id)
			switch {
			case n.steal != nil && n.steal.id == id:
				n.stats.StealsTimedOut++
				n.stealEnded(now, id, true)
			case n.wide != nil && n.wide.id == id:
				n.wide = nil
			}
		}
	}
	n.dropPeer(name)
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

// Latency is the smoothed round trip time to a neighbour, from the pings of its heartbeats
// (Protocol.Ping or Config.MeasureLatency); ok is false until one was answered.
func (n *Node) Latency(peer string) (rtt time.Duration, ok bool) {
	ps := n.peers[peer]
	if ps == nil || ps.rttSamples == 0 {
		return 0, false
	}
	return ps.rtt, true
}

// BaseLatency is the base round trip time to a neighbour: the minimum of its last
// rttWindow measured round trips; ok is false until one was answered.
//
// A ping's echo here is a message to the neighbour's agent and back, so the time includes
// how long each agent took to handle it, which on a node whose CPU its ranks (or another
// user) take can be tens of milliseconds, much more than the network's share. The IO
// paper's ping times measure the network; such host delays only ever add to it, so the
// least of several recent round trips estimates the network's (as LEDBAT's base delay,
// RFC 6817, and BBR's minimum round trip do), while a few samples of a window still
// follow a change of the network within it.
func (n *Node) BaseLatency(peer string) (rtt time.Duration, ok bool) {
	ps := n.peers[peer]
	if ps == nil || ps.rttSamples == 0 {
		return 0, false
	}
	return ps.baseRTT(), true
}

// linkTo is the measured path to a neighbour for DecisionInput.Link: its base round trip
// (BaseLatency) as Latency and, as BandwidthBps, the bandwidth of the bulk transfers the
// neighbour received from this node (its heartbeats tell it: the direction a migration
// to it takes), else of those received from it (ObserveTransfer), 0 until one of them was
// measured; nil until a round trip or a bandwidth was, or when peer is no neighbour (a
// forwarded request's origin).
func (n *Node) linkTo(peer string) *LinkProfile {
	ps := n.peers[peer]
	if ps == nil || ps.rttSamples == 0 && ps.bw.Samples == 0 && ps.told == 0 {
		return nil
	}
	l := &LinkProfile{From: n.cfg.ID, To: peer, BandwidthBps: ps.bw.BandwidthBps, Samples: ps.rttSamples + ps.bw.Samples, MeasuredAt: ps.lastSeen}
	if ps.told > 0 {
		l.BandwidthBps = ps.told
		l.Samples++
	}
	if ps.rttSamples > 0 {
		l.Latency = ps.baseRTT()
	}
	if ps.bw.MeasuredAt.After(l.MeasuredAt) {
		l.MeasuredAt = ps.bw.MeasuredAt
	}
	return l
}

// Bounds of ObserveTransfer. A transfer below MinTransferBytes is over before TCP's window
// has grown, so its rate says more about the round trip than the bandwidth (a 32 KB halo in
// one window on a 1 ms link would read as 32 MB/s whatever the link); MinTransferTime
// leaves out a transfer the receiver's socket buffers took in before it was timed. Both
// let a few-MB transfer between processes of one machine (a test's nodes) count, whose
// rate is the memory's. MaxBandwidthBps (100 GB/s, above any NIC a node has) bounds what a
// caller passes on from the network.
const (
	MinTransferBytes = 256 << 10
	MinTransferTime  = 100 * time.Microsecond
	MaxBandwidthBps  = 100e9
)

// ErrTransferTooSmall is returned by ObserveTransfer for a transfer too small or short to
// measure a bandwidth with (MinTransferBytes, MinTransferTime): it is left out, not an error
// of the caller's.
var ErrTransferTooSmall = errors.New("iosbridge: transfer too small to measure a bandwidth")

// ObserveTransfer folds a bulk transfer of bytes received from neighbour peer, which took d
// from its connection to its last byte, into the bandwidth of the link to peer (an EWMA,
// DefaultLinkAlpha), which DecisionInput.Link carries to the policy: ATS-RAS prices the
// messages a move makes cross with it (ATSRASNetworkPerMessage) and MPI-IOS a migration's
// state. Every heartbeat to peer tells it the bandwidth measured from it, the direction its
// migrations here take, and peer prices its link to this node with that; a node told
// nothing by peer uses its own measurement from peer for both directions, and until
// neither was measured the policies use MPI-IOS's default bandwidth
// (MPIIOSConfig.DefaultBandwidthBps).
//
// pcmd measures the buddy copies of checkpoint pieces its pieceserver receives, the
// simulator (iossim) the migrations a node receives. A peer that is no neighbour is ignored
// (its link prices nothing), as is a transfer too small to measure (ErrTransferTooSmall);
// non-positive sizes or durations, or a rate above MaxBandwidthBps, are refused.
func (n *Node) ObserveTransfer(now time.Time, peer string, bytes int64, d time.Duration) error {
	if bytes <= 0 || d <= 0 {
		return fmt.Errorf("iosbridge: transfer from %.64q: need positive bytes and duration, got %d in %v", peer, bytes, d)
	}
	if bw := float64(bytes) / d.Seconds(); bw > MaxBandwidthBps {
		return fmt.Errorf("iosbridge: transfer from %.64q: %d bytes in %v is %.3g B/s, above %.3g", peer, bytes, d, bw, MaxBandwidthBps)
	}
	if bytes < MinTransferBytes || d < MinTransferTime {
		return ErrTransferTooSmall
	}
	ps := n.peers[peer]
	if ps == nil || peer == n.cfg.ID {
		return nil
	}
	ps.bw.From, ps.bw.To = n.cfg.ID, peer
	return ps.bw.Observe(bytes, d, now, DefaultLinkAlpha)
}

// Bandwidth is the smoothed bandwidth of the bulk transfers measured from a neighbour
// (ObserveTransfer), in bytes per second, and how many were; ok is false until one was.
func (n *Node) Bandwidth(peer string) (bps float64, samples int, ok bool) {
	ps := n.peers[peer]
	if ps == nil || ps.bw.Samples == 0 {
		return 0, 0, false
	}
	return ps.bw.BandwidthBps, ps.bw.Samples, true
}

// LocaleOf is the NRS locale of a neighbour, from its base round trip time (BaseLatency).
func (n *Node) LocaleOf(peer string) Locale {
	if rtt, ok := n.BaseLatency(peer); ok {
		return NRSLocale(rtt)
	}
	return LocaleUnknown
}

// clusterOf is a neighbour's cluster as its last profile says; ok is false if none came.
func (n *Node) clusterOf(peer string) (string, bool) {
	ps := n.peers[peer]
	if ps == nil || ps.profile == nil {
		return "", false
	}
	return ps.profile.Cluster, true
}

// rttAlpha is the weight of a new round trip in the smoothed one: as for TCP's SRTT.
const rttAlpha = 0.125

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
	n.settleHolds(now)
	n.expire(now)
	return nil
}

// MigrationFailed tells the node that PCM could not move rank, so it becomes a candidate
// again instead of staying booked for PendingTimeout. The node it was given to is told
// (KindMigrationFailed) and stops counting it as coming.
func (n *Node) MigrationFailed(rank RankID) {
	p, ok := n.outgoing[rank]
	delete(n.outgoing, rank)
	if ok && !n.left {
		n.send(Message{Kind: KindMigrationFailed, To: p.peer, Origin: p.origin, ID: p.id, Rank: rank})
	}
}

// onMigrationFailed: the node that gave Rank says it will not come. Only a booking of that
// node's for that request is dropped. The accept of a steal still unanswered (lost, or
// overtaken by this message) books nothing when it comes, and no rank comes for the steal
// (one rank per request unless the policy gives in bulk).
func (n *Node) onMigrationFailed(now time.Time, m Message) {
	_, asked := n.unanswered[m.ID]
	mine := asked && m.Origin == n.cfg.ID && m.ID != 0
	if p, ok := n.incoming[m.Rank]; ok && p.peer == m.From && p.origin == m.Origin && p.id == m.ID {
		if h := n.holdFor(m.Origin, m.ID); h != nil && slices.Contains(h.want, m.Rank) {
			n.abandon(h) // the exchange can no longer be made whole: nothing of ours moves
		}
		delete(n.incoming, m.Rank)
	} else if mine && len(n.notComing) < maxNotComing {
		n.notComing[m.Rank] = notComing{from: m.From, id: m.ID, at: now}
	}
	if mine && !n.proto.Bulk {
		delete(n.unanswered, m.ID)
	}
}

// maxNotComing bounds Node.notComing, which a peer could otherwise fill with the ranks of a
// bulk steal's request.
const maxNotComing = 64

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
	if now.After(n.quietUntil) {
		var silent []string
		oldest := now
		states := n.sortedPeerStates()
		for i, p := range n.sortedPeers() {
			seen := states[i].lastSeen
			if now.Sub(seen) > n.cfg.PeerTimeout {
				silent = append(silent, p)
			} else if seen.Before(oldest) {
				oldest = seen
			}
		}
		for _, p := range silent {
			n.peerGone(now, p)
		}
		n.quietUntil = oldest.Add(n.cfg.PeerTimeout)
	}
	n.expire(now)
	if len(n.peers) > 0 && now.Sub(n.lastHeartbeat) >= n.cfg.HeartbeatInterval {
		n.lastHeartbeat = now
		prof := n.profilePtr() // one snapshot for all: nothing changes between the sends
		if n.proto.Hints > 0 && n.hasLocal {
			n.refreshHints(now)
		}
		for _, p := range n.sortedPeers() {
			m := Message{Kind: KindHeartbeat, To: p, Profile: prof, Best: n.best, Hosts: n.hosts, Bandwidth: n.peers[p].bw.BandwidthBps}
			if n.proto.Ping {
				// The heartbeat is the ping: its echo times the round trip. An unanswered
				// ping is replaced by the next one.
				n.pingSeq++
				ps := n.peers[p]
				ps.pingID, ps.pingAt, m.ID = n.pingSeq, now, n.pingSeq
			}
			n.send(m)
		}
	}
	if n.steal != nil && now.Sub(n.steal.sentAt) >= n.cfg.StealTimeout {
		n.stats.StealsTimedOut++
		n.stealEnded(now, n.steal.id, true)
	}
	if n.wide != nil && now.Sub(n.wide.sentAt) >= n.cfg.StealTimeout {
		n.wide = nil // Satin resets the flag when the answer comes; a lost one must not block
	}
	if n.push != nil && now.Sub(n.push.sentAt) >= n.cfg.StealTimeout {
		n.push = nil
		n.pushBackoff = n.nextBackoff(n.pushBackoff)
		n.nextPush = now.Add(n.jitter(n.pushBackoff))
	}
	n.maybeSteal(now)
	n.maybePush(now)
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
		n.peerGone(now, m.From)
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
		if m.ID != 0 {
			n.send(Message{Kind: KindPong, To: m.From, ID: m.ID})
		}
	case KindPong:
		if ps := n.peers[m.From]; ps != nil && ps.pingID == m.ID && !now.Before(ps.pingAt) {
			rtt := now.Sub(ps.pingAt)
			if ps.rttSamples == 0 {
				ps.rtt = rtt
			} else {
				ps.rtt = time.Duration(rttAlpha*float64(rtt) + (1-rttAlpha)*float64(ps.rtt))
			}
			ps.recent[ps.recentAt] = rtt
			ps.recentAt = (ps.recentAt + 1) % rttWindow
			ps.rttSamples++
			ps.pingID = 0
		}
	case KindStealRequest:
		n.onStealRequest(now, m)
	case KindStealAccept:
		// An exchange's accept is refused unless it answers the steal outstanding with its
		// offer: then nothing comes either (exchange_commit.go).
		if !n.proto.Bulk {
			delete(n.unanswered, m.ID) // under Bulk more ranks may follow: kept until it expires
		}
		if nc, ok := n.notComing[m.Rank]; ok && nc.from == m.From && nc.id == m.ID && m.Swap == (RankID{}) {
			delete(n.notComing, m.Rank) // its migration failed already: nothing comes
		} else if m.Swap == (RankID{}) || n.swapOut(now, m) {
			n.incoming[m.Rank] = pending{peer: m.From, at: now, cpu: m.CPUUse, origin: m.Origin, id: m.ID}
			if m.Pair != (RankID{}) {
				n.incoming[m.Pair] = pending{peer: m.From, at: now, cpu: m.CPUUse, origin: m.Origin, id: m.ID} // alike: the pair swap kept the CPU balance
			}
		}
		switch {
		case m.ID == 0:
			n.stats.PushesReceived++ // Robin-Hood: pushed to us after our offer
		case n.steal != nil && n.steal.id == m.ID:
			n.accepted = m.ID
			n.steal = nil
			n.backoff = 0
			n.locale = LocaleLocal
			n.nextSteal = now
			n.stats.StealsAccepted++
		case n.wide != nil && n.wide.id == m.ID:
			n.wide = nil
			n.stats.WideStealsAccepted++
		case m.ID == n.accepted:
			n.stats.BulkRanks++ // another rank for the steal just accepted
		default:
			n.stats.LateAccepts++ // the rank comes anyway; it is booked above
		}
	case KindStealFail:
		delete(n.unanswered, m.ID) // the request went no further: no rank comes for it
		n.stealFailed(now, m.ID)
	case KindRelayAccept:
		n.onRelayAccept(now, m)
	case KindRelayReady:
		n.onRelayReady(now, m)
	case KindExchangeCancel:
		n.onExchangeCancel(m)
	case KindExchangeCommit:
		n.onExchangeCommit(now, m)
	case KindMigrationFailed:
		n.onMigrationFailed(now, m)
	case KindBalanceRequest:
		n.onBalanceRequest(m)
	case KindBalanceOffer:
		n.onBalanceOffer(now, m)
	}
	return nil
}

// onBalanceRequest answers Robin-Hood's request (seed 001 §5.4.2 step 2): "B checks if
// load(B, T) < UT and rank(B) ≥ RB × rank(A); if true, then B sends a response to A". UT is
// this node's steal threshold (underloaded = it would steal), RB the pusher's policy's,
// applied by the pusher again when it decides.
func (n *Node) onBalanceRequest(m Message) {
	if !n.hasLocal {
		return
	}
	eff := n.effectiveLocal()
	if eff.EffectiveCPUs <= 0 || eff.Availability < n.cfg.StealThreshold || eff.full() {
		return // not underloaded (or no room): silence, as in the paper (the pusher takes the first answer)
	}
	if NodeRank(eff) < n.proto.PushRank*NodeRank(*m.Profile) {
		return // rank(B) < RB × rank(A)
	}
	n.stats.OffersMade++
	n.send(Message{Kind: KindBalanceOffer, To: m.From, Origin: m.From, ID: m.ID, Profile: &eff})
}

// onBalanceOffer is Robin-Hood's step 3: "when A receives the first response (from B), it
// migrates an active object to B. Further responses for the same balance request can be
// discarded." The policy decides which rank (and may still decline, e.g. in cooldown).
func (n *Node) onBalanceOffer(now time.Time, m Message) {
	if n.push == nil || n.push.id != m.ID {
		return // a later offer for a request already served
	}
	in := DecisionInput{Local: n.effectiveLocal(), Ranks: n.candidates(), Remote: *m.Profile, Link: n.linkTo(m.Profile.Node), Now: now, Rand: n.cfg.Rand}
	d := n.policy.Decide(in)
	n.out.Decisions = append(n.out.Decisions, DecisionRecord{At: now, Origin: m.From, From: m.From,
		RequestID: m.ID, Candidates: len(in.Ranks), Decision: d})
	if !d.Migrate {
		return // wait for another offer or the timeout
	}
	n.push = nil
	n.pushBackoff = 0
	n.stats.RanksPushed++
	n.give(now, m.From, 0, d, in)
}

// maybePush is Robin-Hood's step 1: "if a processor A is overloaded, it sends a balance
// request and the value of rank(A) to a subset of n of its acquaintances".
func (n *Node) maybePush(now time.Time) {
	if !n.proto.Push || n.push != nil || !n.hasLocal || len(n.peers) == 0 || now.Before(n.nextPush) {
		return
	}
	eff := n.effectiveLocal()
	if len(eff.Ranks) == 0 || eff.Availability > n.proto.overload() || len(n.candidates()) == 0 {
		return
	}
	var sent []string
	if n.proto.Hints > 0 {
		// One of the best underloaded nodes known first: its objects then go straight to
		// where the Sheriff would gather them (it answers only if rank(B) ≥ RB × rank(A)).
		if b, ok := n.hinted(n.best, func(float64) bool { return true }); ok {
			sent = append(sent, b)
		}
	}
	for len(sent) < n.proto.PushFanout {
		p, ok := n.pickPeer(n.cfg.ID, "", func(p string) bool { return !slices.Contains(sent, p) })
		if !ok {
			break
		}
		sent = append(sent, p)
	}
	if len(sent) == 0 {
		return
	}
	n.seq++
	n.push = &steal{id: n.seq, target: sent[0], sentAt: now}
	n.stats.PushRounds++
	for _, p := range sent {
		n.send(Message{Kind: KindBalanceRequest, To: p, Origin: n.cfg.ID, ID: n.seq, Profile: &eff})
	}
}

// ranked narrows the choice of the next hop of a steal by stealer (Protocol.Ranked) to the
// neighbours in scope whose last profile shows ranks and a lower NodeRank, if there is any;
// otherwise it leaves scope as it is.
func (n *Node) ranked(stealer NodeProfile, scope func(string) bool) func(string) bool {
	if !n.proto.Ranked {
		return scope
	}
	r := NodeRank(stealer)
	better := func(p string) bool {
		ps := n.peers[p]
		return (scope == nil || scope(p)) && ps != nil && ps.profile != nil && len(ps.profile.Ranks) > 0 && NodeRank(*ps.profile) < r
	}
	for _, p := range n.sortedPeers() {
		if p != stealer.Node && better(p) {
			return better
		}
	}
	return scope
}

// inScope says whether a neighbour may receive the steal request m: inside its NRS locale
// and its CRS cluster, when it names them.
//
// NRS: "random steal packets specify which locale they are to travel" — the locale as the
// origin sees it. The origin sends the packet to a peer in that locale; a node forwarding
// it sends it on to its own local peers, which are as far from the origin as it is (up to
// a local round trip), so the packet explores the area it reached. Forwarding to the
// forwarder's peers in the packet's locale instead would send a regional packet from one
// cluster to a node of the other and straight back into the first, to the origin's local
// peers, outside its locale, crossing the wide-area link at every hop.
func (n *Node) inScope(m Message) func(string) bool {
	if m.Locale == 0 && !m.InCluster {
		return nil
	}
	want := m.Locale
	if m.Origin != n.cfg.ID {
		want = LocaleLocal
	}
	return func(p string) bool {
		if m.Locale != 0 && n.LocaleOf(p) != want {
			return false
		}
		if m.InCluster {
			c, ok := n.clusterOf(p)
			return ok && c == m.Cluster
		}
		return true
	}
}

func (n *Node) onStealRequest(now time.Time, m Message) {
	if m.Origin != n.cfg.ID {
		in := DecisionInput{Local: n.effectiveLocal(), Ranks: n.candidates(), Remote: *m.Profile, Link: n.linkTo(m.Profile.Node), Now: now, Rand: n.cfg.Rand,
			Exchange: m.Exchange, Offer: m.Offer, Relay: m.Relay, RelayNode: m.RelayProfile, OfferPartner: m.OfferPartner, Best: n.best}
		if n.inExchange() || n.unsure() {
			// One exchange at a time, judged on a placement this node knows (exchange_commit.go).
			in.Offer, in.Relay, in.RelayNode, in.OfferPartner = nil, nil, nil, nil
		}
		d := n.policy.Decide(in)
		n.out.Decisions = append(n.out.Decisions, DecisionRecord{At: now, Origin: m.Origin, From: m.From,
			RequestID: m.ID, Candidates: len(in.Ranks), Decision: d})
		if d.Migrate {
			if d.Swap != (RankID{}) && (m.Offer == nil || m.Offer.ID() != d.Swap) {
				d.Swap = RankID{} // only the offered rank can come back
			}
			relayed := d.Relay != (RankID{}) && d.Swap != (RankID{}) && m.Relay != nil && m.Relay.ID() == d.Relay && m.RelayProfile.Node == d.RelayNode
			if d.Relay != (RankID{}) && !relayed {
				return // a rotation that does not match the request: give nothing
			}
			paired := d.Pair != (RankID{}) && d.Swap != (RankID{}) && m.OfferPartner != nil && m.OfferPartner.ID() == d.SwapPair
			if (d.Pair != (RankID{}) || d.SwapPair != (RankID{})) && !paired {
				return // a pair swap that does not match the request: give nothing
			}
			if d.Swap != (RankID{}) {
				n.promiseExchange(now, m, d, in, relayed, paired) // all or nothing: exchange_commit.go
				return
			}
			n.give(now, m.Origin, m.ID, d, in)
			if n.proto.Bulk {
				n.giveMore(now, m, d, in)
			}
			return
		}
		m.Reason = d.Reason
	}
	if m.TTL == 0 {
		n.failSteal(now, m, "TTL exhausted: "+m.Reason)
		return
	}
	target, ok := n.pickPeer(m.Origin, m.From, n.ranked(*m.Profile, n.inScope(m)))
	if !ok {
		n.failSteal(now, m, "no peer to forward to")
		return
	}
	fwd := m
	prof := *m.Profile // do not alias the caller's decoded message
	prof.Ranks = append([]RankID(nil), prof.Ranks...)
	fwd.Profile = &prof
	fwd.From, fwd.To, fwd.TTL, fwd.Reason = n.cfg.ID, target, m.TTL-1, ""
	if m.Origin != n.cfg.ID && m.Exchange {
		eff := n.effectiveLocal()
		if b := n.relayFor(now, m, eff); b != nil {
			fwd.Relay, fwd.RelayProfile = b, &eff
			n.relay = &relayHold{origin: m.Origin, id: m.ID, rank: b.ID(), offer: m.Offer.ID(), at: now}
			n.stats.RelaysOffered++
		}
	}
	n.stats.RequestsForwarded++
	n.send(fwd)
}

// giveMore answers the steal request m, already granted rank d.Rank, with more ranks while
// the policy wants to give them to a stealer whose profile counts the ranks given so far
// (Protocol.Bulk): a node of high rank fills up to its capacity in one steal instead of one
// rank per cooldown.
func (n *Node) giveMore(now time.Time, m Message, d Decision, in DecisionInput) {
	remote := *m.Profile
	remote.Ranks = append([]RankID(nil), remote.Ranks...)
	// What each rank will want, from what it uses in the crowd it was sampled in: as ranks
	// leave, this node looks less crowded, and their sampled use would pass for their demand.
	demand := map[RankID]float64{}
	for _, r := range in.Ranks {
		demand[r.ID()] = rankDemand(r, in.Local)
	}
	for d.Migrate {
		if remote.EffectiveCPUs > 0 {
			remote.Availability = clamp01(remote.Availability - demand[d.Rank]/remote.EffectiveCPUs)
		}
		remote.Ranks = append(remote.Ranks, d.Rank)
		in = DecisionInput{Local: n.effectiveLocal(), Ranks: n.candidates(), Remote: remote, Link: n.linkTo(remote.Node), Now: now, Rand: n.cfg.Rand, Best: n.best}
		if len(in.Ranks) == 0 {
			return
		}
		for i, r := range in.Ranks {
			if u, ok := demand[r.ID()]; ok {
				in.Ranks[i].CPUUse = u
			}
		}
		d = n.policy.Decide(in)
		n.out.Decisions = append(n.out.Decisions, DecisionRecord{At: now, Origin: m.Origin, From: m.From,
			RequestID: m.ID, Candidates: len(in.Ranks), Decision: d})
		if d.Migrate {
			d = Decision{Migrate: true, Rank: d.Rank, Gain: d.Gain, Policy: d.Policy, Reason: d.Reason} // plain gives only
			n.give(now, m.Origin, m.ID, d, in)
		}
	}
}

// rankCPU is what local rank id uses, 0 if it has no profile here.
func (n *Node) rankCPU(id RankID) float64 {
	for _, r := range n.ranks {
		if r.ID() == id {
			return r.cpuUse(n.local)
		}
	}
	return 0
}

// give books rank d.Rank as leaving for node to, tells to (a steal accept answering its
// request id; id 0 for a push) and orders the migration.
func (n *Node) give(now time.Time, to string, id uint64, d Decision, in DecisionInput) {
	cpu, book := 0.0, 0.0
	for _, r := range in.Ranks {
		if r.ID() == d.Rank {
			cpu, book = r.cpuUse(in.Local), r.cpuUse(in.Local)
			if n.proto.Bulk {
				book = rankDemand(r, in.Local)
			}
		}
	}
	n.outgoing[d.Rank] = pending{peer: to, at: now, cpu: cpu, origin: to, id: id}
	n.stats.RanksGiven++
	n.send(Message{Kind: KindStealAccept, To: to, Origin: to, ID: id, Rank: d.Rank, CPUUse: book, Gain: d.Gain, Reason: d.Reason, Swap: d.Swap, SwapTo: d.RelayNode,
		Pair: d.Pair, SwapPair: d.SwapPair})
	n.out.Migrations = append(n.out.Migrations, Migration{Rank: d.Rank, To: to, RequestID: id, Gain: d.Gain, Policy: d.Policy, Reason: d.Reason, At: now})
	if d.Pair != (RankID{}) {
		n.outgoing[d.Pair] = pending{peer: to, at: now, cpu: n.rankCPU(d.Pair), origin: to, id: id}
		n.stats.RanksGiven++
		n.out.Migrations = append(n.out.Migrations, Migration{Rank: d.Pair, To: to, RequestID: id, Gain: d.Gain, Policy: d.Policy, Reason: d.Reason, At: now})
	}
}

func (n *Node) failSteal(now time.Time, m Message, reason string) {
	n.stats.RequestsFailed++
	if m.Origin == n.cfg.ID { // our own request came back to us
		delete(n.unanswered, m.ID)
		n.stealFailed(now, m.ID)
		return
	}
	n.send(Message{Kind: KindStealFail, To: m.Origin, Origin: m.Origin, ID: m.ID, Reason: reason})
}

func (n *Node) stealFailed(now time.Time, id uint64) { n.stealEnded(now, id, false) }

// stealEnded ends steal id without a rank: it failed, or timed out.
func (n *Node) stealEnded(now time.Time, id uint64, timedOut bool) {
	if n.wide != nil && n.wide.id == id {
		n.wide = nil // CRS: the flag is reset; the next idle tick may send another
		return
	}
	if n.steal == nil || n.steal.id != id {
		return // late answer to a request that already timed out
	}
	failed := n.steal
	n.steal = nil
	if !timedOut {
		n.stats.StealsFailed++
	}
	if n.proto.Steal == ScopeLocales {
		// NRS: "if a local random steal packet fails ..., the theater will then attempt a
		// regional random steal, and so on"; after the farthest locale, back off.
		if next, ok := n.nextLocale(failed.locale + 1); ok {
			n.locale = next
			return
		}
		n.locale = LocaleLocal
	}
	n.backOff(now)
}

// nextLocale is the nearest locale from l on that has a neighbour to steal from.
func (n *Node) nextLocale(l Locale) (Locale, bool) {
	for ; l <= LocaleUnknown; l++ {
		for _, p := range n.sortedPeers() {
			if n.LocaleOf(p) == l {
				return l, true
			}
		}
	}
	return 0, false
}

func (n *Node) backOff(now time.Time) {
	n.backoff = n.nextBackoff(n.backoff)
	n.nextSteal = now.Add(n.jitter(n.backoff))
}

// nextBackoff doubles b, from BackoffMin up to BackoffMax.
func (n *Node) nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return n.cfg.BackoffMin
	}
	return min(2*b, n.cfg.BackoffMax)
}

// jitter is a random wait in [b/2, b].
func (n *Node) jitter(b time.Duration) time.Duration {
	if half := int(b / 2); half > 0 {
		return b/2 + time.Duration(pick(n.cfg.Rand, half+1))
	}
	return b
}

func (n *Node) maybeSteal(now time.Time) {
	if n.proto.Steal == ScopeNone || n.steal != nil || !n.hasLocal || len(n.peers) == 0 || now.Before(n.nextSteal) {
		return
	}
	eff := n.effectiveLocal()
	if eff.EffectiveCPUs <= 0 {
		return
	}
	busy := eff.Availability < n.cfg.StealThreshold
	// A steal of ours still unanswered may bring a rank our profile does not list, on which
	// no exchange may be judged (exchange_commit.go).
	exchange := n.exchanges() && !n.unsure()
	if busy && (!exchange || !n.crossTraffic(eff)) {
		return
	}
	if eff.full() && (!exchange || !n.crossTraffic(eff)) {
		return // no room for a stolen rank, and no swap to offer
	}
	req := Message{Kind: KindStealRequest, Origin: n.cfg.ID, TTL: n.cfg.TTL, Profile: &eff, Exchange: exchange}
	if exchange && !n.inExchange() {
		req.Offer = n.exchangeOffer(now, eff)
		req.OfferPartner = n.exchangePartner(now, eff, req.Offer)
	}
	switch n.proto.Steal {
	case ScopeLocales:
		l, ok := n.nextLocale(n.locale)
		if !ok {
			return
		}
		n.locale, req.Locale = l, l
	case ScopeClusters:
		if n.wide == nil {
			n.stealWide(now, req)
		}
		req.InCluster, req.Cluster = true, n.cfg.Cluster
	}
	target, hinted := "", false
	if n.proto.Hints > 0 && req.Locale == 0 && !req.InCluster {
		// Straight to a lower-ranked host a hint names, near or far (hints.go).
		r := NodeRank(eff)
		target, hinted = n.hinted(n.hosts, func(h float64) bool { return h < r })
	}
	ok := hinted
	if !hinted {
		target, ok = n.pickPeer(n.cfg.ID, "", n.ranked(eff, n.inScope(req)))
	}
	if !ok {
		return
	}
	if hinted {
		n.stats.HintedSteals++
	}
	n.seq++
	n.unanswered[n.seq] = sentSteal{at: now, to: target}
	n.steal = &steal{id: n.seq, target: target, sentAt: now, locale: req.Locale}
	if req.Offer != nil {
		n.steal.offer, n.steal.ranks = req.Offer.ID(), eff.Ranks
	}
	if req.OfferPartner != nil {
		n.steal.partner = req.OfferPartner.ID()
	}
	if busy {
		n.stats.ExchangesSent++
	}
	n.stats.StealsSent++
	req.To, req.ID = target, n.seq
	n.send(req)
}

// stealWide is CRS's wide-area steal (seed 002): "whenever a node becomes idle, it first
// attempts to steal from a node in a remote cluster. This wide-area steal request is sent
// asynchronously": to a random neighbour of another cluster, forwarded only inside that one.
func (n *Node) stealWide(now time.Time, req Message) {
	target, ok := n.pickPeer(n.cfg.ID, "", func(p string) bool {
		c, known := n.clusterOf(p)
		return known && c != n.cfg.Cluster
	})
	if !ok {
		return
	}
	c, _ := n.clusterOf(target)
	n.seq++
	n.unanswered[n.seq] = sentSteal{at: now, to: target}
	n.wide = &steal{id: n.seq, target: target, sentAt: now}
	n.stats.WideStealsSent++
	req.To, req.ID, req.InCluster, req.Cluster, req.Wide = target, n.seq, true, c, true
	n.send(req)
}

// pickPeer chooses a random neighbour other than origin, preferring one other than avoid,
// among those ok accepts (all if ok is nil).
func (n *Node) pickPeer(origin, avoid string, ok func(string) bool) (string, bool) {
	// Two passes over the sorted list instead of building the candidate lists: this runs
	// for every steal forwarded, and the choice (the k-th eligible peer in sorted order) is
	// the same.
	peers := n.sortedPeers()
	eligible := func(p string, skipAvoid bool) bool {
		return p != origin && p != n.cfg.ID && (!skipAvoid || p != avoid) && (ok == nil || ok(p))
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
	p.Cluster = n.cfg.Cluster
	p.Ranks = nil
	free := p.FreeCPUs()
	for _, r := range n.local.Ranks {
		if o, ok := n.outgoing[r]; ok {
			free += o.cpu
			p.Leaving++ // its slot is taken until it has left
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
		if n.steal != nil && (n.steal.offer == id || n.steal.partner == id) {
			continue // offered for a swap: promised until the answer comes
		}
		if h := n.relay; h != nil && h.rank == id {
			continue // held as a relay: promised until the relay accept or StealTimeout
		}
		if t, ok := n.arrived[id]; ok && t.After(r.LastMigration) {
			r.LastMigration = t
		}
		out = append(out, r)
	}
	return out
}

func (n *Node) expire(now time.Time) {
	if n.relay != nil && now.Sub(n.relay.at) >= n.cfg.StealTimeout {
		n.relay = nil
	}
	n.expireHolds(now)
	timeout := n.cfg.PendingTimeout
	dropOlder(n.unanswered, now, timeout, func(u sentSteal) time.Time { return u.at })
	dropOlder(n.notComing, now, timeout, func(nc notComing) time.Time { return nc.at })
	dropOlder(n.outgoing, now, timeout, pendingAt)
	dropOlder(n.incoming, now, timeout, pendingAt)
	dropOlder(n.arrived, now, n.cfg.Stability.Cooldown, func(t time.Time) time.Time { return t })
}

func pendingAt(p pending) time.Time { return p.at }

// dropOlder deletes the entries of m whose time (at) lies more than limit before now.
func dropOlder[K comparable, V any](m map[K]V, now time.Time, limit time.Duration, at func(V) time.Time) {
	for k, v := range m {
		if now.Sub(at(v)) > limit {
			delete(m, k)
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
	if m.Kind == KindHeartbeat {
		ps.best, ps.hosts, ps.told = m.Best, m.Hosts, m.Bandwidth
	}
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
	if m.Kind == KindStealRequest && n.cfg.Cluster != "" {
		if c, ok := n.clusterOf(m.To); ok {
			if c == n.cfg.Cluster {
				n.stats.StealRequestsInCluster++
			} else {
				n.stats.StealRequestsAcross++
			}
		}
	}
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
