// Command pcmd is the mpios node daemon: "pcmd serve" runs on every node of a cluster and
// starts ranks for "mpirun --hosts"; "pcmd status" shows the nodes and their ranks. See
// "pcmd --help" and docs/pcmd.md; the work is done by internal/pcmd (the daemon) and
// internal/nodestatus (the client commands).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/urfave/cli/v2"

	"github.com/mpios/mpios/internal/agentdriver"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/pcmd"
	"github.com/mpios/mpios/internal/spawner"
	"github.com/mpios/mpios/iosbridge"
)

// policyHelp describes the policies for --policy.
const policyHelp = "mpiios (the MPI/IOS gain), sras, atsras, flcras (Desell's RAS policies), rs, ars, nrs, nrs-ars (the IO paper's random stealing: load-sensitive, actor-topology, within latency locales), crs (Satin's cluster-aware stealing, see --cluster), robinhood, sheriff, rhns (Bustos' push from overloaded nodes, ranked stealing, both) or none (never migrate)"

// statusUsage is the exit status for command-line mistakes.
const statusUsage = 2

const helpText = `pcmd - the mpios node daemon

USAGE:
   pcmd serve --node NAME --nats URL --allow GLOB [OPTIONS]
   pcmd status [--json] [--nats URL]
   pcmd migrate --job JOB --rank R --to NODE [--nats URL]
   pcmd checkpoint --job JOB [--nats URL]
   pcmd resize --job JOB --np M [--on NODE[:K],...] [--reason TEXT] [--nats URL]
   pcmd drain [--node NAME] [--nats URL]

COMMANDS:
   serve        run the daemon of this node: register it on NATS (heartbeats),
                start ranks for "mpirun --hosts", relay their output and exit,
                stop them on request and when pcmd stops; its IOS agent profiles
                the node, steals work for it and migrates ranks (--policy)
   status       list the nodes (alive or gone, slots, load, IOS agent) and the
                ranks they run
   migrate      ask a running job to move a rank to another node
   checkpoint   ask a running job to take a checkpoint now
   resize       ask a running job to change its number of ranks (split or merge)
   drain        make a node leave gracefully: it takes no new ranks, asks the
                jobs to move its ranks to nodes with free slots, and exits
                once it runs none

   "pcmd COMMAND --help" describes each command and its options.

NATS:
   Every command talks to a NATS server (--nats URL, a comma-separated list for a
   cluster; tls://HOST:PORT requires TLS). Authenticate with --nats-creds FILE (a
   .creds file from nsc), --nats-nkey FILE (an NKey user seed), --nats-token-file
   FILE, or --nats-user U with the password in $PCMD_NATS_PASSWORD. Each flag can
   also be set as $PCMD_NATS_CREDS, $PCMD_NATS_NKEY, $PCMD_NATS_TOKEN_FILE,
   $PCMD_NATS_USER, and a token as $PCMD_NATS_TOKEN: unlike the command line,
   other users cannot read these. (--nats-token, --nats-pass and credentials in
   the URL still work, visible to every user in the process list.) For TLS,
   --nats-ca FILE verifies the server, --nats-cert and --nats-key give a client
   certificate. Without --nats, status, migrate and checkpoint use the server of
   the newest mpirun running for this user. See docs/security.md.

EXAMPLES:
   pcmd serve --node n1 --nats nats://10.0.0.1:4222 --advertise 10.0.0.11 \
              --allow '/opt/mpios/bin/*' --store /var/lib/mpios/ckpt
   pcmd status --nats nats://10.0.0.1:4222
   mpirun --nats nats://10.0.0.1:4222 --hosts n1:4,n2:4 /opt/mpios/bin/heat2d
`

