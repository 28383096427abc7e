package iosbridge

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Policy names of the grid strategies (grid.go). Each is a decision (Decide) plus, through
// Protocol, the way its nodes look for work (NewNode reads it from Config.Policy).
const (
	// PolicyRS is the IO paper's load-sensitive random stealing (seed 003 §3.1).
	PolicyRS = "rs"
	// PolicyARS is actor topology sensitive random stealing, eq. 1–3 (seed 003 §3.2).
	PolicyARS = "ars"
	// PolicyNRS and PolicyNRSARS are network topology sensitive random stealing (seed 003
	// §3.3): steal packets stay within a latency locale; the giver decides as RS or ARS.
	PolicyNRS    = "nrs"
	PolicyNRSARS = "nrs-ars"
	// PolicyCRS is Satin's cluster-aware random stealing (seed 002): synchronous steals
	// inside the node's cluster (Config.Cluster), at most one asynchronous wide-area steal.
	PolicyCRS = "crs"
	// PolicyRobinHood is Bustos' Robin-Hood (seed 001 §5.4.2): overloaded nodes push a rank
	// to the first underloaded acquaintance of similar or better rank that answers.
	PolicyRobinHood = "robinhood"
	// PolicySheriff is the Nottingham Sheriff (seed 001 §5.5), ranked work stealing: an
	// underloaded node steals from a random acquaintance of lower rank.
	PolicySheriff = "sheriff"
	// PolicyRHNS is Robin-Hood + Nottingham Sheriff together (seed 001 §5.5, ch. 6).
	PolicyRHNS = "rhns"
)

// StealScope says where a node's steal requests may travel.
type StealScope uint8

// Steal scopes.
const (
	// ScopeAnywhere is RAS: a random neighbour, forwarded to random neighbours.
	ScopeAnywhere StealScope = iota
	// ScopeLocales is NRS: first within the local latency locale, then regional, national
	// and international, each step after the previous one failed.
	ScopeLocales
	// ScopeClusters is CRS: synchronous steals inside the node's cluster, plus at most one
	// asynchronous steal in another cluster.
	ScopeClusters
	// ScopeNone: the node does not steal (Robin-Hood alone only pushes).
	ScopeNone
)

// Protocol is how the nodes of a policy look for work and for room. Policies that do not
// implement ProtocolPolicy use DefaultProtocol (RAS).
type Protocol struct {
	// Steal is where steal requests go.
	Steal StealScope
	// Push makes overloaded nodes send balance requests (Robin-Hood) to PushFanout random
	// neighbours; an underloaded one whose rank is at least PushRank × the pusher's answers.
	Push       bool
	PushFanout int
	PushRank   float64
	// OverloadAvailability: the node pushes while its availability is at or below it.
	OverloadAvailability float64
	// Ranked makes the Sheriff's steal requests go first (and be forwarded first) to
	// neighbours whose last heartbeat showed ranks and a lower NodeRank than the stealer's:
	// the acquaintances it could take a rank from, known from the P2P layer's profiles.
	Ranked bool
	// Ping makes the node time round trips to its neighbours (heartbeat echoes), which NRS
	// needs for its locales and ATS-RAS to price crossing messages; any node may turn it on
	// (Config.MeasureLatency).
	Ping bool
	// Exchange makes the node send steal requests while busy too, when its ranks talk to
	// ranks on other nodes, offering a rank to swap; receivers may then regroup ranks by
	// communication between busy nodes (exchange.go).
	Exchange bool
	// Hints, if positive, makes heartbeats carry the Hints best-ranked underloaded nodes and
	// lowest-ranked hosts of movable ranks the sender knows of (hints.go): steal requests go
	// straight to a lower-ranked host so named, a push asks one of the best nodes first, and
	// the policy sees the giver's list (DecisionInput.Best).
	Hints int
	// Bulk lets a steal request be answered with several ranks: as many as the policy gives
	// to the stealer's profile updated for each rank given. The receiver then books each
	// rank at the CPU it will want (rankDemand), not at what it used at a crowded giver:
	// several arrive on the strength of one profile.
	Bulk bool
}

