package testbed

import (
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// Isolation selects how nodes are separated.
type Isolation string

// Isolation modes.
const (
	// IsolationAuto isolates nodes (network namespaces and cgroups) when this process can,
	// and falls back to IsolationLoopback otherwise, logging why.
	IsolationAuto Isolation = "auto"
	// IsolationNetns requires network namespaces and cgroup CPU quotas; Start fails without.
	IsolationNetns Isolation = "netns"
	// IsolationLoopback runs every node on 127.0.0.1 without CPU quotas.
	IsolationLoopback Isolation = "loopback"
)

// Fixed names and addresses of the emulated network. They are shared by every testbed on a
// machine, which is why only one isolated cluster runs at a time (see Start).
const (
	Prefix       = "mpios-"            // of every network namespace and root-side link the testbed makes
	BridgeName   = "mpios-br0"         // the bridge joining the nodes and the root namespace
	BridgeIP     = "10.77.0.1"         // the root namespace's address on the bridge
	BridgeMAC    = "02:6d:70:69:6f:73" // the bridge's fixed, locally administered MAC address
	SubnetPrefix = 24                  // of 10.77.0.0/24
	CgroupName   = "mpios"             // the cgroup under which every node's cgroup is made
	MaxNodes     = 250                 // node addresses run from 10.77.0.2 to 10.77.0.251
	RouterIP     = "10.77.0.254"       // the userspace delay router's address (SetLink without netem)
	firstHostIP  = 2                   // last byte of the first node's address
	subnetBase   = "10.77.0."          // addresses of the subnet
	lockFileName = "mpios-testbed.lock"
)

// Defaults for Options fields left zero.
const (
	DefaultSlots       = 2
	DefaultCFSPeriod   = 100 * time.Millisecond
	DefaultNodeTimeout = 20 * time.Second
	DefaultStopTimeout = 15 * time.Second
)

// NodeSpec names a node to start with the cluster.
type NodeSpec struct {
	Name string  // node name: letters, digits, '-' and '_' (job.ValidateNode)
	CPUs float64 // CPU quota in CPUs (0.5 = half a core); 0 = no quota
}

// Options configures Start. Zero values select the documented defaults.
type Options struct {
	// NATSURL is the control plane the nodes register on. Empty: Start runs an embedded NATS
	// server with random credentials, on BridgeIP when isolated, else on 127.0.0.1. A given
	// URL must be reachable from inside the node namespaces when isolated (not 127.0.0.1).
	NATSURL string

	// PCMD is the path of the pcmd binary. Empty: Start builds ./cmd/pcmd of this module
	// into BinDir (needs the go command and the module source).
	PCMD string
	// LoadGen is the path of the load generator (package testbed/loadgen). Empty: Start
	// builds it into BinDir.
	LoadGen string
	// NodeExec is the path of the helper that starts programs inside a node's cgroup and
	// network namespace (package testbed/nodeexec). Empty: Start builds it into BinDir.
	NodeExec string
	// NATSD is the path of the sites' NATS server program (package testbed/natsd). Empty:
	// Start builds it into BinDir when Sites is set.
	NATSD string

	// Sites lists the nodes of each site (site name → node names), as the clusters of a
	// grid, each of which runs its own control plane: every site gets its own NATS server,
	// in a network namespace of its own on the bridge (SiteServer names it for SetLink),
	// the site's nodes connect to it, and the servers are joined by routes (a NATS
	// cluster, routes authenticated by their own random credentials), so every subject
	// still reaches every node. A link set between the groups of two sites' nodes and
	// servers then delays what the agents of one site send to the other's, as the data
	// between their nodes. The testbed itself and mpirun (NATSURL) use the first site's
	// server in name order; a node in no site too. Needs an isolated cluster and an empty
	// NATSURL. Empty: one NATS server on the bridge for all.
	Sites map[string][]string

	// WorkDir holds the built binaries (bin/), node logs (logs/) and the checkpoint stores.
	// Empty: a new temporary directory, removed by Close.
	WorkDir string
	// StoreDir is the root of the nodes' checkpoint stores; node NAME gets StoreDir/NAME as
	// its pcmd --store. Empty: WorkDir/store.
	StoreDir string

	// Allow lists the --allow patterns of every node (absolute paths, filepath.Match).
	// Empty: BinDir()/*, so programs copied or built into BinDir may run.
	Allow []string
	// Slots is every node's --slots. 0: DefaultSlots.
	Slots int
	// Heartbeat is pcmd's --heartbeat. 0: pcmd's default (1s).
	Heartbeat time.Duration
	// KillGrace is pcmd's --kill-grace. 0: pcmd's default.
	KillGrace time.Duration
	// ExtraArgs are added to every "pcmd serve" command line, e.g. the IOS agent's options.
	ExtraArgs []string
	// NodeArgs are added to the "pcmd serve" command line of the node they are listed
	// under (after ExtraArgs), e.g. its --cluster; also for nodes added later.
	NodeArgs map[string][]string
	// ExtraEnv is added to the environment of every pcmd, e.g. an IOS policy knob. The
	// ranks get only the variables pcmd passes on (spawner.PassedEnv, and pcmd serve
	// --pass-env NAME through ExtraArgs). MPIOS_* variables of this process are never
	// passed on.
	ExtraEnv []string

	// Isolation selects network namespaces and quotas or loopback. "": IsolationAuto.
	Isolation Isolation
	// UserspaceDelay makes SetLink delay packets in the userspace delay router even where
	// the kernel has netem (which is otherwise preferred).
	UserspaceDelay bool

	// CFSPeriod is the CFS bandwidth period of the node quotas. 0: DefaultCFSPeriod.
	CFSPeriod time.Duration

	// NodeTimeout bounds how long AddNode waits for a node's first heartbeat.
	// 0: DefaultNodeTimeout.
	NodeTimeout time.Duration
	// StopTimeout bounds how long RemoveNode waits for pcmd to stop after SIGTERM before it
	// kills the node's processes. 0: DefaultStopTimeout.
	StopTimeout time.Duration

	// Nodes are started by Start, in order, as by AddNode.
	Nodes []NodeSpec

	// Log receives the testbed's messages. nil: stderr, prefixed "testbed: ".
	Log *log.Logger
}

// setDefaults fills zero fields and validates o.
func (o *Options) setDefaults() error {
	if o.Log == nil {
		o.Log = log.New(os.Stderr, "testbed: ", log.LstdFlags)
	}
	switch o.Isolation {
	case "":
		o.Isolation = IsolationAuto
	case IsolationAuto, IsolationNetns, IsolationLoopback:
	default:
		return fmt.Errorf("testbed: isolation %q: want %q, %q or %q", o.Isolation, IsolationAuto, IsolationNetns, IsolationLoopback)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.Slots < 1 || o.Slots > job.MaxSlots {
		return fmt.Errorf("testbed: %d slots per node: want 1 to %d", o.Slots, job.MaxSlots)
	}
	if o.CFSPeriod == 0 {
		o.CFSPeriod = DefaultCFSPeriod
	}
	if o.CFSPeriod < time.Millisecond || o.CFSPeriod > time.Second {
		return fmt.Errorf("testbed: CFS period %v: want 1ms to 1s", o.CFSPeriod)
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = DefaultNodeTimeout
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.NodeTimeout < 0 || o.StopTimeout < 0 || o.Heartbeat < 0 || o.KillGrace < 0 {
		return errors.New("testbed: timeouts, heartbeat and kill grace must not be negative")
	}
	if o.Heartbeat != 0 && (o.Heartbeat < job.MinInterval || o.Heartbeat > job.MaxInterval) {
		return fmt.Errorf("testbed: heartbeat %v: want %v to %v", o.Heartbeat, job.MinInterval, job.MaxInterval)
	}
	for _, p := range o.Allow {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("testbed: allow pattern %q: want an absolute path pattern", p)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("testbed: allow pattern %q: %w", p, err)
		}
	}
	for _, kv := range o.ExtraEnv {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("testbed: extra environment entry %q: want KEY=VALUE", kv)
		}
	}
	if err := validateSites(o); err != nil {
		return err
	}
	for _, p := range []*string{&o.PCMD, &o.LoadGen, &o.NodeExec, &o.NATSD, &o.WorkDir, &o.StoreDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("testbed: %s: %w", *p, err)
		}
		*p = abs
	}
	if o.NATSURL != "" {
		if _, err := url.Parse(strings.Split(o.NATSURL, ",")[0]); err != nil {
			return fmt.Errorf("testbed: NATS URL: %w", err)
		}
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if err := validateNodeSpec(n.Name, n.CPUs); err != nil {
			return err
		}
		if seen[n.Name] {
			return fmt.Errorf("testbed: node %s is listed twice", n.Name)
		}
		seen[n.Name] = true
	}
	return nil
}

// validateNodeSpec checks a node's name and CPU quota.
func validateNodeSpec(name string, cpus float64) error {
	if err := job.ValidateNode(name); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if len(Prefix+name) > 63 {
		return fmt.Errorf("testbed: node name %q: at most %d characters", name, 63-len(Prefix))
	}
	if cpus != 0 && !(cpus >= 0.01 && cpus <= 1024) {
		return fmt.Errorf("testbed: node %s: %v CPUs: want 0 (no quota) or 0.01 to 1024", name, cpus)
	}
	return nil
}

// loopbackHost reports whether the host of a NATS URL is a loopback name or address, which
// the node namespaces cannot reach.
func loopbackHost(natsURL string) bool {
	for _, u := range strings.Split(natsURL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			continue
		}
		h := pu.Hostname()
		if h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1" {
			return true
		}
	}
	return false
}