const serveDescription = `Runs until SIGINT or SIGTERM. SIGTERM first drains the node: it takes no new
ranks, its ranks migrate to peers with free slots, and pcmd exits once they are gone;
a drain that cannot place them says why and pcmd serves on. A second SIGTERM, or the
first with --force, and SIGINT stop the ranks at once. Registers the node on NATS: every --heartbeat it
publishes its name, slots (total and in use), load average, advertise address and
version on mpios.nodes.heartbeat, and answers on mpios.node.NAME.info. A node that
misses 3 heartbeats is shown as gone.

Starts ranks on request (mpios.node.NAME.spawn), at most --slots at once, but only
programs whose absolute, cleaned path matches an --allow pattern: without --allow
every request is refused. The request chooses the arguments, unless --pin-args
fixes them for the program. Each rank runs in its own process group under pcmd's
user. Its environment is minimal: from pcmd's own only PATH, HOME, USER, LOGNAME,
SHELL, TMPDIR, TZ, LANG, LANGUAGE, LC_*, XDG_RUNTIME_DIR, XDG_STATE_HOME and the
variables named by --pass-env (never pcmd's NATS credentials), plus the job's
MPIOS_* variables, with MPIOS_BIND set to --advertise, MPIOS_NODE to --node and
MPIOS_CKPT_DIR to --store. Its output lines and exit status go to
mpios.job.JOB.rank.R.out and .exit; pcmd keeps its latest 1 MiB of output and, for 2
minutes after it ended, its exit status, for its mpirun to ask again after a NATS
outage (mpios.node.NAME.replay). Ranks die with pcmd; when pcmd is stopped it
stops them (SIGTERM, SIGKILL after --kill-grace) and deregisters the node. Every
rank holds a lease: the ranks of a job whose mpirun sent no keepalive (it died) for
the lease it asked for, at most --lease, are stopped too.

With --store, ranks restarting on other nodes read the checkpoint pieces in it
through pcmd (mpios.node.NAME.piece): each request gets a one-time TCP offer, at
most 16 open per requesting connection and 128 per node. The store also keeps the
buddy copies of other nodes' pieces (mpios.node.NAME.piececopy), so that losing one
node loses no committed checkpoint. --ckpt-store mem keeps pieces and copies in
memory instead, at most --ckpt-mem-cap MiB, for as long as pcmd runs; past three
quarters of the cap, the checkpoints of finished jobs go, oldest first.

IOS agent (after MPI/IOS; --no-ios turns it off): every --ios-period it samples
the node's CPUs (/proc/stat, clipped by pcmd's cgroup CPU quota) and memory, and
keeps the latest profile of each of its ranks (mpios.job.*.profile). While at
least --steal-threshold of its CPUs are idle it sends a steal request carrying
its profile to a random peer (the nodes pcmd hears heartbeats from), which
forwards it up to --steal-ttl times; at most one is outstanding. A node that
receives one asks its decision policy (--policy) whether moving one of its ranks
to the stealer pays, never moving a rank again within --ios-cooldown (a sixth of
it for an exchange between busy nodes of atsras, flcras, ars), and if so
asks the rank's job to migrate it (mpios.job.JOB.ctl). A job started with
"mpirun --policy P" is decided by P on every node; "none" never migrates.
The agent times the round trip of its heartbeats to every peer (an echo):
nrs and nrs-ars steal within the nearest latency locale first (local <= 10 ms,
regional <= 100 ms, national <= 250 ms, then international). With --policy crs
steals stay inside the node's --cluster, but for one asynchronous steal in
another cluster at a time; robinhood makes an overloaded node offer a rank to
the first of 3 peers with room that answers, sheriff makes a node with room
steal from peers with fewer (or slower) CPUs (heartbeats name the best nodes
with room and the weakest with ranks, a few hops around), rhns does both.
"pcmd status" shows each agent's state and recent decisions.`

// natsFlags are the connection options common to all commands.
func natsFlags(required bool) []cli.Flag {
	natsUsage := "NATS server `URL`, or comma-separated URLs of a cluster"
	if !required {
		natsUsage += " (default: that of the newest running mpirun)"
	}
	return append([]cli.Flag{&cli.StringFlag{Name: "nats", Usage: natsUsage}}, natsCLI.Flags()...)
}

// natsCLI: pcmd's credentials come from flags, files or $PCMD_NATS_*; --nats-token and
// --nats-pass stay for compatibility.
var natsCLI = natsconn.CLI{EnvPrefix: "PCMD_NATS_", SecretFlags: true}

func natsOptions(c *cli.Context, url string) pcmd.NATSOptions { return natsCLI.Options(c, url) }

func main() {
	// SIGTERM is pcmd serve's own (a graceful leave first); elsewhere it ends pcmd as SIGINT.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	code := runMain(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// leaveOnSIGTERM makes SIGTERM a graceful leave of pcmd serve: the first closes the
// returned channel (Config.Leave), the second, or the first with force, cancels the
// returned context as SIGINT does.
func leaveOnSIGTERM(ctx context.Context, force bool) (context.Context, <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	leave := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		left := force
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				if left {
					cancel()
					return
				}
				left = true
				close(leave)
			}
		}
	}()
	return ctx, leave
}