// DefaultProtocol is the RAS protocol of Desell's thesis: random stealing anywhere.
func DefaultProtocol() Protocol { return Protocol{Steal: ScopeAnywhere} }

// overload is OverloadAvailability, 0.05 if unset.
func (p Protocol) overload() float64 {
	if p.OverloadAvailability > 0 {
		return p.OverloadAvailability
	}
	return 0.05
}

// ProtocolPolicy is a policy that needs a protocol other than DefaultProtocol.
type ProtocolPolicy interface {
	Policy
	Protocol() Protocol
}

// protocolOf is p's protocol.
func protocolOf(p Policy) Protocol {
	if pp, ok := p.(ProtocolPolicy); ok {
		return pp.Protocol()
	}
	return DefaultProtocol()
}

// Locale is an NRS latency class of a neighbour (seed 003 §3.3), from the round trip time
// this node measured to it.
type Locale uint8

// The four locales of NRS, nearest first, and the class of a neighbour never measured.
const (
	LocaleLocal Locale = iota + 1
	LocaleRegional
	LocaleNational
	LocaleInternational
	// LocaleUnknown: no round trip measured yet; tried after every measured locale.
	LocaleUnknown
)

// String names the locale.
func (l Locale) String() string {
	switch l {
	case LocaleLocal:
		return "local"
	case LocaleRegional:
		return "regional"
	case LocaleNational:
		return "national"
	case LocaleInternational:
		return "international"
	case LocaleUnknown:
		return "unmeasured"
	}
	return fmt.Sprintf("locale(%d)", uint8(l))
}

// NRSLocale classifies a ping time as the IO paper does: local 10 ms or less, regional 11 to
// 100 ms, national 101 to 250 ms, international 251 ms and more. The paper counts whole
// milliseconds; a time between two of its bounds (10.5 ms) goes to the farther class.
func NRSLocale(rtt time.Duration) Locale {
	switch {
	case rtt <= 10*time.Millisecond:
		return LocaleLocal
	case rtt <= 100*time.Millisecond:
		return LocaleRegional
	case rtt <= 250*time.Millisecond:
		return LocaleNational
	}
	return LocaleInternational
}

// power is P(t) of ARS eq. 2, the processing power available at a node: its free CPUs
// weighted by the speed of its cores.
func power(p NodeProfile) float64 { return p.FreeCPUs() * p.speed() }

// NodeRank is Bustos' rank(A), the processing capacity of a node: its CPUs times the speed of
// one (NodeProfile.Speed, 1 when unknown). It orders nodes for Robin-Hood and the Sheriff.
func NodeRank(p NodeProfile) float64 { return p.EffectiveCPUs * p.speed() }

// RS is the IO paper's load-sensitive random stealing decision (seed 003 §3.1): "a peer
// theater finds its first unsatisfied actor (if one exists) and selects that as its candidate
// for migration". An actor is unsatisfied when "it cannot process messages as quickly as it
// is receiving them" (§2), and a theater is heavily loaded when one of its actors is. For a
// rank that is so in two ways, either of which makes it a candidate:
//
//   - the node is fully used (availability at or below FullyUsedAvailability): its ranks
//     want more CPU than there is, so none gets all it wants (the first candidate goes);
//   - the rank itself runs starved: while it computes it gets at most SatisfiedSpeed of a
//     core (RankStarved). A lone rank on a node whose CPU is mostly taken by another user
//     is the rank its peers wait for, yet its node is not fully used: between its slow
//     computations it waits for its peers' halos, the longer the farther they are, so the
//     node shows idle time. Judged by the node's availability alone it would count as
//     satisfied and never leave, and a job with one such rank per loaded node would keep
//     the whole overloaded cluster's pace (the grid experiment's crs and nrs runs).
//
// Gain is the difference in free CPUs; the stability guard only lets a rank go where the
// free CPUs exceed this node's by more than the rank uses, so a starved rank moves only to
// a node where it gets more.
type RS struct {
	name string
	cfg  SRASConfig
}

