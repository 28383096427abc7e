package iosbridge

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// This file is the hierarchical malleability policy of Desell's thesis §2.2.2 (eq. 2.4–2.15,
// Table 2.4, the restrictions of §2.2.2.3) as pure functions: agents report their
// processing power, a manager elected per cluster (and one for the grid, whose subordinates
// are the cluster managers) splits its data among its subordinates in proportion to their
// power when their iteration times diverge, and the lowest level turns each node's share of
// the data into a number of ranks. The result is a typed MalleabilityDecision; carrying it
// out (a job.ControlRequest of kind "resize", a data rebalance, migrations) is the agent
// driver's business.

// Processor is one processor an agent manages (eq. 2.4: mp_{a_i}).
type Processor struct {
	// GHz is the clock rate, mp_ghz; Available the idle share of it in [0,1], mp_a.
	GHz       float64
	Available float64
	// CacheBytes are the sizes of the cache levels, fastest first (c_{j,p} of eq. 2.9).
	CacheBytes []float64
}

// ProcessingPower is eq. 2.4: p_a = Σ mp_ghz × mp_a over the agent's processors.
func ProcessingPower(ps []Processor) float64 {
	var p float64
	for _, x := range ps {
		p += x.GHz * x.Available
	}
	return p
}

// LinearCost is the iteration operations estimate of eq. 2.11, f(d) = A·d + B: A the
// operations per unit of data, B the start-up operations of an iteration.
type LinearCost struct{ A, B float64 }

// DistributeData solves eq. 2.5–2.8 for f of eq. 2.11 in closed form (eq. 2.12–2.15):
// with p'_i = p_i / Σ p (eq. 2.5), d_i = p'_i·(d_t + n·B/A) − B/A, which makes every
// f(d_i)/p'_i equal (eq. 2.6) and Σ d_i = d_t (eq. 2.7). It returns the normalized powers
// and the data per subordinate; eq. 2.8 (every d_i > 0) failing is an error: that
// subordinate is too slow to be given any data at this start-up cost.
func DistributeData(powers []float64, total float64, f LinearCost) (normalized, data []float64, err error) {
	if len(powers) == 0 {
		return nil, nil, errors.New("iosbridge: distribute data: no subordinates")
	}
	if !(f.A > 0) || !finite(f.A) || !finite(f.B) || f.B < 0 {
		return nil, nil, fmt.Errorf("iosbridge: distribute data: cost f(d)=%g·d+%g needs a > 0 and b >= 0 (eq. 2.11)", f.A, f.B)
	}
	if !(total > 0) || !finite(total) {
		return nil, nil, fmt.Errorf("iosbridge: distribute data: total data %g must be positive", total)
	}
	var sum float64
	for i, p := range powers {
		if !finite(p) || p < 0 {
			return nil, nil, fmt.Errorf("iosbridge: distribute data: power %g of subordinate %d", p, i)
		}
		sum += p
	}
	if sum <= 0 {
		return nil, nil, errors.New("iosbridge: distribute data: no processing power available")
	}
	n := float64(len(powers))
	normalized, data = make([]float64, len(powers)), make([]float64, len(powers))
	for i, p := range powers {
		normalized[i] = p / sum
		data[i] = normalized[i]*(total+n*f.B/f.A) - f.B/f.A
		if !(data[i] > 0) {
			return nil, nil, fmt.Errorf("iosbridge: distribute data: subordinate %d would get %g data (eq. 2.8 needs > 0)", i, data[i])
		}
	}
	return normalized, data, nil
}

// Granularity is eq. 2.9 and 2.10: the data per entity g for a processor holding data d,
// the smallest cache level c_j (times M, how many times larger than a cache an entity's data
// may be and still use it well) for which fewer than maxEntities entities are needed, else
// d/maxEntities; and the number of entities e = max(d/g, 1), rounded up to whole ranks so
// that no entity holds more than g. M ≤ 0 or no cache sizes mean the memory hierarchy does
// not matter (M = ∞ in the thesis): one entity. cacheLevel is the index of the cache level
// used, len(caches) when none was.
func Granularity(d float64, caches []float64, m float64, maxEntities int) (g float64, entities, cacheLevel int) {
	if maxEntities < 1 {
		maxEntities = 1
	}
	level := len(caches)
	g = d / float64(maxEntities)
	if m > 0 && !math.IsInf(m, 1) {
		best := math.Inf(1)
		for j, c := range caches {
			if c > 0 && d/(c*m) < float64(maxEntities) && c*m < best {
				best, level = c*m, j
			}
		}
		if !math.IsInf(best, 1) {
			g = best
		}
	} else {
		g = d
	}
	e := 1
	if g > 0 && d/g > 1 {
		e = int(math.Ceil(d/g - 1e-9))
	}
	return g, e, level
}

