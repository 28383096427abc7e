package iosbridge

import (
	"fmt"
)

// Kind is a protocol message type. Strings (not iota) keep the wire format readable and let
// Validate reject anything unknown that arrives from the network.
type Kind string

// Message kinds of the RAS protocol plus peer membership.
const (
	// KindJoin asks a known node (a seed / "peer server" of §2.2.1) to add the sender.
	KindJoin Kind = "join"
	// KindAnnounce answers Join with the receiver's neighbour list, so the joiner learns peers.
	KindAnnounce Kind = "announce"
	// KindHeartbeat proves liveness and refreshes the sender's profile at its neighbours.
	KindHeartbeat Kind = "heartbeat"
	// KindLeave says the sender is going away; neighbours drop it at once.
	KindLeave Kind = "leave"
	// KindStealRequest is the RAS random steal packet: Origin's profile, an ID and a TTL.
	KindStealRequest Kind = "steal_request"
	// KindStealAccept tells Origin that Rank of Job will be migrated to it.
	KindStealAccept Kind = "steal_accept"
	// KindStealFail tells Origin its request died (TTL 0 or no peer left to try).
	KindStealFail Kind = "steal_fail"
	// KindPong echoes a heartbeat that carried an ID (a ping): the pinger times the round
	// trip, from which NRS classifies its neighbours into latency locales.
	KindPong Kind = "pong"
	// KindBalanceRequest is Robin-Hood's: an overloaded node (From, its profile attached)
	// asks a few neighbours for room.
	KindBalanceRequest Kind = "balance_request"
	// KindBalanceOffer answers a balance request: an underloaded node of similar or better
	// rank offers room (its profile attached). The pusher takes the first offer it likes
	// and sends that node a StealAccept with ID 0 (an unsolicited rank).
	KindBalanceOffer Kind = "balance_offer"
	// KindRelayAccept completes a three-way exchange (exchange.go): the node that accepted
	// Origin's exchange request tells the relay (the node that forwarded it with Relay) to
	// send Rank to it; Swap, Origin's offered rank, comes to the relay from Origin. ID is
	// Origin's request.
	KindRelayAccept Kind = "relay_accept"
	// KindRelayReady is the relay's answer to a relay accept it honours: it now holds Rank
	// for the node that sent the accept (To) until Swap arrives from Origin. Only then does
	// that node send Origin the steal accept (exchange_commit.go).
	KindRelayReady Kind = "relay_ready"
	// KindExchangeCancel says exchange ID of Origin will not happen (a late or mismatched
	// accept, relay accept or relay ready, or a hold that expired): the receiver releases the
	// ranks it holds for it. Nothing was moved for it.
	KindExchangeCancel Kind = "exchange_cancel"
	// KindExchangeCommit says Origin carried out its part of exchange ID: the receiver sends
	// the ranks it promised for it now.
	KindExchangeCommit Kind = "exchange_commit"
	// KindMigrationFailed tells To that PCM failed the migration of Rank, which From had
	// given it for request ID of Origin (0: a push): To no longer counts Rank as coming, and
	// an exchange waiting for it is released (exchange_commit.go). Without it To counted
	// the rank until PendingTimeout and could judge exchanges on a placement that was not
	// going to be.
	KindMigrationFailed Kind = "migration_failed"
)

// MaxTTL bounds the TTL accepted from the network so a forged packet cannot circulate long.
const MaxTTL = 64