// SatisfiedSpeed is the share of a core a rank must get while it computes to count as
// satisfied (RankStarved): an MPI rank is single-threaded and wants one core.
const SatisfiedSpeed = 0.95

// RankStarved reports whether rank r gets less than SatisfiedSpeed of a core while it
// computes: its CPU use (CPUs, averaged over the sampling period) over the share of its
// window it spends computing (outside MPI calls). ok is false when either is unmeasured.
func RankStarved(r RankProfile) (speed float64, starved, ok bool) {
	if r.CPUUse <= 0 || r.CompTime <= 0 || r.Window <= 0 {
		return 0, false, false
	}
	busy := min(1, r.CompTime.Seconds()/r.Window.Seconds())
	speed = r.CPUUse / busy
	return speed, speed < SatisfiedSpeed, true
}

// Name implements Policy.
func (p RS) Name() string { return p.name }

// Protocol implements ProtocolPolicy: NRS is RS inside latency locales, CRS inside clusters.
func (p RS) Protocol() Protocol {
	switch p.name {
	case PolicyNRS:
		return Protocol{Steal: ScopeLocales, Ping: true}
	case PolicyCRS:
		return Protocol{Steal: ScopeClusters}
	}
	return DefaultProtocol()
}

// Decide implements Policy.
func (p RS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: p.name}
	if len(in.Ranks) == 0 {
		d.Reason = "no candidate rank"
		return d
	}
	why := ""
	pickR := -1
	if in.Local.Availability <= p.cfg.FullyUsedAvailability {
		pickR, why = 0, fmt.Sprintf("heavily loaded (availability %.3f)", in.Local.Availability)
	} else {
		for i, r := range in.Ranks {
			if speed, starved, ok := RankStarved(r); ok && starved {
				pickR, why = i, fmt.Sprintf("rank starved (%.2f of a core while computing, availability %.3f)", speed, in.Local.Availability)
				break
			}
		}
	}
	if pickR < 0 {
		d.Reason = fmt.Sprintf("lightly loaded (availability %.3f > %.3f, no rank below %.2f of a core while computing): every rank is satisfied",
			in.Local.Availability, p.cfg.FullyUsedAvailability, SatisfiedSpeed)
		return d
	}
	d.Migrate, d.Rank = true, in.Ranks[pickR].ID()
	d.Gain = in.Remote.FreeCPUs() - in.Local.FreeCPUs()
	d.Reason = fmt.Sprintf("%s: first unsatisfied rank %s to %s", why, d.Rank, in.Remote.Node)
	return d
}

// ARSProcessing is Δ_p(l, f) of the IO paper's eq. 2: (P(f) − P(l)) / (P(f) + P(l)), the
// normalized increase in processing; 0 when both are 0.
func ARSProcessing(pl, pf float64) float64 {
	if pl+pf <= 0 {
		return 0
	}
	return (pf - pl) / (pf + pl)
}

// ARSCommunication is Δ_c(l, f, a) of eq. 3: (M(f, a) − M(l, a)) / M(a), the normalized
// increase in communication; 0 for an actor that sends nothing.
func ARSCommunication(ml, mf, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return (mf - ml) / total
}

// ARSGain is eq. 1: Δ(l, f, a) = Δ_p(l, f) + Δ_c(l, f, a); the actor migrates when it is > 0.
func ARSGain(dp, dc float64) float64 { return dp + dc }

// ARS is actor topology sensitive random stealing (seed 003 §3.2). For every candidate rank a
// it evaluates eq. 1–3 with P(t) the processing power available at t (free CPUs × core
// speed; the steal packet carries the stealer's), M(t, a) the messages a sent to the ranks
// of its job hosted at t, and M(a) all the messages it sent; it gives the rank with the
// largest Δ > 0.
type ARS struct{ name string }

