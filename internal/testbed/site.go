package testbed

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
)

// Ports of a site's NATS server. Each server has an address of its own (its namespace's), so
// fixed ports cannot collide.
const (
	siteClientPort = 4222
	siteRoutePort  = 6222
	siteHostPrefix = "nats." // SiteServer(S) is siteHostPrefix+S; node names cannot contain '.'
	siteReady      = 10 * time.Second
)

// site is the NATS server of one site (Options.Sites), running in its own network namespace.
type site struct {
	name    string
	idx     int    // address index, from the nodes' pool
	addr    string // its address on the bridge
	url     string // client URL with the credentials
	conf    string // its configuration file (mode 0600: it holds the credentials)
	logPath string
	logFile *os.File
	proc    *proc
}

// SiteServer is the name under which SetLink knows the NATS server of site: list it in a
// group with the site's nodes, and the routes between the sites' servers take the link's
// delay like the data between their nodes.
func SiteServer(site string) string { return siteHostPrefix + site }

// SiteURL is the client URL (with the credentials) of site's NATS server, which the site's
// nodes use; "" if the cluster has no such site.
func (c *Cluster) SiteURL(site string) string {
	if s, ok := c.sites[site]; ok {
		return s.url
	}
	return ""
}

// validateSites checks Options.Sites: valid names, every node in at most one site.
func validateSites(o *Options) error {
	if len(o.Sites) == 0 {
		return nil
	}
	if o.NATSURL != "" {
		return errors.New("testbed: Options.Sites starts the sites' NATS servers: NATSURL must be empty")
	}
	in := map[string]string{}
	for s, nodes := range o.Sites {
		if err := job.ValidateNode(s); err != nil {
			return fmt.Errorf("testbed: site name: %w", err)
		}
		if len(Prefix+siteHostPrefix+s) > 63 {
			return fmt.Errorf("testbed: site name %q: at most %d characters", s, 63-len(Prefix+siteHostPrefix))
		}
		for _, n := range nodes {
			if other, dup := in[n]; dup {
				return fmt.Errorf("testbed: node %s is in sites %s and %s", n, other, s)
			}
			in[n] = s
		}
	}
	return nil
}

// siteOf is the site node name belongs to ("" if none).
func (c *Cluster) siteOf(name string) string {
	for s, nodes := range c.opts.Sites {
		if slices.Contains(nodes, name) {
			return s
		}
	}
	return ""
}

// startSites starts one NATS server per site, each in its own namespace on the bridge, joined
// by routes (a full mesh: every server dials those of the sites before it), with one client user and one
// route user, both with random passwords. The testbed (and mpirun, through NATSURL) uses the
// first site's server, in name order. It returns when every server accepts clients and every
// route carries messages.
func (c *Cluster) startSites() error {
	names := make([]string, 0, len(c.opts.Sites))
	for s := range c.opts.Sites {
		names = append(names, s)
	}
	slices.Sort(names)
	user, pass := randomHex(8), randomHex(16)
	ruser, rpass := randomHex(8), randomHex(16)
	c.sites = map[string]*site{}
	for i, name := range names {
		s := &site{name: name, idx: i, addr: nodeIP(i),
			conf:    filepath.Join(c.workDir, "nats-"+name+".conf"),
			logPath: filepath.Join(c.workDir, "logs", "nats-"+name+".log")}
		u := url.URL{Scheme: "nats", User: url.UserPassword(user, pass), Host: net.JoinHostPort(s.addr, strconv.Itoa(siteClientPort))}
		s.url = u.String()
		c.sites[name] = s
	}
	for _, name := range names {
		s := c.sites[name]
		// Each server dials the servers of the sites before it in name order: one route per
		// pair, instead of two dialled at once of which one is then closed as a duplicate.
		var routes []string
		for _, other := range names {
			if other < name {
				ru := url.URL{Scheme: "nats-route", User: url.UserPassword(ruser, rpass),
					Host: net.JoinHostPort(c.sites[other].addr, strconv.Itoa(siteRoutePort))}
				routes = append(routes, strconv.Quote(ru.String()))
			}
		}
		// write_deadline bounds a write to a client that vanished (a node's namespace is
		// deleted with its connection), which Shutdown otherwise waits out (10 s).
		conf := fmt.Sprintf(`server_name: %q
write_deadline: "2s"
listen: %q
authorization { user: %q, password: %q }
cluster {
  name: "mpios-testbed"
  listen: %q
  authorization { user: %q, password: %q }
  routes: [%s]
}
`, "site-"+name, net.JoinHostPort(s.addr, strconv.Itoa(siteClientPort)), user, pass,
			net.JoinHostPort(s.addr, strconv.Itoa(siteRoutePort)), ruser, rpass, strings.Join(routes, ", "))
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			return fmt.Errorf("testbed: site %s: %w", name, err)
		}
		if err := c.startSite(s); err != nil {
			return err
		}
	}
	c.natsURL = c.sites[names[0]].url
	if err := c.checkRoutes(names); err != nil {
		return err
	}
	c.log.Printf("sites up: %s", c.siteSummary(names))
	return nil
}

