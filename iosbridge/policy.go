package iosbridge

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Rand is the randomness a policy or node may consume. *math/rand/v2.Rand satisfies it;
// injecting it (instead of using the global source) makes every run reproducible from a seed.
type Rand interface {
	IntN(n int) int
	Float64() float64
}

// pick returns r.IntN(n) clamped to [0,n) (a faulty Rand must not crash the agent), or 0
// when r is nil. n must be positive.
func pick(r Rand, n int) int {
	if r == nil {
		return 0
	}
	return min(max(r.IntN(n), 0), n-1)
}

// DecisionInput is everything the decision component sees when a steal request arrives
// (thesis §2.2.1: the protocol "will send the profiling information from the steal request to
// the decision module"). It is a value: policies are pure functions of it.
type DecisionInput struct {
	// Local is this node's profile; Local.Ranks is every rank hosted here.
	Local NodeProfile
	// Ranks are the candidates the policy may give away (a subset of Local.Ranks: the
	// stability guard removes ranks in cooldown or whose move would flip the imbalance).
	Ranks []RankProfile
	// Remote is the stealer's profile carried in the StealRequest.
	Remote NodeProfile
	// Link is the measured path to the stealer; nil when never measured. Node fills its
	// Latency with the base round trip of its heartbeat pings (Node.BaseLatency, which
	// ATS-RAS prices crossing messages with) and its BandwidthBps with the smoothed
	// bandwidth of the bulk transfers it received from the stealer (Node.ObserveTransfer:
	// pcmd's buddy copies of checkpoint pieces, the simulator's migrations), 0 until one was
	// measured: policies then price messages and migrations with MPI-IOS's default
	// bandwidth (MPIIOSConfig.DefaultBandwidthBps). Callers that run a policy themselves
	// (tests) may pass a bandwidth.
	Link *LinkProfile
	// Now is the injected current time.
	Now time.Time
	// Rand is the injected randomness (S-RAS picks a random actor); may be nil, in which
	// case a policy must behave deterministically (first candidate).
	Rand Rand
	// Exchange marks a request from a node whose policy exchanges ranks (Protocol.Exchange),
	// possibly busy: ATS-RAS, FLC-RAS and ARS then price the CPU a rank would get at Remote
	// as its fair share there (rankShare) rather than Remote's free CPUs, which are zero on
	// a busy node. The stability guard sets it only for its exchange rules (exchange.go);
	// the ordinary rules see it false.
	Exchange bool
	// Offer is the rank the requester offers to swap (exchange requests only); nil if none.
	Offer *RankProfile
	// Relay and RelayNode, in a forwarded exchange request, are a rank a third node would
	// give away if it got Offer, and that node's profile: the guard may complete a three-way
	// exchange with them (exchange.go). nil if none.
	Relay     *RankProfile
	RelayNode *NodeProfile
	// OfferPartner is a second rank the requester offers with Offer, a neighbour of it on
	// the same node, for a pair swap (exchange.go); nil if none.
	OfferPartner *RankProfile
	// Best are the best-ranked underloaded nodes this node knows of, best first, itself
	// included if it is one (Protocol.Hints; nil otherwise): the Sheriff keeps its ranks for
	// them.
	Best []Hint
}

// Decision is the decision component's answer: which rank (if any) to give the stealer, the
// gain the policy computed for it, and a human-readable why for the event log.
type Decision struct {
	// Migrate says whether Rank should go to the stealer.
	Migrate bool   `msgpack:"migrate"`
	Rank    RankID `msgpack:"rank"`
	// Gain is the policy's own measure (positive means "worth moving"); scales differ
	// between policies, so compare gains only within one policy.
	Gain float64 `msgpack:"gain"`
	// Swap, when set, is the requester's offered rank that comes here in exchange for Rank
	// (exchange.go).
	Swap RankID `msgpack:"swap,omitempty"`
	// Relay, when set, makes the swap three-way: the offered rank Swap goes to node
	// RelayNode instead of here, and RelayNode's rank Relay comes here (exchange.go).
	Relay     RankID `msgpack:"relay,omitempty"`
	RelayNode string `msgpack:"relay_node,omitempty"`
	// Pair and SwapPair, when set, make the swap a pair swap: Pair goes to the requester
	// with Rank, and the offered partner SwapPair comes here with Swap (exchange.go).
	Pair     RankID `msgpack:"pair,omitempty"`
	SwapPair RankID `msgpack:"swap_pair,omitempty"`
	// Policy names the deciding policy; Reason explains the numbers, for the event log.
	Policy string `msgpack:"policy"`
	Reason string `msgpack:"reason"`
}