// Name implements Policy.
func (p ARS) Name() string { return p.name }

// Protocol implements ProtocolPolicy: NRS-ARS steals inside latency locales.
func (p ARS) Protocol() Protocol {
	if p.name == PolicyNRSARS {
		return Protocol{Steal: ScopeLocales, Ping: true}
	}
	return Protocol{Steal: ScopeAnywhere, Exchange: true}
}

// Decide implements Policy.
func (p ARS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: p.name, Reason: "no rank with Δ(l,f,a) > 0"}
	pl, pf := power(in.Local), power(in.Remote)
	if in.Exchange { // busy nodes: the CPU share a rank gets (has here, would get there)
		pl, pf = rankShare(in.Local, 0)*in.Local.speed(), rankShare(in.Remote, 1)*in.Remote.speed()
	}
	dp := ARSProcessing(pl, pf)
	best := 0.0
	for _, r := range in.Ranks {
		_, ml := r.commTo(in.Local)
		_, mf := r.commTo(in.Remote)
		var total int64
		for _, pc := range r.Peers {
			if pc.Rank != r.Rank {
				total += pc.Messages
			}
		}
		dc := ARSCommunication(float64(ml), float64(mf), float64(total))
		g := ARSGain(dp, dc)
		if !finite(g) || g <= best {
			continue
		}
		best = g
		d.Migrate, d.Rank, d.Gain = true, r.ID(), g
		d.Reason = fmt.Sprintf("eq.1 Δ=Δp+Δc=%.4g%+.4g=%.4g (P(l)=%.3g, P(f)=%.3g; M(l,a)=%d, M(f,a)=%d of M(a)=%d): %s to %s",
			dp, dc, g, pl, pf, ml, mf, total, r.ID(), in.Remote.Node)
	}
	return d
}

// RobinHoodConfig holds Bustos' thresholds (seed 001 §5.4.2, §6.1.2).
type RobinHoodConfig struct {
	// Overload: a node is overloaded when its availability is at or below this (jλ ≥ μ: its
	// ranks want all its CPUs or more).
	OverloadAvailability float64
	// RB: an underloaded node answers a balance request when rank(B) ≥ RB × rank(A).
	RB float64
	// RS: a node gives a rank to a stealer A when rank(A) > RS × rank(B).
	RS float64
	// Fanout is how many acquaintances a balance request goes to (n of eq. 5.1).
	Fanout int
	// Prefer, if positive, is the Sheriff's gathering on large grids (hints.go): nodes
	// gossip the Prefer best-ranked underloaded nodes and lowest-ranked hosts they know
	// of; a stealer sends its request straight to such a host of lower rank; a node gives a
	// rank to a stealer only if fewer than Prefer underloaded nodes it knows of rank higher
	// (the objects wait for one of the best); an overloaded node asks one of the best
	// first. 0 is Bustos' Sheriff: a random acquaintance.
	Prefer int
	// Bulk lets a Sheriff of high rank take several ranks in one steal, up to what it can
	// hold without becoming overloaded, instead of one per cooldown.
	Bulk bool
}

// DefaultRobinHoodConfig is Bustos' choice for large networks: RB = 0.7, RS = 1.0, requests
// to 3 acquaintances (§6.1.4), overloaded when at most 5% of the CPUs are idle; with the
// gathering of Prefer and Bulk (3 best nodes known, several ranks per steal).
func DefaultRobinHoodConfig() RobinHoodConfig {
	return RobinHoodConfig{OverloadAvailability: 0.05, RB: 0.7, RS: 1.0, Fanout: 3, Prefer: 3, Bulk: true}
}

// Validate rejects thresholds outside their ranges.
func (c RobinHoodConfig) Validate() error {
	if !finite(c.OverloadAvailability) || c.OverloadAvailability < 0 || c.OverloadAvailability >= 1 ||
		!finite(c.RB) || c.RB < 0 || !finite(c.RS) || c.RS < 0 || c.Fanout < 1 || c.Prefer < 0 || c.Prefer > MaxHints {
		return fmt.Errorf("iosbridge: robin-hood config %+v: want overload availability in [0,1), RB, RS >= 0, fanout >= 1, prefer in [0,%d]", c, MaxHints)
	}
	return nil
}