// Message is the single envelope of the protocol (like raftpb.Message): which fields matter
// depends on Kind; Validate enforces that. It is a plain struct for msgpack on NATS.
type Message struct {
	Kind Kind   `msgpack:"kind"`
	From string `msgpack:"from"`
	To   string `msgpack:"to"`
	// Origin is the node that started a steal; it gets the Accept/Fail directly.
	Origin string `msgpack:"origin,omitempty"`
	// ID numbers Origin's steals so late answers to old requests are recognized.
	ID uint64 `msgpack:"id,omitempty"`
	// TTL is the remaining number of forwards of a steal request.
	TTL int `msgpack:"ttl"`
	// Profile is Origin's profile (steal request) or From's (join/announce/heartbeat).
	Profile *NodeProfile `msgpack:"profile,omitempty"`
	// Rank is the rank being given (steal accept).
	Rank RankID `msgpack:"rank,omitempty"`
	// CPUUse is what the given rank used at the giver, so Origin can pre-book capacity.
	CPUUse float64 `msgpack:"cpu_use,omitempty"`
	// Gain and Reason explain the decision (steal accept) or failure (steal fail).
	Gain   float64 `msgpack:"gain,omitempty"`
	Reason string  `msgpack:"reason,omitempty"`
	// Peers is the neighbour list shared by announce.
	Peers []string `msgpack:"peers,omitempty"`
	// Locale, if set, keeps a steal request inside that NRS latency locale of every node it
	// is forwarded by (seed 003 §3.3).
	Locale Locale `msgpack:"locale,omitempty"`
	// InCluster keeps a steal request inside cluster Cluster (Satin's CRS): forwarded only
	// to neighbours of that cluster. Wide marks CRS's one asynchronous wide-area steal.
	InCluster bool   `msgpack:"in_cluster,omitempty"`
	Cluster   string `msgpack:"cluster,omitempty"`
	Wide      bool   `msgpack:"wide,omitempty"`
	// Exchange marks a steal request of a node whose policy exchanges ranks, sent while
	// busy too; Offer is the rank it offers to swap, with its traffic per peer (exchange.go).
	Exchange bool         `msgpack:"exchange,omitempty"`
	Offer    *RankProfile `msgpack:"offer,omitempty"`
	// Swap, in a steal accept, is the offered rank the giver takes in exchange: Origin
	// migrates it to From, or to SwapTo if set (a three-way exchange: the relay gets it).
	// In a relay accept it is the rank the relay gets from Origin.
	Swap   RankID `msgpack:"swap,omitempty"`
	SwapTo string `msgpack:"swap_to,omitempty"`
	// Relay, in a forwarded exchange request, is the rank the forwarding node (RelayProfile,
	// its profile) would give away if it got Offer: a node further on may complete the
	// three-way exchange Offer → relay, Relay → itself, one of its ranks → Origin.
	Relay        *RankProfile `msgpack:"relay,omitempty"`
	RelayProfile *NodeProfile `msgpack:"relay_profile,omitempty"`
	// OfferPartner, in an exchange request, is a second rank of Origin offered with Offer
	// (a neighbour of it) for a pair swap. Pair and SwapPair, in a steal accept, make it
	// one: Pair comes to Origin with Rank, and Origin migrates SwapPair with Swap.
	OfferPartner *RankProfile `msgpack:"offer_partner,omitempty"`
	Pair         RankID       `msgpack:"pair,omitempty"`
	SwapPair     RankID       `msgpack:"swap_pair,omitempty"`
	// Best and Hosts, in a heartbeat of a policy that gossips (Protocol.Hints), are the
	// best-ranked underloaded nodes and the lowest-ranked nodes hosting movable ranks that
	// From knows of, itself included (hints.go).
	Best  []Hint `msgpack:"best,omitempty"`
	Hosts []Hint `msgpack:"hosts,omitempty"`
	// Bandwidth, in a heartbeat, is the smoothed bandwidth (bytes per second) of the bulk
	// transfers From received from To (Node.ObserveTransfer): the rate at which To's state
	// reaches From, which To prices its link to From with. 0: none measured.
	Bandwidth float64 `msgpack:"bandwidth,omitempty"`
}

// MaxHints bounds the hint lists accepted from the network.
const MaxHints = 16

// MaxOfferPeers bounds the peer list of an offered rank accepted from the network.
const MaxOfferPeers = 1 << 16