// Subordinate is what a manager knows about one subordinate: an IOS agent (a node) or,
// one level up, a cluster manager speaking for its cluster (see Aggregate).
type Subordinate struct {
	// Name is the node or cluster; Power is p_a of eq. 2.4 (0: unavailable).
	Name  string
	Power float64
	// Data is what it holds now, Ranks the ranks (entities) it hosts now, of the job planned.
	Data  float64
	Ranks []RankID
	// IterationTime is its average iteration time (the slowest of its ranks).
	IterationTime time.Duration
	// CacheBytes are its processors' cache sizes, fastest first, for eq. 2.9; nil for a
	// cluster (granularity is decided at the lowest level).
	CacheBytes []float64
}

// Aggregate is how a cluster manager appears to the grid manager: "a manager views its
// subordinate IOS agents as collective individuals" — summed power, data and ranks, the
// slowest iteration time.
func Aggregate(name string, subs []Subordinate) Subordinate {
	a := Subordinate{Name: name}
	for _, s := range subs {
		a.Power += s.Power
		a.Data += s.Data
		a.Ranks = append(a.Ranks, s.Ranks...)
		a.IterationTime = max(a.IterationTime, s.IterationTime)
	}
	return a
}

// ElectManager picks a group's manager deterministically from its live members (power > 0):
// the most powerful, ties to the smallest name. Every member computes the same answer from
// the same heartbeat table, so no election messages are needed; when the manager leaves,
// the next computation elects another. ok is false when no member is live.
func ElectManager(members []Subordinate) (string, bool) {
	best := -1
	for i, m := range members {
		if m.Power <= 0 {
			continue
		}
		if best < 0 || m.Power > members[best].Power || (m.Power == members[best].Power && m.Name < members[best].Name) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return members[best].Name, true
}

// HierarchyConfig tunes the manager's policy; every field has a documented zero value.
type HierarchyConfig struct {
	// Cost is f(d) of eq. 2.11; the zero value means A = 1, B = 0 (linear, no start-up).
	Cost LinearCost
	// Divergence triggers a reconfiguration when the slowest subordinate's iteration time is
	// more than (1+Divergence) times the fastest's ("some threshold slower"); 0 means 0.2.
	Divergence float64
	// MinEntityData is §2.2.2.3's minimum actor data: a plan that would leave a rank with
	// less is not carried out. 0 means no minimum.
	MinEntityData float64
	// CacheMultiple is M of eq. 2.9; 0 means the memory hierarchy does not matter.
	CacheMultiple float64
	// MaxEntities is max_e of eq. 2.9, the limit of ranks per processor group; 0 means 1.
	MaxEntities int
	// Tolerance is the share of a subordinate's data below which a change is not worth a
	// rebalance; 0 means 0.02.
	Tolerance float64
	// WeightThreshold is how much a rank's share of the data may differ from its current
	// block weight, as a fraction of it, before ClusterRequests rebalances a malleable job;
	// 0 means DefaultWeightThreshold.
	WeightThreshold float64
}

func (c HierarchyConfig) withDefaults() HierarchyConfig {
	if c.Cost == (LinearCost{}) {
		c.Cost = LinearCost{A: 1}
	}
	if c.Divergence == 0 {
		c.Divergence = 0.2
	}
	if c.MaxEntities == 0 {
		c.MaxEntities = 1
	}
	if c.Tolerance == 0 {
		c.Tolerance = 0.02
	}
	return c
}

// Level says where in the hierarchy a decision was made.
type Level string

// The levels of §2.2.2.1.
const (
	LevelNode    Level = "node"
	LevelCluster Level = "cluster"
	LevelGrid    Level = "grid"
)

// Share is one subordinate's part of a plan: the data of Table 2.4 and the ranks of eq. 2.10.
type Share struct {
	Name string `msgpack:"name"`
	// Normalized is p' (eq. 2.5), Data is d (eq. 2.15), DataPerRank is Data/Ranks.
	Normalized  float64 `msgpack:"normalized"`
	Data        float64 `msgpack:"data"`
	Ranks       int     `msgpack:"ranks"`
	DataPerRank float64 `msgpack:"data_per_rank"`
	// CacheLevel is the cache level its ranks' data fits (eq. 2.9), -1 above the cluster level.
	CacheLevel int `msgpack:"cache_level"`
}

// ResizeRequest asks a job to change its number of ranks (malleability: split or merge). It
// is what the agent driver turns into a job.ControlRequest of kind "resize".
type ResizeRequest struct {
	Job string `msgpack:"job"`
	// Ranks is the new world size; PerNode says how many ranks each named node should host.
	Ranks   int            `msgpack:"ranks"`
	PerNode map[string]int `msgpack:"per_node"`
}

// RebalanceRequest asks a job to redistribute its data: Fractions[node] of the total to the
// ranks on node, split evenly among them.
type RebalanceRequest struct {
	Job       string             `msgpack:"job"`
	Fractions map[string]float64 `msgpack:"fractions"`
}

// MalleabilityDecision is a manager's verdict for one job: nothing (Reason says why), or a
// resize, migrations and/or a data rebalance, to be applied in that order.
type MalleabilityDecision struct {
	Job     string `msgpack:"job"`
	Level   Level  `msgpack:"level"`
	Manager string `msgpack:"manager"`
	// Shares is the plan for every subordinate, in the order given.
	Shares     []Share           `msgpack:"shares"`
	Resize     *ResizeRequest    `msgpack:"resize,omitempty"`
	Migrations []Migration       `msgpack:"migrations,omitempty"`
	Rebalance  *RebalanceRequest `msgpack:"rebalance,omitempty"`
	Reason     string            `msgpack:"reason"`
}

// Empty reports whether the decision asks for nothing.
func (d MalleabilityDecision) Empty() bool {
	return d.Resize == nil && len(d.Migrations) == 0 && d.Rebalance == nil
}

// Diverged is the trigger of §2.2.2.1: a subordinate hosting ranks became unavailable, or
// the slowest iteration time is more than (1+Divergence) times the fastest.
func (c HierarchyConfig) Diverged(subs []Subordinate) (bool, string) {
	c = c.withDefaults()
	var fast, slow time.Duration
	var fastName, slowName string
	for _, s := range subs {
		if s.Power <= 0 && len(s.Ranks) > 0 {
			return true, fmt.Sprintf("%s hosts %d rank(s) but is unavailable", s.Name, len(s.Ranks))
		}
		if s.Power > 0 && len(s.Ranks) == 0 {
			return true, fmt.Sprintf("%s is available and idle", s.Name)
		}
		if s.IterationTime <= 0 || len(s.Ranks) == 0 {
			continue
		}
		if fastName == "" || s.IterationTime < fast {
			fast, fastName = s.IterationTime, s.Name
		}
		if slowName == "" || s.IterationTime > slow {
			slow, slowName = s.IterationTime, s.Name
		}
	}
	if fastName == "" || float64(slow) <= (1+c.Divergence)*float64(fast) {
		return false, fmt.Sprintf("iteration times within %.0f%% (fastest %v, slowest %v)", 100*c.Divergence, fast, slow)
	}
	return true, fmt.Sprintf("%s iterates in %v, %s in %v: more than %.0f%% slower", slowName, slow, fastName, fast, 100*c.Divergence)
}

// Plan is the manager's computation at one level: if Diverged (or force), split the job's
// data among subs by eq. 2.4–2.15, give each node-level subordinate its ranks by eq.
// 2.9–2.10 (cluster-level subordinates keep their rank count in proportion to their data,
// their own manager refines it), apply §2.2.2.3's restrictions, and express the difference
// with the current state as requests: a resize if the total number of ranks changes,
// migrations if only their placement does, a rebalance if any node's data changes by more
// than Tolerance. Subordinates with no power get nothing (their ranks leave).
func (c HierarchyConfig) Plan(job string, level Level, subs []Subordinate, force bool) (MalleabilityDecision, error) {
	c = c.withDefaults()
	manager, ok := ElectManager(subs)
	d := MalleabilityDecision{Job: job, Level: level, Manager: manager}
	if !ok {
		return d, errors.New("iosbridge: hierarchical plan: no subordinate is available")
	}
	trig, why := c.Diverged(subs)
	d.Reason = why
	if !trig && !force {
		return d, nil
	}
	var live []int
	var powers []float64
	var total float64
	current := 0
	for i, s := range subs {
		total += s.Data
		current += len(s.Ranks)
		if s.Power > 0 {
			live = append(live, i)
			powers = append(powers, s.Power)
		}
	}
	norm, data, err := DistributeData(powers, total, c.Cost)
	if err != nil {
		return d, err
	}
	d.Shares = make([]Share, len(subs))
	for i, s := range subs {
		d.Shares[i] = Share{Name: s.Name, CacheLevel: -1}
	}
	worstLevel := -1
	for k, i := range live {
		sh := &d.Shares[i]
		sh.Normalized, sh.Data = norm[k], data[k]
		if level == LevelNode {
			_, sh.Ranks, sh.CacheLevel = Granularity(sh.Data, subs[i].CacheBytes, c.CacheMultiple, c.MaxEntities)
			if len(subs[i].Ranks) > 0 {
				worstLevel = max(worstLevel, sh.CacheLevel)
			}
		}
	}
	if level != LevelNode {
		apportion(d.Shares, live, current, total)
	}
	// §2.2.2.3: a newcomer whose ranks would use a slower cache level than the nodes already
	// working would slow every iteration: splitting to it is disabled.
	if level == LevelNode && c.CacheMultiple > 0 && worstLevel >= 0 {
		var excluded []string
		for _, i := range live {
			if len(subs[i].Ranks) == 0 && d.Shares[i].CacheLevel > worstLevel {
				excluded = append(excluded, subs[i].Name)
			}
		}
		if len(excluded) > 0 {
			subs = append([]Subordinate(nil), subs...) // the caller's slice stays as given
			for _, i := range live {
				if len(subs[i].Ranks) == 0 && d.Shares[i].CacheLevel > worstLevel {
					subs[i].Power = 0
				}
			}
			again, err := c.Plan(job, level, subs, true)
			again.Reason = fmt.Sprintf("%s; splitting to %s disabled: their ranks would use a slower cache level", d.Reason, strings.Join(excluded, ", "))
			return again, err
		}
	}
	for i := range d.Shares {
		sh := &d.Shares[i]
		if sh.Ranks > 0 {
			sh.DataPerRank = sh.Data / float64(sh.Ranks)
			if c.MinEntityData > 0 && sh.DataPerRank < c.MinEntityData {
				d.Reason = fmt.Sprintf("%s; not done: %s would hold %.4g data per rank, below the minimum %.4g (§2.2.2.3)", d.Reason, sh.Name, sh.DataPerRank, c.MinEntityData)
				return MalleabilityDecision{Job: job, Level: level, Manager: manager, Shares: d.Shares, Reason: d.Reason}, nil
			}
		}
	}
	c.requests(&d, subs, total)
	return d, nil
}

// apportion gives the live subordinates above the node level the job's current ranks in
// proportion to their data (largest remainders, at least one each while ranks last): the
// rank count changes only at the node level, where granularity is decided.
func apportion(shares []Share, live []int, ranks int, total float64) {
	type rem struct {
		i    int
		frac float64
	}
	var rems []rem
	given := 0
	for _, i := range live {
		exact := float64(ranks) * shares[i].Data / total
		shares[i].Ranks = int(math.Floor(exact))
		given += shares[i].Ranks
		rems = append(rems, rem{i, exact - math.Floor(exact)})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].frac > rems[b].frac })
	for k := 0; given < ranks && len(rems) > 0; k = (k + 1) % len(rems) {
		shares[rems[k].i].Ranks++
		given++
	}
}

