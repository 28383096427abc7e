package iosbridge

import (
	"fmt"
	"math"
)

// MPIIOSConfig names the resource weights w_r of the MPI/IOS gain ("resources ... ranked by
// importance to the running application": CPU for computation-intensive codes, bandwidth for
// communication-intensive ones) and the bandwidth assumed before any transfer was measured.
type MPIIOSConfig struct {
	WeightCPU     float64 `msgpack:"weight_cpu"`
	WeightMemory  float64 `msgpack:"weight_memory"`
	WeightNetwork float64 `msgpack:"weight_network"`
	// DefaultBandwidthBps prices migrations to nodes with no LinkProfile yet.
	DefaultBandwidthBps float64 `msgpack:"default_bandwidth_bps"`
}

// DefaultMPIIOSConfig weights CPU most (iterative mesh codes such as the paper's heat
// diffusion are computation bound) and assumes a conservative 100 Mbit/s link.
func DefaultMPIIOSConfig() MPIIOSConfig {
	return MPIIOSConfig{WeightCPU: 0.8, WeightMemory: 0.1, WeightNetwork: 0.1, DefaultBandwidthBps: 12.5e6}
}

// MPIIOSResourceDelta is the normalized gain of one resource, Δ_r = (a − u)/(a + u), with a
// the amount available at the foreign node and u the amount the process uses locally; it lies
// in [−1, 1] so resources with different units can be weighted together. 0 when a+u = 0.
func MPIIOSResourceDelta(available, used float64) float64 {
	if available+used <= 0 {
		return 0
	}
	return (available - used) / (available + used)
}

// MPIIOSGain is the MPI/IOS predicted gain for moving a process group P from l to f:
//
//	Γ = (Σ_r w_r · Δ_r) · log(L(P)) − M(P,l,f)
//
// weighted is Σ w_r·Δ_r, lifeSeconds is L(P), the remaining life expectancy (remaining
// iterations × average iteration time, as the paper estimates it for iterative
// applications), costSeconds is M, the estimated migration cost. log is the natural log and
// L is in seconds; the paper fixes neither, so this is our reading. A life of one second or
// less makes log(L) ≤ 0: such a process never gains from moving, which is the paper's
// intuition ("processes expected to have a short remaining life should not be migrated").
func MPIIOSGain(weighted, lifeSeconds, costSeconds float64) float64 {
	if lifeSeconds <= 0 {
		return math.Inf(-1)
	}
	return weighted*math.Log(lifeSeconds) - costSeconds
}

// MPIIOS is the MPI/IOS paper's reconfiguration policy (§"reconfiguration policies"),
// applied per rank (P = {rank}). Resources and their (a, u):
//
//	CPU:     a = remote FreeCPUs,             u = CPUs the rank uses here;
//	memory:  a = remote MemFreeBytes,         u = the rank's resident memory;
//	network: a = link bandwidth to the stealer, u = the rank's send rate (bytes/s).
//
// Cost M = StateBytes / bandwidth (seconds to ship the checkpoint). The rank with the
// largest positive Γ is given; "node ... migrates the process only if the gain is positive".
type MPIIOS struct{ cfg MPIIOSConfig }

// NewMPIIOS validates cfg and returns the policy.
func NewMPIIOS(cfg MPIIOSConfig) (MPIIOS, error) {
	for _, w := range []float64{cfg.WeightCPU, cfg.WeightMemory, cfg.WeightNetwork} {
		if !finite(w) || w < 0 {
			return MPIIOS{}, fmt.Errorf("iosbridge: mpiios: weight %v: want finite and >= 0", w)
		}
	}
	if cfg.WeightCPU+cfg.WeightMemory+cfg.WeightNetwork == 0 {
		return MPIIOS{}, fmt.Errorf("iosbridge: mpiios: all weights are zero")
	}
	if !finite(cfg.DefaultBandwidthBps) || cfg.DefaultBandwidthBps <= 0 {
		return MPIIOS{}, fmt.Errorf("iosbridge: mpiios: default bandwidth %v: want > 0", cfg.DefaultBandwidthBps)
	}
	return MPIIOS{cfg: cfg}, nil
}

// Name implements Policy.
func (MPIIOS) Name() string { return PolicyMPIIOS }

// Weighted returns Σ_r w_r·Δ_r for moving r from local to remote over a link of bandwidth bw.
func (m MPIIOS) Weighted(r RankProfile, local, remote NodeProfile, bw float64) float64 {
	dCPU := MPIIOSResourceDelta(remote.FreeCPUs(), r.cpuUse(local))
	dMem := MPIIOSResourceDelta(float64(remote.MemFreeBytes), float64(r.memoryBytes()))
	dNet := MPIIOSResourceDelta(bw, r.commRate())
	return m.cfg.WeightCPU*dCPU + m.cfg.WeightMemory*dMem + m.cfg.WeightNetwork*dNet
}

// Decide implements Policy.
func (m MPIIOS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: PolicyMPIIOS, Reason: "no rank with positive gain"}
	bw := m.cfg.DefaultBandwidthBps
	if in.Link != nil && in.Link.Samples > 0 && in.Link.BandwidthBps > 0 {
		bw = in.Link.BandwidthBps
	}
	best := 0.0
	for _, r := range in.Ranks {
		life := float64(r.RemainingIterations) * r.IterationTime.Seconds()
		w := m.Weighted(r, in.Local, in.Remote, bw)
		cost := float64(r.StateBytes) / bw
		g := MPIIOSGain(w, life, cost)
		if !finite(g) || g <= best {
			continue
		}
		best = g
		d.Migrate, d.Rank, d.Gain = true, r.ID(), g
		d.Reason = fmt.Sprintf("Σw·Δ=%.4g × ln(L=%.4gs)=%.4g − cost %.4gs = %.4g for %s to %s", w, life, math.Log(life), cost, g, r.ID(), in.Remote.Node)
	}
	return d
}