// Validate rejects malformed messages; everything Step receives went through it.
func (m Message) Validate() error {
	if m.From == "" || m.To == "" {
		return fmt.Errorf("iosbridge: %s message: empty from/to (%q -> %q)", m.Kind, m.From, m.To)
	}
	if m.From == m.To {
		return fmt.Errorf("iosbridge: %s message from %s to itself", m.Kind, m.From)
	}
	if m.TTL < 0 || m.TTL > MaxTTL {
		return fmt.Errorf("iosbridge: %s message from %s: TTL %d not in [0,%d]", m.Kind, m.From, m.TTL, MaxTTL)
	}
	if m.Profile != nil {
		if err := m.Profile.Validate(); err != nil {
			return fmt.Errorf("iosbridge: %s message from %s: %w", m.Kind, m.From, err)
		}
	}
	if m.Locale > LocaleUnknown || len(m.Cluster) > MaxClusterName {
		return fmt.Errorf("iosbridge: %s message from %s: locale %d or cluster name of %d bytes out of range", m.Kind, m.From, m.Locale, len(m.Cluster))
	}
	if !finite(m.Gain) || !finite(m.CPUUse) || m.CPUUse < 0 {
		return fmt.Errorf("iosbridge: %s message from %s: non-finite gain or bad CPU use", m.Kind, m.From)
	}
	if m.Offer != nil {
		if m.Kind != KindStealRequest || !m.Exchange {
			return fmt.Errorf("iosbridge: %s message from %s: an offered rank belongs to an exchange request", m.Kind, m.From)
		}
		if err := m.Offer.Validate(); err != nil {
			return fmt.Errorf("iosbridge: exchange request from %s: offer: %w", m.From, err)
		}
		if len(m.Offer.Peers) > MaxOfferPeers || m.Offer.Node != m.Origin {
			return fmt.Errorf("iosbridge: exchange request from %s: offer of %d peers (at most %d) or of node %q, not origin %q", m.From, len(m.Offer.Peers), MaxOfferPeers, m.Offer.Node, m.Origin)
		}
	}
	if m.Swap != (RankID{}) && (m.Kind != KindStealAccept && m.Kind != KindRelayAccept && m.Kind != KindRelayReady || m.Swap.Job == "" || m.Swap.Rank < 0 || m.Swap == m.Rank) {
		return fmt.Errorf("iosbridge: %s message from %s: bad swap %q (only a steal or relay accept swaps, another rank than %q)", m.Kind, m.From, m.Swap, m.Rank)
	}
	if m.SwapTo != "" && (m.Kind != KindStealAccept || m.Swap == (RankID{}) || m.SwapTo == m.To) {
		return fmt.Errorf("iosbridge: %s message from %s: swap to %q needs a steal accept with a swap, to another node than %q", m.Kind, m.From, m.SwapTo, m.To)
	}
	if err := m.validateRelay(); err != nil {
		return err
	}
	if p := m.OfferPartner; p != nil {
		switch {
		case m.Offer == nil:
			return fmt.Errorf("iosbridge: %s message from %s: an offered partner needs an offer", m.Kind, m.From)
		case len(p.Peers) > MaxOfferPeers || p.Node != m.Origin || p.ID() == m.Offer.ID():
			return fmt.Errorf("iosbridge: exchange request from %s: offered partner %s of %d peers (at most %d) of node %q, origin %q, offer %s", m.From, p.ID(), len(p.Peers), MaxOfferPeers, p.Node, m.Origin, m.Offer.ID())
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("iosbridge: exchange request from %s: offered partner: %w", m.From, err)
		}
	}
	if (m.Pair != (RankID{}) || m.SwapPair != (RankID{})) && (m.Kind != KindStealAccept || m.SwapTo != "" ||
		m.Pair.Job == "" || m.Pair.Rank < 0 || m.SwapPair.Job == "" || m.SwapPair.Rank < 0 || m.Swap == (RankID{}) ||
		m.Pair == m.Rank || m.SwapPair == m.Swap || m.Pair == m.Swap || m.SwapPair == m.Rank || m.Pair == m.SwapPair) {
		return fmt.Errorf("iosbridge: %s message from %s: bad pair swap (%q, %q for %q, %q): only a steal accept with a swap and four distinct ranks", m.Kind, m.From, m.Rank, m.Pair, m.Swap, m.SwapPair)
	}
	if m.Bandwidth != 0 && (m.Kind != KindHeartbeat || !(m.Bandwidth > 0 && m.Bandwidth <= MaxBandwidthBps)) {
		return fmt.Errorf("iosbridge: %s message from %s: bandwidth %v (only a heartbeat carries one, at most %g B/s)", m.Kind, m.From, m.Bandwidth, MaxBandwidthBps)
	}
	if len(m.Best)+len(m.Hosts) > 0 && m.Kind != KindHeartbeat {
		return fmt.Errorf("iosbridge: %s message from %s: only heartbeats carry hints", m.Kind, m.From)
	}
	for _, hs := range [][]Hint{m.Best, m.Hosts} {
		if len(hs) > MaxHints {
			return fmt.Errorf("iosbridge: heartbeat from %s: %d hints (at most %d)", m.From, len(hs), MaxHints)
		}
		for _, h := range hs {
			if err := h.Validate(); err != nil {
				return fmt.Errorf("iosbridge: heartbeat from %s: %w", m.From, err)
			}
		}
	}
	switch m.Kind {
	case KindJoin, KindHeartbeat, KindLeave:
	case KindAnnounce:
		for _, p := range m.Peers {
			if p == "" {
				return fmt.Errorf("iosbridge: announce from %s: empty peer name", m.From)
			}
		}
	case KindStealRequest:
		if m.Origin == "" || m.Profile == nil {
			return fmt.Errorf("iosbridge: steal request from %s: needs origin and profile", m.From)
		}
		if m.Profile.Node != m.Origin {
			return fmt.Errorf("iosbridge: steal request from %s: profile of %s but origin %s", m.From, m.Profile.Node, m.Origin)
		}
	case KindStealAccept:
		if m.Origin != m.To || m.Rank.Job == "" || m.Rank.Rank < 0 {
			return fmt.Errorf("iosbridge: steal accept from %s: needs a rank (got %q) and to == origin (%q, %q)", m.From, m.Rank, m.To, m.Origin)
		}
	case KindStealFail:
		if m.Origin != m.To {
			return fmt.Errorf("iosbridge: steal fail from %s: to %q is not origin %q", m.From, m.To, m.Origin)
		}
	case KindPong:
		if m.ID == 0 {
			return fmt.Errorf("iosbridge: pong from %s: needs the ping's ID", m.From)
		}
	case KindExchangeCancel, KindExchangeCommit:
		if m.Origin == "" || m.ID == 0 {
			return fmt.Errorf("iosbridge: %s from %s: needs the exchange's origin (%q) and request ID", m.Kind, m.From, m.Origin)
		}
	case KindMigrationFailed:
		if m.Origin == "" || m.Rank.Job == "" || m.Rank.Rank < 0 {
			return fmt.Errorf("iosbridge: migration failed from %s: needs the request's origin (%q) and a rank (%q)", m.From, m.Origin, m.Rank)
		}
	case KindRelayAccept, KindRelayReady:
		if m.Origin == "" || m.Origin == m.To || m.Origin == m.From || m.ID == 0 || m.Rank.Job == "" || m.Rank.Rank < 0 || m.Swap == (RankID{}) {
			return fmt.Errorf("iosbridge: %s from %s: needs a third node as origin (%q), its request ID, a rank (%q) and a swap (%q)", m.Kind, m.From, m.Origin, m.Rank, m.Swap)
		}
	case KindBalanceRequest, KindBalanceOffer:
		if m.ID == 0 || m.Profile == nil || m.Profile.Node != m.From {
			return fmt.Errorf("iosbridge: %s from %s: needs an ID and the sender's profile", m.Kind, m.From)
		}
	default:
		return fmt.Errorf("iosbridge: unknown message kind %q from %s", m.Kind, m.From)
	}
	return nil
}