// startSite makes s's namespace and starts its server there, without a CPU quota (a site's
// server is a machine of its own), and waits until it accepts clients.
func (c *Cluster) startSite(s *site) error {
	host := SiteServer(s.name)
	if err := setupNetns(host, s.idx); err != nil {
		return fmt.Errorf("testbed: site %s: %w", s.name, err)
	}
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: site %s: log: %w", s.name, err)
	}
	s.logFile = f
	cmd := exec.Command(c.opts.NodeExec, "-netns", netnsPath(host), "--", c.opts.NATSD, "-config", s.conf)
	cmd.Env = c.nodeEnv()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd, syscall.SIGTERM)
	p, err := startProc(cmd)
	if err != nil {
		return fmt.Errorf("testbed: site %s: start its NATS server: %w", s.name, err)
	}
	s.proc = p
	deadline := time.Now().Add(siteReady)
	for {
		nc, err := nats.Connect(s.url, nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return nil
		}
		if exited(p) || time.Now().After(deadline) {
			return fmt.Errorf("testbed: site %s: its NATS server at %s does not accept clients (%v); its log %s ends:\n%s",
				s.name, s.addr, err, s.logPath, tail(s.logPath, 2048))
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkRoutes waits until a message published at each site's server reaches a subscriber
// at every other site's: the routes are up and carry interest.
func (c *Cluster) checkRoutes(names []string) error {
	conns := map[string]*nats.Conn{}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for _, n := range names {
		nc, err := nats.Connect(c.sites[n].url, nats.Name("testbed-routes"), nats.Timeout(5*time.Second))
		if err != nil {
			return fmt.Errorf("testbed: site %s: %w", n, err)
		}
		conns[n] = nc
	}
	deadline := time.Now().Add(siteReady)
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			subj := "_testbed.route." + randomHex(8)
			sub, err := conns[to].SubscribeSync(subj)
			if err != nil {
				return fmt.Errorf("testbed: site %s: %w", to, err)
			}
			if err := conns[to].FlushTimeout(5 * time.Second); err != nil {
				return fmt.Errorf("testbed: site %s: %w", to, err)
			}
			for {
				if err := conns[from].Publish(subj, nil); err != nil {
					return fmt.Errorf("testbed: site %s: %w", from, err)
				}
				if _, err := sub.NextMsg(100 * time.Millisecond); err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("testbed: no route from site %s's NATS server to site %s's within %v; logs %s, %s",
						from, to, siteReady, c.sites[from].logPath, c.sites[to].logPath)
				}
			}
			_ = sub.Unsubscribe()
		}
	}
	return nil
}

// siteSummary lists the sites' servers for the log.
func (c *Cluster) siteSummary(names []string) string {
	var parts []string
	for _, n := range names {
		s := c.sites[n]
		parts = append(parts, fmt.Sprintf("%s at %s (%s)", n, s.addr, strings.Join(c.opts.Sites[n], ",")))
	}
	return strings.Join(parts, "; ")
}

// siteLogs is the end of every site server's log, for an error about the control plane
// ("" without sites).
func (c *Cluster) siteLogs() string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(c.sites)) {
		s := c.sites[n]
		fmt.Fprintf(&b, "\nsite %s's NATS server log %s ends:\n%s", n, s.logPath, tail(s.logPath, 2048))
	}
	return b.String()
}

// stopSites stops the sites' servers and removes their namespaces.
func (c *Cluster) stopSites() error {
	var errs []error
	for _, s := range c.sites {
		if s.proc != nil && !exited(s.proc) {
			_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.proc.done:
			case <-time.After(5 * time.Second):
				// A server that does not shut down is stuck: SIGQUIT makes the Go runtime
				// write every goroutine's stack into its log before it exits.
				_ = s.proc.cmd.Process.Signal(syscall.SIGQUIT)
				err := s.proc.stop(syscall.SIGQUIT, 5*time.Second)
				keep := s.logPath
				if c.ownWork { // the work directory goes with the cluster: keep the log
					keep = filepath.Join(os.TempDir(), fmt.Sprintf("mpios-testbed-nats-%s-%d.log", s.name, s.proc.cmd.Process.Pid))
					if b, rerr := os.ReadFile(s.logPath); rerr == nil {
						_ = os.WriteFile(keep, b, 0o600)
					}
				}
				errs = append(errs, fmt.Errorf("testbed: site %s: NATS server pid %d did not stop within 5s of SIGTERM (its log, with its goroutines, is %s)%s",
					s.name, s.proc.cmd.Process.Pid, keep, map[bool]string{true: ": " + fmt.Sprint(err), false: ""}[err != nil]))
			}
		}
		if err := teardownNetns(SiteServer(s.name), s.idx); err != nil {
			errs = append(errs, fmt.Errorf("testbed: site %s: %w", s.name, err))
		}
		if s.logFile != nil {
			_ = s.logFile.Close()
		}
	}
	return errors.Join(errs...)
}

// endpoint is the address and network namespace of name: a node, or a site's server
// (SiteServer).
func (c *Cluster) endpoint(name string) (addr, ns string, err error) {
	if s, ok := strings.CutPrefix(name, siteHostPrefix); ok {
		if st, ok := c.sites[s]; ok {
			return st.addr, netnsName(name), nil
		}
		return "", "", fmt.Errorf("testbed: no site %s", s)
	}
	n, err := c.lookup(name)
	if err != nil {
		return "", "", err
	}
	return n.addr, netnsName(n.name), nil
}

// addrLocked is the address of a node or a site's server; c.mu is held.
func (c *Cluster) addrLocked(name string) (string, bool) {
	if s, ok := strings.CutPrefix(name, siteHostPrefix); ok {
		if st, ok := c.sites[s]; ok {
			return st.addr, true
		}
		return "", false
	}
	if n, ok := c.nodes[name]; ok {
		return n.addr, true
	}
	return "", false
}