// Policy is a decision component. Implementations must be pure and deterministic given
// DecisionInput (randomness only through in.Rand) so decisions can be replayed in tests.
type Policy interface {
	// Name is the registry name (PolicyByName) and the tag in Decision.Policy.
	Name() string
	// Decide says whether to give one of in.Ranks to in.Remote.
	Decide(in DecisionInput) Decision
}

// Policy names accepted by PolicyByName.
const (
	PolicyNone   = "none"
	PolicySRAS   = "sras"
	PolicyATSRAS = "atsras"
	PolicyFLCRAS = "flcras"
	PolicyMPIIOS = "mpiios"
	// DefaultPolicy is used for an empty name: the MPI/IOS paper's own gain policy.
	DefaultPolicy = PolicyMPIIOS
)

// PolicyNames lists the valid names, sorted, for flags and error messages.
func PolicyNames() []string {
	n := []string{PolicyNone, PolicySRAS, PolicyATSRAS, PolicyFLCRAS, PolicyMPIIOS,
		PolicyRS, PolicyARS, PolicyNRS, PolicyNRSARS, PolicyCRS, PolicyRobinHood, PolicySheriff, PolicyRHNS}
	sort.Strings(n)
	return n
}

// PolicyByName returns the named policy with its default configuration ("" selects
// DefaultPolicy). The result is the bare policy; NewNode wraps it in Stabilize.
func PolicyByName(name string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "":
		return PolicyByName(DefaultPolicy)
	case PolicyNone:
		return NonePolicy{}, nil
	case PolicySRAS:
		return NewSRAS(DefaultSRASConfig())
	case PolicyATSRAS:
		return ATSRAS{}, nil
	case PolicyFLCRAS:
		return NewFLCRAS(DefaultFLCRASConfig())
	case PolicyMPIIOS:
		return NewMPIIOS(DefaultMPIIOSConfig())
	case PolicyRS, PolicyNRS, PolicyCRS:
		return RS{name: strings.ToLower(strings.TrimSpace(name)), cfg: DefaultSRASConfig()}, nil
	case PolicyARS, PolicyNRSARS:
		return ARS{name: strings.ToLower(strings.TrimSpace(name))}, nil
	case PolicyRobinHood, PolicySheriff, PolicyRHNS:
		return NewBalancer(strings.ToLower(strings.TrimSpace(name)), DefaultRobinHoodConfig())
	}
	return nil, fmt.Errorf("iosbridge: unknown policy %q (valid: %s)", name, strings.Join(PolicyNames(), ", "))
}

// NonePolicy never migrates: nodes still profile and answer steal requests, which is how
// an operator observes what the other policies would see without moving anything.
type NonePolicy struct{}

// Name implements Policy.
func (NonePolicy) Name() string { return PolicyNone }

// Decide implements Policy; it always declines.
func (NonePolicy) Decide(DecisionInput) Decision {
	return Decision{Policy: PolicyNone, Reason: "policy none never migrates"}
}

// SRASConfig tunes S-RAS.
type SRASConfig struct {
	// FullyUsedAvailability is the availability at or below which the node counts as
	// "fully used": the thesis says "the available computational power is approximately 0%"
	// (§2.2.1.1); a sampled value is never exactly 0, so a small tolerance is needed.
	FullyUsedAvailability float64
}

// DefaultSRASConfig treats ≤5% idle as "approximately 0%".
func DefaultSRASConfig() SRASConfig { return SRASConfig{FullyUsedAvailability: 0.05} }

// SRAS is Simple Random Actor Stealing (thesis §2.2.1.1): when a steal request arrives, "if
// there are multiple actors present locally, and all the computational resources are in use
// ..., one of the local actors is chosen at random and migrated to the source of the steal
// request". It needs only the node's available CPU.
type SRAS struct{ cfg SRASConfig }

// NewSRAS validates cfg and returns the policy.
func NewSRAS(cfg SRASConfig) (SRAS, error) {
	if !finite(cfg.FullyUsedAvailability) || cfg.FullyUsedAvailability < 0 || cfg.FullyUsedAvailability >= 1 {
		return SRAS{}, fmt.Errorf("iosbridge: sras: fully-used availability %v not in [0,1)", cfg.FullyUsedAvailability)
	}
	return SRAS{cfg: cfg}, nil
}

// Name implements Policy.
func (SRAS) Name() string { return PolicySRAS }