// Balancer is Bustos' family: Robin-Hood (push from overloaded nodes), the Nottingham
// Sheriff (ranked stealing) and both together. Its Decide serves a push (Remote answered the
// overloaded Local's balance request) and a steal request alike:
//
//   - Robin-Hood: Local is overloaded and Remote is not, with rank(Remote) ≥ RB × rank(Local);
//     the rank given is the one that uses the least CPU (Bustos moves the object with the
//     shortest service queue, the one that suffers least from the pause).
//   - Sheriff: Local hosts a rank and rank(Remote) > RS × rank(Local); the first rank is
//     given (Bustos steals "an active object, if any"). With Prefer, not if Prefer
//     underloaded nodes Local knows of (in.Best) rank higher than Remote, unless Local is
//     overloaded.
//
// Neither gives a rank to a node it would overload (Remote's free CPUs after the move at
// or below the overload threshold): that node would only shed it again.
//
// A Sheriff move with RS ≥ 1 goes strictly up the rank order, so it can never be undone by
// another Sheriff move: the stability guard lets such moves through without its free-CPU
// hysteresis (which would keep a ranked steal from a lightly loaded node), keeping the
// cooldown.
type Balancer struct {
	name        string
	push, steal bool
	cfg         RobinHoodConfig
}

// NewBalancer returns the named Bustos policy (PolicyRobinHood, PolicySheriff or
// PolicyRHNS) with cfg.
func NewBalancer(name string, cfg RobinHoodConfig) (Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return Balancer{}, err
	}
	b := Balancer{name: name, cfg: cfg}
	switch name {
	case PolicyRobinHood:
		b.push = true
	case PolicySheriff:
		b.steal = true
	case PolicyRHNS:
		b.push, b.steal = true, true
	default:
		return Balancer{}, fmt.Errorf("iosbridge: %q is not a Bustos policy", name)
	}
	return b, nil
}

// Name implements Policy.
func (b Balancer) Name() string { return b.name }

// Protocol implements ProtocolPolicy: Robin-Hood pushes and does not steal; the Sheriff
// steals from one random acquaintance at a time; RHNS does both.
func (b Balancer) Protocol() Protocol {
	p := Protocol{Steal: ScopeNone}
	if b.steal {
		p.Steal, p.Ranked = ScopeAnywhere, true
	}
	if b.push {
		p.Push, p.PushFanout, p.PushRank, p.OverloadAvailability = true, b.cfg.Fanout, b.cfg.RB, b.cfg.OverloadAvailability
	}
	if b.steal {
		p.Hints, p.Bulk = b.cfg.Prefer, b.cfg.Bulk
	}
	return p
}

// rankDemand is the CPU rank r would use on a node with room: what it uses here, scaled up
// by the share of a CPU it gets here when the node is crowded (more ranks than CPUs).
func rankDemand(r RankProfile, local NodeProfile) float64 {
	u := r.cpuUse(local)
	if s := rankShare(local, 0); s > 0 && s < 1 {
		u = math.Min(1, u/s)
	}
	return u
}

// overloads reports whether giving r to remote would leave it overloaded: its free CPUs
// after the move at or below OverloadAvailability of its CPUs.
func (b Balancer) overloads(r RankProfile, local, remote NodeProfile) bool {
	return remote.FreeCPUs()-rankDemand(r, local) <= b.cfg.OverloadAvailability*remote.EffectiveCPUs
}

// betterKnown counts the underloaded nodes in best, other than local and remote, of a rank
// above rr.
func betterKnown(best []Hint, local, remote string, rr float64) int {
	k := 0
	for _, h := range best {
		if h.Node != local && h.Node != remote && h.Rank > rr {
			k++
		}
	}
	return k
}