// usageError is a command-line mistake: reported in one line, exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// exitError carries an exit status for an outcome already reported.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runMain is pcmd with its process environment made explicit. It returns the exit status.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := newApp(ctx, stdout, stderr).Run(args)
	var (
		ue *usageError
		ee *exitError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pcmd: %v (see pcmd --help)\n", ue)
		return statusUsage
	default:
		msg, _ := strings.CutPrefix(err.Error(), "pcmd: ")
		fmt.Fprintf(stderr, "pcmd: %s\n", msg)
		return 1
	}
}

func newApp(ctx context.Context, stdout, stderr io.Writer) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error { return &usageError{msg: err.Error()} }
	return &cli.App{
		Name:                      "pcmd",
		Usage:                     "the mpios node daemon",
		HideHelpCommand:           true,
		HideVersion:               true,
		CustomAppHelpTemplate:     helpText,
		Writer:                    stdout,
		ErrWriter:                 stderr,
		DisableSliceFlagSeparator: true, // an --allow pattern may contain a comma
		OnUsageError:              onUsage,
		ExitErrHandler:            func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return &usageError{fmt.Sprintf("unknown command %q", c.Args().First())}
			}
			return &usageError{"missing command"}
		},
		Commands: []*cli.Command{
			{
				Name:        "serve",
				Usage:       "run the node daemon",
				UsageText:   "pcmd serve --node NAME --nats URL --allow GLOB [--allow GLOB]... [OPTIONS]",
				Description: serveDescription,
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "node", Value: shortHostname(), Usage: "node `NAME` (letters, digits, '-', '_'), unique on the NATS server"},
					&cli.StringSliceFlag{Name: "allow", Usage: "run programs whose absolute path matches `GLOB` ('*' does not match '/'; repeat for more)"},
					&cli.StringSliceFlag{Name: "pin-args", Usage: "run programs matching `'GLOB ARG...'` only with these arguments, each matching its pattern ('GLOB' alone: none; repeat for more)"},
					&cli.StringFlag{Name: "authorized-launchers", Usage: "take spawn and signal requests only when signed by a launcher NKey listed in `FILE` (see docs/security.md)"},
					&cli.BoolFlag{Name: "insecure-open", Usage: "without --authorized-launchers: take unsigned spawn requests from anyone who can publish on this NATS account"},
					&cli.StringFlag{Name: "node-key", Usage: "NKey server seed `FILE` (mode 0600) signing this node's key card; default: a fresh key per start"},
					&cli.StringFlag{Name: "known-nodes", EnvVars: []string{"MPIOS_KNOWN_NODES"}, Usage: "believe only the peers whose keys `FILE` lists (mpirun --known-nodes' format) as drain targets and IOS peers; default: each peer's first key"},
					&cli.StringSliceFlag{Name: "pass-env", Usage: "also give the ranks this `VARIABLE` of pcmd's environment (repeat for more; MPIOS_* cannot be passed)"},
					&cli.IntFlag{Name: "slots", Value: runtime.NumCPU(), Usage: "run at most `N` ranks at once (a rank arriving in an exchange of ranks between nodes shares the slot of the rank it replaces until the hand-over ends)"},
					&cli.StringFlag{Name: "advertise", Value: pcmd.DefaultAdvertise, Usage: "`HOST` or IP the ranks listen on and give their peers: set it to an address other nodes reach"},
					&cli.StringFlag{Name: "store", Usage: "checkpoint store root `DIR` of this node (created 0700), passed to the ranks as MPIOS_CKPT_DIR"},
					&cli.StringFlag{Name: "ckpt-store", Value: pcmd.StoreDisk, Usage: "keep checkpoint pieces on `disk` (--store) or in memory (mem, in /dev/shm, lost when pcmd stops; buddy copies on other nodes keep them; the next pcmd frees the memory of one killed)"},
					&cli.Int64Flag{Name: "ckpt-mem-cap", Usage: "with --ckpt-store mem, hold at most `MIB` MiB of pieces: past three quarters of it the checkpoints of finished jobs (no rank here, idle for a minute) are removed, oldest first; beyond it checkpoints and copies are refused", DefaultText: "4096"},
					&cli.IntFlag{Name: "copy-nice", Value: 10, Usage: "receive other nodes' buddy copies `N` nice levels (0-19) below pcmd's priority, so that this node's ranks get the CPU first (Linux; 0 keeps pcmd's priority)"},
					&cli.DurationFlag{Name: "heartbeat", Value: pcmd.DefaultHeartbeat, Usage: "send a heartbeat every `DURATION`; the node is gone after 3 missed beats"},
					&cli.DurationFlag{Name: "lease", Value: pcmd.DefaultLease, Usage: "stop a job's ranks when its launcher sent no keepalive for `DURATION` (a request's own lease is capped to it)"},
					&cli.DurationFlag{Name: "kill-grace", Value: pcmd.DefaultKillGrace, Usage: "wait `DURATION` between SIGTERM and SIGKILL when stopping ranks"},
					&cli.StringFlag{Name: "policy", Value: iosbridge.DefaultPolicy, Usage: "IOS decision `POLICY` for this node's ranks: " + policyHelp + "; a job's own (mpirun --policy) overrides it"},
					&cli.StringFlag{Name: "cluster", Usage: "this node's cluster `NAME`: with --policy crs its steals stay inside the cluster, but for one asynchronous wide-area steal at a time"},
					&cli.BoolFlag{Name: "hierarchical", Usage: "also run Desell's hierarchical policy: when the iteration times of a job's nodes diverge or a peer is idle, the elected manager node grows a malleable job onto a joined node's free slots, rebalances its data by weights, or moves ranks to each node's share of the processing power (docs/pcmd.md)"},
					&cli.DurationFlag{Name: "ios-period", Value: agentdriver.DefaultPeriod, Usage: "sample the node's resources and its ranks' profiles every `DURATION`"},
					&cli.Float64Flag{Name: "steal-threshold", Value: 0.25, Usage: "send steal requests while at least this `FRACTION` (0 to 1) of the node's CPUs is idle"},
					&cli.IntFlag{Name: "steal-ttl", Value: 3, Usage: "a steal request is forwarded at most `N` times before it fails"},
					&cli.DurationFlag{Name: "ios-cooldown", Value: iosbridge.DefaultStability().Cooldown, Usage: "never move a rank again within `DURATION` of its arrival (an exchange: within a sixth of it)"},
					&cli.BoolFlag{Name: "no-ios", Usage: "run without the IOS agent: no profiling, stealing or migrations"},
					&cli.BoolFlag{Name: "force", Usage: "on SIGTERM, stop the node's ranks at once instead of draining them to other nodes first"},
					&cli.BoolFlag{Name: "cpu-quota-only", Usage: "judge spare CPU by this node's cgroup quota and usage only, not the host's idle CPUs (nodes that share a machine, e.g. containers)"},
				}, natsFlags(true)...),
				OnUsageError: onUsage,
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return &usageError{fmt.Sprintf("serve: unexpected argument %q", c.Args().First())}
					}
					if c.String("nats") == "" {
						return &usageError{"serve: missing --nats URL"}
					}
					cfg := pcmd.Config{
						Node: c.String("node"), NATS: natsOptions(c, c.String("nats")),
						Allow: c.StringSlice("allow"), PassEnv: c.StringSlice("pass-env"), PinArgs: c.StringSlice("pin-args"), Slots: c.Int("slots"), Advertise: c.String("advertise"),
						Store: c.String("store"), Heartbeat: c.Duration("heartbeat"), KillGrace: c.Duration("kill-grace"),
						Lease: c.Duration("lease"), CkptStore: c.String("ckpt-store"), CkptMemCap: c.Int64("ckpt-mem-cap") << 20, CopyNice: c.Int("copy-nice"),
						AuthorizedLaunchers: c.String("authorized-launchers"), InsecureOpen: c.Bool("insecure-open"), NodeKey: c.String("node-key"),
						KnownNodes: c.String("known-nodes"),
						IOS: agentdriver.Config{
							Disabled: c.Bool("no-ios"), Policy: c.String("policy"), Period: c.Duration("ios-period"),
							StealThreshold: c.Float64("steal-threshold"), TTL: c.Int("steal-ttl"), Cooldown: c.Duration("ios-cooldown"),
							QuotaOnly: c.Bool("cpu-quota-only"), Cluster: c.String("cluster"), Hierarchical: c.Bool("hierarchical"),
						},
					}
					if _, err := iosbridge.PolicyByName(cfg.IOS.Policy); err != nil {
						return &usageError{"--policy: " + strings.TrimPrefix(err.Error(), "iosbridge: ")}
					}
					if cfg.IOS.Period <= 0 || cfg.IOS.Cooldown <= 0 {
						return &usageError{"--ios-period and --ios-cooldown must be positive"}
					}
					if t := cfg.IOS.StealThreshold; !(t > 0 && t <= 1) {
						return &usageError{fmt.Sprintf("--steal-threshold %v: want more than 0 and at most 1", t)}
					}
					if ttl := cfg.IOS.TTL; ttl < 1 || ttl > iosbridge.MaxTTL {
						return &usageError{fmt.Sprintf("--steal-ttl %d: want 1 to %d", ttl, iosbridge.MaxTTL)}
					}
					if cfg.Slots < 1 {
						return &usageError{fmt.Sprintf("--slots %d: want at least 1", cfg.Slots)}
					}
					if cfg.CopyNice < 0 || cfg.CopyNice > 19 {
						return &usageError{fmt.Sprintf("--copy-nice %d: want 0 to 19", cfg.CopyNice)}
					}
					if cfg.Heartbeat <= 0 || cfg.KillGrace <= 0 || cfg.Lease <= 0 {
						return &usageError{"--heartbeat, --kill-grace and --lease must be positive"}
					}
					if err := cfg.NATS.Validate(); err != nil {
						return &usageError{strings.TrimPrefix(err.Error(), "natsconn: ")}
					}
					if cfg.AuthorizedLaunchers == "" && !cfg.InsecureOpen {
						return &usageError{strings.TrimPrefix(spawner.ErrNoLauncherPolicy.Error(), "pcmd: ")}
					}
					ctx, cfg.Leave = leaveOnSIGTERM(ctx, c.Bool("force"))
					return pcmd.Serve(ctx, cfg)
				},
			},
			{
				Name:      "status",
				Usage:     "show the nodes and the ranks they run",
				UsageText: "pcmd status [--json] [--nats URL] [--wait DURATION] [--known-nodes FILE]",
				Description: `Asks every pcmd on the NATS server (mpios.nodes.discover) for itself and the
peers it hears, and prints each node: alive, draining (pcmd drain) or gone (no
heartbeat for 3 periods), slots in use and total, load average, age of the last
heartbeat, advertise address, pid and version. Then one line per IOS agent
(mpios.nodes.ios): its policy (and the jobs that chose their own), free CPUs of its
effective CPUs, its outstanding steal request, its peers, ranks given / migrations
the jobs accepted / refused, and its last decision with the reason. Then every rank of the alive
nodes: job, rank, node, pid and, from its latest profile, iteration (of the
planned total), seconds per iteration and share of time in mpi calls, and the
jobs' migrations and resizes as their mpirun answers (job info): verified with
the job key from your job record; for a job of another user it cannot be, and is
labeled "unauthenticated" (--json: "unauthenticated_jobs"). --json adds
per node "ios": the agent's state, its recent "decisions" and the ranks' full
"profiles". A node's answer and its agent's state count only signed by the node,
with the key its own key card names (with --known-nodes, its key in FILE): an
outsider on the NATS server cannot answer for it. Without --nats it uses the NATS
server of the newest running mpirun of this user (found in its job record) and
says which one.`,
				Flags: append([]cli.Flag{
					&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
					&cli.DurationFlag{Name: "wait", Value: 500 * time.Millisecond, Usage: "collect the nodes' answers for `DURATION`"},
					&cli.StringFlag{Name: "known-nodes", EnvVars: []string{"MPIOS_KNOWN_NODES"}, Usage: "show only nodes whose answers are signed by their key in `FILE` (mpirun --known-nodes' format); default: any node that signs with the key its own card names"},
				}, natsFlags(false)...),
				OnUsageError: onUsage,
				Action: func(c *cli.Context) error {
					var keys ctlauth.KeySet
					if f := c.String("known-nodes"); f != "" {
						known, err := ctlauth.LoadKnownNodes(f)
						if err != nil {
							return &usageError{"--known-nodes: " + strings.TrimPrefix(err.Error(), "ctlauth: ")}
						}
						keys = known
					}
					nc, err := clientConn(c, stderr)
					if err != nil {
						return err
					}
					defer nc.Close()
					st, err := nodestatus.DiscoverStatus(nc, c.Duration("wait"), keys)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return st.WriteJSON(stdout)
					}
					return st.WriteText(stdout)
				},
			},
			controlCommand(stderr, stdout, job.ControlMigrate, onUsage),
			controlCommand(stderr, stdout, job.ControlCheckpoint, onUsage),
			controlCommand(stderr, stdout, job.ControlResize, onUsage),
			drainCommand(stderr, stdout, onUsage),
		},
	}
}