// Decide implements Policy. Gain is the availability difference (remote − local), reported
// only so the stability guard's "nothing gained" check has a number to test.
func (s SRAS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: PolicySRAS}
	switch {
	case len(in.Local.Ranks) < 2:
		d.Reason = fmt.Sprintf("%d rank(s) hosted locally; S-RAS needs multiple", len(in.Local.Ranks))
		return d
	case in.Local.Availability > s.cfg.FullyUsedAvailability:
		d.Reason = fmt.Sprintf("local availability %.3f > %.3f: not fully used", in.Local.Availability, s.cfg.FullyUsedAvailability)
		return d
	case len(in.Ranks) == 0:
		d.Reason = "no candidate rank"
		return d
	}
	d.Migrate, d.Rank = true, in.Ranks[pick(in.Rand, len(in.Ranks))].ID()
	d.Gain = in.Remote.Availability - in.Local.Availability
	d.Reason = fmt.Sprintf("local fully used (availability %.3f, %d ranks): random rank %s to %s", in.Local.Availability, len(in.Local.Ranks), d.Rank, in.Remote.Node)
	return d
}

func validPolicyName(name string) bool {
	for _, n := range PolicyNames() {
		if name == n {
			return true
		}
	}
	return false
}

// PerRank lets every job choose its own policy: a candidate whose RankProfile.Policy names a
// policy is decided by that policy (with its default configuration) instead of def, so a job
// started with "none" is never moved by any node and a job started with "sras" is balanced
// by S-RAS even on nodes whose default is "mpiios". Ranks without a Policy go to def.
// NewNode applies it (inside Stabilize), so the cooldown and hysteresis hold for every job.
//
// Gains of different policies are not comparable, so when the candidates are split between
// several policies they are asked in a fixed order, def first and then the others by name,
// and the first one that wants to migrate decides. The result stays a pure function of
// DecisionInput.
func PerRank(def Policy) Policy {
	pr := perRank{def: def, byName: map[string]Policy{}}
	for _, name := range PolicyNames() {
		if name == def.Name() {
			pr.byName[name] = def // keep the node's own configuration of its default
			continue
		}
		if p, err := PolicyByName(name); err == nil {
			pr.byName[name] = p
		}
	}
	return pr
}

type perRank struct {
	def    Policy
	byName map[string]Policy
}

// Name is the node's default policy: per-rank choice is not a policy of its own.
func (pr perRank) Name() string { return pr.def.Name() }

// Protocol is the node's default policy's: the protocol belongs to the node.
func (pr perRank) Protocol() Protocol { return protocolOf(pr.def) }

// nameOf is the name of the policy that governs r: its job's, or the node's for ranks
// without a known one.
func (pr perRank) nameOf(r RankProfile) string {
	if r.Policy != "" && pr.byName[r.Policy] != nil {
		return r.Policy
	}
	return pr.def.Name()
}

// exchanges says whether r's own policy (or the node's, for ranks without one) takes part
// in exchanges.
func (pr perRank) exchanges(r RankProfile) bool {
	if p := pr.byName[r.Policy]; r.Policy != "" && p != nil {
		return protocolOf(p).Exchange
	}
	return protocolOf(pr.def).Exchange
}

// rankOrdered is the default policy's (see Balancer).
func (pr perRank) rankOrdered(in DecisionInput) bool {
	ro, ok := pr.def.(rankOrderedPolicy)
	return ok && ro.rankOrdered(in)
}

// Decide splits the candidates by policy and asks each policy about its own ranks.
func (pr perRank) Decide(in DecisionInput) Decision {
	groups := map[string][]RankProfile{}
	for _, r := range in.Ranks {
		name := pr.nameOf(r)
		groups[name] = append(groups[name], r)
	}
	if len(groups) <= 1 {
		if _, ok := groups[pr.def.Name()]; ok || len(groups) == 0 {
			return pr.def.Decide(in) // the common case: everybody follows the node
		}
	}
	order := make([]string, 0, len(groups))
	for name := range groups {
		if name != pr.def.Name() {
			order = append(order, name)
		}
	}
	sort.Strings(order)
	if _, ok := groups[pr.def.Name()]; ok {
		order = append([]string{pr.def.Name()}, order...)
	}
	var why []string
	for _, name := range order {
		sub := in
		sub.Ranks = groups[name]
		d := pr.byName[name].Decide(sub)
		if d.Migrate {
			return d
		}
		why = append(why, fmt.Sprintf("%s (%d rank(s)): %s", name, len(groups[name]), d.Reason))
	}
	return Decision{Policy: pr.def.Name(), Reason: strings.Join(why, "; ")}
}