// validateRelay checks the relay of a forwarded exchange request: with an offer, of a third
// node whose profile comes along and lists it, another rank than the offer.
func (m Message) validateRelay() error {
	if m.Relay == nil && m.RelayProfile == nil {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("iosbridge: %s message from %s: relay: %s", m.Kind, m.From, why)
	}
	switch {
	case m.Relay == nil || m.RelayProfile == nil:
		return bad("needs both the rank and its node's profile")
	case m.Offer == nil:
		return bad("only an exchange request with an offer carries one")
	case len(m.Relay.Peers) > MaxOfferPeers:
		return bad(fmt.Sprintf("%d peers (at most %d)", len(m.Relay.Peers), MaxOfferPeers))
	case m.Relay.Node != m.RelayProfile.Node || m.RelayProfile.Node == m.Origin || !m.RelayProfile.Hosts(m.Relay.ID()):
		return bad(fmt.Sprintf("rank %s of node %q is not hosted by profile %q, a node other than origin %q", m.Relay.ID(), m.Relay.Node, m.RelayProfile.Node, m.Origin))
	case m.Relay.ID() == m.Offer.ID():
		return bad("the offered rank itself")
	}
	if err := m.Relay.Validate(); err != nil {
		return bad(err.Error())
	}
	if err := m.RelayProfile.Validate(); err != nil {
		return bad(err.Error())
	}
	return nil
}