// controlCommand builds "pcmd migrate", "pcmd checkpoint" or "pcmd resize".
func controlCommand(stderr, stdout io.Writer, kind job.ControlKind, onUsage cli.OnUsageErrorFunc) *cli.Command {
	cmd := &cli.Command{
		Name:         string(kind),
		OnUsageError: onUsage,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "job", Usage: "`ID` of the running job (as printed by mpirun)"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "wait `DURATION` for the job's reply"},
		}, natsFlags(false)...),
	}
	const note = `

The request is a msgpack job.ControlRequest on mpios.job.JOB.ctl, signed with the job's
key: pcmd reads it from mpirun's job record ($XDG_RUNTIME_DIR/mpios/JOB.json, private
to the user), so only the job's owner, on the machine mpirun runs on, can send one.
The job's mpirun answers with a job.ControlReply, which is printed: accepted (it happens at the job's
next agreement point, mpirun logs the outcome and "pcmd status" lists it), or
refused with the reason. Exit status 0 if the job accepted the request, 1 otherwise.`
	switch kind {
	case job.ControlMigrate:
		cmd.Usage = "ask a running job to move a rank to another node"
		cmd.UsageText = "pcmd migrate --job JOB --rank R[,R...] --to NODE [--reason TEXT] [--nats URL] [--timeout DURATION]"
		cmd.Description = "Asks job JOB to move rank R (or several ranks, at the same iteration boundary) to\n" +
			"pcmd node NODE at its next reconfiguration point: the rank's registered state is\n" +
			"handed to a successor process started on NODE, which takes over the rank. The job\n" +
			"must run on pcmd nodes (mpirun --hosts); NODE may be any live node." + note
		cmd.Flags = append(cmd.Flags,
			&cli.StringFlag{Name: "rank", Usage: "the rank `R` to move, or a comma-separated list"},
			&cli.StringFlag{Name: "to", Usage: "the target `NODE`"},
			&cli.StringFlag{Name: "reason", Usage: "why, for mpirun's log and pcmd status (default: \"pcmd migrate by USER\")"})
	case job.ControlCheckpoint:
		cmd.Usage = "ask a running job to take a checkpoint now"
		cmd.UsageText = "pcmd checkpoint --job JOB [--nats URL] [--timeout DURATION]"
		cmd.Description = "Asks job JOB to take a coordinated checkpoint at its next agreement point\n" +
			"(the job must run with on-demand checkpointing, MPIOS_CKPT_EVERY set)." + note
	case job.ControlResize:
		cmd.Usage = "ask a running job to change its number of ranks (split or merge)"
		cmd.UsageText = "pcmd resize --job JOB --np M [--on NODE[:K],...] [--weights W1,...,WM] [--reason TEXT] [--nats URL] [--timeout DURATION]"
		cmd.Description = "Asks job JOB to run with M ranks from its next agreement point on. A grow starts\n" +
			"the new ranks on the nodes --on names (K ranks on NODE; default: the free slots of\n" +
			"the job's nodes, and the request is refused if there are too few); a shrink lets\n" +
			"the highest ranks leave, or those on the nodes --on names. The ranks' distributed\n" +
			"data is redistributed and the world is rebuilt with contiguous ranks. --weights\n" +
			"gives each new rank a share of the rows in proportion to its weight (a faster node's\n" +
			"ranks hold more); with M the job's own size it rebalances the ranks in place. If\n" +
			"anything fails before the commit the job goes on at its old size; mpirun logs the\n" +
			"outcome (\"resized 4 -> 6 ranks at iteration I in T ms\", \"rebalanced 4 ranks ...\")." + note
		cmd.Flags = append(cmd.Flags,
			&cli.IntFlag{Name: "np", Usage: "the new number of ranks `M`"},
			&cli.StringFlag{Name: "on", Usage: "`NODE[:K],...` where new ranks start or from where ranks leave"},
			&cli.StringFlag{Name: "weights", Usage: "`W1,...,WM`: each new rank's share of the distributed data (default: equal)"},
			&cli.StringFlag{Name: "reason", Usage: "why, for mpirun's log and pcmd status (default: \"pcmd resize by USER\")"})
	}
	cmd.Action = func(c *cli.Context) error {
		required := []string{"job"}
		switch kind {
		case job.ControlMigrate:
			required = append(required, "rank", "to")
		case job.ControlResize:
			required = append(required, "np")
		}
		for _, f := range required {
			if !c.IsSet(f) {
				return &usageError{fmt.Sprintf("%s: missing --%s", kind, f)}
			}
		}
		req := job.ControlRequest{Kind: kind, Reason: c.String("reason")}
		if req.Reason == "" {
			req.Reason = "pcmd " + string(kind) + " by " + userName()
		}
		if kind == job.ControlMigrate {
			ranks, err := parseRanks(c.String("rank"))
			if err != nil {
				return &usageError{"--rank: " + err.Error()}
			}
			req.Rank, req.To = ranks[0], c.String("to")
			if len(ranks) > 1 {
				req.Ranks = ranks
			}
		}
		if kind == job.ControlResize {
			req.NP = c.Int("np")
			on, err := job.ParseNodeSlots(c.String("on"))
			if err != nil {
				return &usageError{"--on: " + job.TrimPrefix(err).Error()}
			}
			req.On = on
			if c.IsSet("weights") {
				w, err := job.ParseWeights(c.String("weights"))
				if err != nil {
					return &usageError{"--weights: " + job.TrimPrefix(err).Error()}
				}
				req.Weights = w
			}
		}
		if err := job.ValidateID(c.String("job")); err != nil {
			return &usageError{"--job: " + job.TrimPrefix(err).Error()}
		}
		if err := req.Validate(); err != nil {
			return &usageError{job.TrimPrefix(err).Error()}
		}
		// Only the job's owner holds its key: mpirun keeps it in its private job record.
		rec, err := jobrecord.ReadJob(jobrecord.RuntimeDir(), c.String("job"))
		if err != nil {
			return fmt.Errorf("pcmd: job %s: control requests are signed with the job's key, from the job record of "+
				"its mpirun, which only the job's owner can read on the machine mpirun runs on: %s",
				c.String("job"), strings.TrimPrefix(err.Error(), "jobrecord: "))
		}
		sign, err := rec.OwnerWrapper(time.Now())
		if err != nil {
			return fmt.Errorf("pcmd: %s", strings.TrimPrefix(err.Error(), "jobrecord: "))
		}
		key, err := rec.Key()
		if err != nil {
			return fmt.Errorf("pcmd: %s", strings.TrimPrefix(err.Error(), "jobrecord: "))
		}
		if !c.IsSet("nats") && rec.NATSURL != "" {
			if err := c.Set("nats", rec.NATSURL); err != nil {
				return err
			}
		}
		nc, err := clientConn(c, stderr)
		if err != nil {
			return err
		}
		defer nc.Close()
		rep, err := nodestatus.Control(nc, c.String("job"), req, sign, nodestatus.OwnerReplies(key), c.Duration("timeout"))
		if err != nil {
			return err
		}
		switch {
		case rep.OK:
			fmt.Fprintf(stdout, "job %s accepted the %s request: %s\n", c.String("job"), kind, rep.Message)
			return nil
		default:
			fmt.Fprintf(stderr, "pcmd: job %s refused the %s request: %s\n", c.String("job"), kind, rep.Error)
			return &exitError{1}
		}
	}
	return cmd
}