// requests turns the shares into what must change.
func (c HierarchyConfig) requests(d *MalleabilityDecision, subs []Subordinate, total float64) {
	want, have := 0, 0
	for i, s := range subs {
		want += d.Shares[i].Ranks
		have += len(s.Ranks)
	}
	if want != have {
		d.Resize = &ResizeRequest{Job: d.Job, Ranks: want, PerNode: map[string]int{}}
		for _, sh := range d.Shares {
			d.Resize.PerNode[sh.Name] = sh.Ranks
		}
	} else {
		d.Migrations = placeRanks(d.Shares, subs)
	}
	for i, s := range subs {
		if math.Abs(d.Shares[i].Data-s.Data) > c.Tolerance*math.Max(d.Shares[i].Data, s.Data) {
			d.Rebalance = &RebalanceRequest{Job: d.Job, Fractions: map[string]float64{}}
			for _, sh := range d.Shares {
				d.Rebalance.Fractions[sh.Name] = sh.Data / total
			}
			break
		}
	}
}

// placeRanks moves ranks from subordinates with more than their share to those with fewer:
// the highest-numbered surplus ranks first, to the subordinates in the given order, so the
// plan is deterministic.
func placeRanks(shares []Share, subs []Subordinate) []Migration {
	var surplus []RankID
	for i, s := range subs {
		if extra := len(s.Ranks) - shares[i].Ranks; extra > 0 {
			ranks := append([]RankID(nil), s.Ranks...)
			sort.Slice(ranks, func(a, b int) bool { return ranks[a].Rank < ranks[b].Rank })
			surplus = append(surplus, ranks[len(ranks)-extra:]...)
		}
	}
	var out []Migration
	for i, s := range subs {
		for need := shares[i].Ranks - len(s.Ranks); need > 0 && len(surplus) > 0; need-- {
			out = append(out, Migration{Rank: surplus[0], To: s.Name, Policy: "hierarchical",
				Reason: fmt.Sprintf("%s's share is %d rank(s), it hosts %d", s.Name, shares[i].Ranks, len(s.Ranks))})
			surplus = surplus[1:]
		}
	}
	return out
}