// Overloaded is Bustos' overload test on a profile: it hosts ranks and at most
// OverloadAvailability of its CPUs are idle.
func (b Balancer) Overloaded(p NodeProfile) bool {
	return len(p.Ranks) > 0 && p.Availability <= b.cfg.OverloadAvailability
}

// rankOrdered reports whether a move from in.Local to in.Remote goes strictly up the rank
// order (the Sheriff's moves with RS ≥ 1), which cannot ping-pong.
func (b Balancer) rankOrdered(in DecisionInput) bool {
	return b.steal && NodeRank(in.Remote) > math.Max(1, b.cfg.RS)*NodeRank(in.Local)
}

// Decide implements Policy.
func (b Balancer) Decide(in DecisionInput) Decision {
	d := Decision{Policy: b.name}
	if len(in.Ranks) == 0 {
		d.Reason = "no candidate rank"
		return d
	}
	rl, rr := NodeRank(in.Local), NodeRank(in.Remote)
	var why []string
	if b.push {
		switch {
		case !b.Overloaded(in.Local):
			why = append(why, fmt.Sprintf("robin-hood: not overloaded (availability %.3f)", in.Local.Availability))
		case in.Remote.Availability <= b.cfg.OverloadAvailability:
			why = append(why, fmt.Sprintf("robin-hood: %s is not underloaded", in.Remote.Node))
		case rr < b.cfg.RB*rl:
			why = append(why, fmt.Sprintf("robin-hood: rank(%s)=%.3g < RB×rank(here)=%.3g", in.Remote.Node, rr, b.cfg.RB*rl))
		default:
			pickR := in.Ranks[0]
			for _, r := range in.Ranks[1:] {
				if r.cpuUse(in.Local) < pickR.cpuUse(in.Local) {
					pickR = r
				}
			}
			if b.overloads(pickR, in.Local, in.Remote) {
				why = append(why, fmt.Sprintf("robin-hood: %s would be overloaded", in.Remote.Node))
				break
			}
			d.Migrate, d.Rank = true, pickR.ID()
			d.Gain = in.Remote.FreeCPUs() - in.Local.FreeCPUs()
			d.Reason = fmt.Sprintf("robin-hood: overloaded (availability %.3f), %s underloaded with rank %.3g ≥ %.2g×%.3g: %s to it",
				in.Local.Availability, in.Remote.Node, rr, b.cfg.RB, rl, d.Rank)
			return d
		}
	}
	if b.steal {
		better := 0
		if b.cfg.Prefer > 0 {
			better = betterKnown(in.Best, in.Local.Node, in.Remote.Node, rr)
		}
		switch {
		case rr <= b.cfg.RS*rl:
		case b.overloads(in.Ranks[0], in.Local, in.Remote):
			why = append(why, fmt.Sprintf("sheriff: %s would be overloaded", in.Remote.Node))
		case better >= b.cfg.Prefer && b.cfg.Prefer > 0 && !b.Overloaded(in.Local):
			why = append(why, fmt.Sprintf("sheriff: %d underloaded nodes known rank above %s (%.3g): the ranks wait for them", better, in.Remote.Node, rr))
		default:
			d.Migrate, d.Rank = true, in.Ranks[0].ID()
			d.Gain = rr - rl
			d.Reason = fmt.Sprintf("sheriff: rank(%s)=%.3g > RS×rank(here)=%.2g×%.3g: %s to it", in.Remote.Node, rr, b.cfg.RS, rl, d.Rank)
			return d
		}
		if rr <= b.cfg.RS*rl {
			why = append(why, fmt.Sprintf("sheriff: rank(%s)=%.3g ≤ RS×rank(here)=%.3g", in.Remote.Node, rr, b.cfg.RS*rl))
		}
	}
	d.Reason = strings.Join(why, "; ")
	return d
}

// rankOrderedPolicy is a policy some of whose moves cannot ping-pong (see Balancer).
type rankOrderedPolicy interface {
	rankOrdered(in DecisionInput) bool
}