// drainCommand builds "pcmd drain".
func drainCommand(stderr, stdout io.Writer, onUsage cli.OnUsageErrorFunc) *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "make a node leave gracefully",
		UsageText: "pcmd drain [--node NAME] [--node-key FILE] [--reason TEXT] [--nats URL] [--timeout DURATION] [--wait DURATION]",
		Description: `Asks the pcmd of node NAME (default: this host's short name) to leave
(mpios.node.NAME.drain): it places each of its ranks on a free slot of an alive peer,
each job on as few nodes as possible, and asks the jobs to migrate them there
(mpios.job.JOB.ctl, as "pcmd migrate"). From then on it takes no new ranks, and it
exits once it runs none. If some rank finds no free slot the drain is refused, the
node says which ranks and goes on as before. Prints each move and the job's answer.
The request is signed with the node's own key (--node-key: the seed file given to
"pcmd serve --node-key" on that node), as a drain is its operator's decision; only a
node started with --insecure-open takes an unsigned one. Stopping pcmd with SIGTERM
drains it too, without a key. The node's answer counts only signed by its key.
With --wait, pcmd drain then waits until the node has left (its pcmd exited: no pcmd
answered for it during three of its heartbeat intervals), printing what it still runs,
so that the machine can be taken down once it returns.
Exit status 0 if every job accepted (and, with --wait, the node left), 1 otherwise.`,
		OnUsageError: onUsage,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "node", Value: shortHostname(), Usage: "the node `NAME` to drain"},
			&cli.StringFlag{Name: "node-key", Usage: "the node's NKey server seed `FILE` (as given to pcmd serve --node-key) to sign the request with"},
			&cli.StringFlag{Name: "reason", Usage: "why, for the logs of the node and the jobs (default: \"by USER\")"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "wait `DURATION` for the node's reply (it waits for the jobs' answers)"},
			&cli.DurationFlag{Name: "wait", Usage: "then wait up to `DURATION` for the node to leave (0: do not wait)"},
		}, natsFlags(false)...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return &usageError{fmt.Sprintf("drain: unexpected argument %q", c.Args().First())}
			}
			node := c.String("node")
			if err := job.ValidateNode(node); err != nil {
				return &usageError{"--node: " + job.TrimPrefix(err).Error()}
			}
			if c.Duration("wait") < 0 {
				return &usageError{fmt.Sprintf("--wait %v: want 0 or more", c.Duration("wait"))}
			}
			req := job.DrainRequest{Reason: c.String("reason")}
			if req.Reason == "" {
				req.Reason = "by " + userName()
			}
			if err := req.Validate(); err != nil {
				return &usageError{job.TrimPrefix(err).Error()}
			}
			nc, err := clientConn(c, stderr)
			if err != nil {
				return err
			}
			defer nc.Close()
			var sign *ctlauth.KeyWrapper
			if path := c.String("node-key"); path != "" {
				kp, err := ctlauth.LoadSeed(path, nkeys.PrefixByteServer)
				if err != nil {
					return fmt.Errorf("pcmd: --node-key: %w", err)
				}
				if sign, err = ctlauth.NewKeyWrapper(kp, ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, uint64(time.Now().UnixNano())); err != nil {
					return fmt.Errorf("pcmd: %w", err)
				}
			}
			rep, err := nodestatus.Drain(nc, node, req, sign, c.Duration("timeout"))
			if err != nil {
				return err
			}
			if rep.Error != "" {
				fmt.Fprintf(stderr, "pcmd: %s\n", strings.TrimPrefix(rep.Error, "pcmd: "))
				return &exitError{1}
			}
			ok := true
			for _, m := range rep.Moves {
				verdict := "accepted"
				if !m.Accepted {
					verdict, ok = "NOT accepted", false
				}
				if m.ShrinkTo > 0 {
					fmt.Fprintf(stdout, "job %s shrinks to %d ranks, its ranks %v here leave: %s: %s\n", m.Job, m.ShrinkTo, m.Ranks, verdict, m.Answer)
					continue
				}
				fmt.Fprintf(stdout, "job %s ranks %v to %s: %s: %s\n", m.Job, m.Ranks, m.To, verdict, m.Answer)
			}
			if !ok {
				fmt.Fprintf(stderr, "pcmd: node %s is draining, but some of its ranks stay: it exits once they are gone\n", node)
			} else {
				fmt.Fprintf(stdout, "node %s is draining: it takes no new ranks and exits once its ranks have left\n", node)
			}
			if wait := c.Duration("wait"); wait > 0 {
				keys := ctlauth.NodeKey{Node: node, AnyKey: true}
				if sign != nil {
					keys = ctlauth.NodeKey{Node: node, Key: sign.PublicKey()}
				}
				err := nodestatus.WaitLeft(nc, node, keys, 0, wait, func(info job.NodeInfo) {
					if info.Used > 0 {
						fmt.Fprintf(stdout, "node %s still runs %d ranks\n", node, info.Used)
					}
				})
				if err != nil {
					fmt.Fprintf(stderr, "%v\n", err)
					return &exitError{1}
				}
				fmt.Fprintf(stdout, "node %s has left\n", node)
				return nil // the ranks a job refused to take have ended meanwhile
			}
			if !ok {
				return &exitError{1}
			}
			return nil
		},
	}
}

// clientConn connects to --nats, or to the server of the newest running mpirun.
func clientConn(c *cli.Context, stderr io.Writer) (*nats.Conn, error) {
	url := c.String("nats")
	if url == "" {
		rec, path, err := nodestatus.NewestRecord(jobrecord.RuntimeDir())
		if err != nil {
			return nil, &usageError{"no --nats URL given and " + strings.TrimPrefix(err.Error(), "pcmd: ")}
		}
		url = rec.NATSURL
		fmt.Fprintf(stderr, "pcmd: using NATS %s of mpirun job %s (pid %d, record %s)\n",
			natsconn.RedactURL(url), rec.JobID, rec.PID, path)
	}
	opts := natsOptions(c, url)
	opts.Name = "pcmd " + c.Command.Name
	if err := opts.Validate(); err != nil {
		return nil, &usageError{strings.TrimPrefix(err.Error(), "natsconn: ")}
	}
	return opts.Connect(nil, nil, nil)
}

// shortHostname is the default node name: the host name up to its first dot.
func shortHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// parseRanks reads "R" or "R1,R2,...".
func parseRanks(s string) ([]int, error) {
	var ranks []int
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 0 {
			return nil, fmt.Errorf("%q: want a rank >= 0 or a comma-separated list of them", s)
		}
		ranks = append(ranks, r)
	}
	return ranks, nil
}

// userName names who runs pcmd, for the reason of a request.
func userName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}
