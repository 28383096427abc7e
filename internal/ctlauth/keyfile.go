package ctlauth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/job"
)

// Key files list trusted NKey public keys, one per line, like SSH's authorized_keys:
//
//	# comment
//	[OPTIONS] KEY [COMMENT]
//
// OPTIONS is a comma-separated list of NAME="VALUE" (the quotes may be left out when VALUE
// has no comma, space or quote); a name may repeat. A node's AuthorizedKeys lists launcher
// user keys (prefix U) with the options jobs="GLOB" and programs="GLOB"; a launcher's
// KnownNodes lists node server keys (prefix N), each with node="NAME".

// ParseError is a mistake in a key file.
type ParseError struct {
	File string // as given to the parser
	Line int    // 1-based
	Msg  string
}

// Error implements error.
func (e *ParseError) Error() string {
	return fmt.Sprintf("ctlauth: %s line %d: %s", e.File, e.Line, e.Msg)
}

// maxKeyLine bounds one line of a key file.
const maxKeyLine = 64 << 10

type keyOption struct{ name, value string }

type keyLine struct {
	line    int
	opts    []keyOption
	key     string
	comment string
}

// parseKeyFile reads the lines of a key file whose keys have the given prefix and whose
// options are among known.
func parseKeyFile(r io.Reader, file string, prefix nkeys.PrefixByte, kind string, known ...string) ([]keyLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxKeyLine)
	var out []keyLine
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		fail := func(format string, args ...any) error {
			return &ParseError{File: file, Line: n, Msg: fmt.Sprintf(format, args...)}
		}
		kl := keyLine{line: n}
		first, rest := cutField(text)
		if !isKey(first) && strings.Contains(first, "=") {
			opts, err := parseOptions(first, known)
			if err != nil {
				return nil, fail("%v", err)
			}
			kl.opts = opts
			first, rest = cutField(rest)
		}
		switch {
		case first == "":
			return nil, fail("options without a key")
		case !isKey(first):
			return nil, fail("%.60q is not an NKey public key (want %s)", first, kind)
		case nkeys.Prefix(first) != prefix:
			return nil, fail("%.60q is a valid NKey but not %s", first, kind)
		}
		if prev, dup := seen[first]; dup {
			return nil, fail("key %s is already listed on line %d", first, prev)
		}
		seen[first] = n
		kl.key, kl.comment = first, rest
		out = append(out, kl)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{File: file, Line: n + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxKeyLine)}
		}
		return nil, fmt.Errorf("ctlauth: read %s: %w", file, err)
	}
	return out, nil
}

func isKey(s string) bool { return nkeys.IsValidPublicKey(s) }

// cutField splits off the first white-space-separated field; quoted strings in it may hold
// spaces.
func cutField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			quoted = !quoted
		case (c == ' ' || c == '\t') && !quoted:
			return s[:i], strings.TrimSpace(s[i+1:])
		}
	}
	return s, ""
}

// parseOptions parses NAME="VALUE",NAME=VALUE,...
func parseOptions(s string, known []string) ([]keyOption, error) {
	var opts []keyOption
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("option %.40q: want NAME=\"VALUE\"", s)
		}
		name := s[:eq]
		if !contains(known, name) {
			return nil, fmt.Errorf("unknown option %.40q (known: %s)", name, strings.Join(known, ", "))
		}
		s = s[eq+1:]
		var value string
		if strings.HasPrefix(s, `"`) {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("option %s: unterminated quote", name)
			}
			value, s = s[1:1+end], s[2+end:]
		} else {
			end := strings.IndexAny(s, `,"`)
			if end < 0 {
				end = len(s)
			}
			value, s = s[:end], s[end:]
		}
		if value == "" {
			return nil, fmt.Errorf("option %s: empty value", name)
		}
		opts = append(opts, keyOption{name, value})
		if s == "" {
			break
		}
		if s[0] != ',' || len(s) == 1 {
			return nil, fmt.Errorf("option %s: want ',' or a space after its value", name)
		}
		s = s[1:]
	}
	return opts, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// AuthorizedKey is a launcher a node's operator allows to start ranks, and on what terms.
type AuthorizedKey struct {
	Key     string // NKey user public key
	Comment string
	// Jobs are globs (path.Match) of the job ids the launcher may start ranks of; none: any.
	Jobs []string
	// Programs are globs of the programs it may start, on top of the node's own --allow
	// list; none: any the node allows.
	Programs []string
	Line     int // in the file it was read from
}

// Permits returns nil if the launcher may start program for job jobID.
func (k AuthorizedKey) Permits(jobID, program string) error {
	if len(k.Jobs) > 0 && !matchAny(k.Jobs, jobID) {
		return fmt.Errorf("ctlauth: launcher %s may not start job %s (jobs=%s)", k.Key, jobID, strings.Join(k.Jobs, ","))
	}
	if len(k.Programs) > 0 && !matchAny(k.Programs, program) {
		return fmt.Errorf("ctlauth: launcher %s may not start %s (programs=%s)", k.Key, program, strings.Join(k.Programs, ","))
	}
	return nil
}

func matchAny(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// AuthorizedKeys is a node's list of launchers allowed to start ranks on it. It is a
// KeySet: it trusts a listed key for the launcher role only.
type AuthorizedKeys struct {
	byKey map[string]AuthorizedKey
	keys  []AuthorizedKey
}

// ParseAuthorizedKeys reads an authorized launchers file (see the format above); file
// names it in errors, which are *ParseError for mistakes in the content.
func ParseAuthorizedKeys(r io.Reader, file string) (*AuthorizedKeys, error) {
	lines, err := parseKeyFile(r, file, nkeys.PrefixByteUser, "a user key, starting with U", "jobs", "programs")
	if err != nil {
		return nil, err
	}
	a := &AuthorizedKeys{byKey: make(map[string]AuthorizedKey)}
	for _, l := range lines {
		k := AuthorizedKey{Key: l.key, Comment: l.comment, Line: l.line}
		for _, o := range l.opts {
			if _, err := path.Match(o.value, ""); err != nil {
				return nil, &ParseError{File: file, Line: l.line, Msg: fmt.Sprintf("option %s=%q: %v", o.name, o.value, err)}
			}
			if o.name == "jobs" {
				k.Jobs = append(k.Jobs, o.value)
			} else {
				if !strings.HasPrefix(o.value, "/") {
					return nil, &ParseError{File: file, Line: l.line, Msg: fmt.Sprintf("option programs=%q: want an absolute path pattern", o.value)}
				}
				k.Programs = append(k.Programs, o.value)
			}
		}
		a.byKey[k.Key] = k
		a.keys = append(a.keys, k)
	}
	return a, nil
}

// Keys returns the entries in file order.
func (a *AuthorizedKeys) Keys() []AuthorizedKey { return append([]AuthorizedKey(nil), a.keys...) }

// Lookup returns the entry of publicKey.
func (a *AuthorizedKeys) Lookup(publicKey string) (AuthorizedKey, bool) {
	k, ok := a.byKey[publicKey]
	return k, ok
}

// Trust implements KeySet.
func (a *AuthorizedKeys) Trust(publicKey string, sender Sender) error {
	if _, ok := a.byKey[publicKey]; !ok {
		return errors.New("not an authorized launcher")
	}
	if sender.Role != RoleLauncher {
		return fmt.Errorf("an authorized launcher key used as %s", sender.Role)
	}
	return nil
}

// KnownNodes is a launcher's list of the nodes' signing keys, each bound to a node name.
// It is a KeySet: a key is trusted only for its own node.
type KnownNodes struct {
	node map[string]string // key to node name
}

// ParseKnownNodes reads a known nodes file: server keys (prefix N), each with node="NAME".
func ParseKnownNodes(r io.Reader, file string) (*KnownNodes, error) {
	lines, err := parseKeyFile(r, file, nkeys.PrefixByteServer, "a server key, starting with N", "node")
	if err != nil {
		return nil, err
	}
	k := &KnownNodes{node: make(map[string]string)}
	for _, l := range lines {
		if len(l.opts) != 1 {
			return nil, &ParseError{File: file, Line: l.line, Msg: `want exactly one node="NAME" option before the key`}
		}
		if err := job.ValidateNode(l.opts[0].value); err != nil {
			return nil, &ParseError{File: file, Line: l.line, Msg: strings.TrimPrefix(err.Error(), "job: ")}
		}
		k.node[l.key] = l.opts[0].value
	}
	return k, nil
}

// Node returns the node name publicKey belongs to.
func (k *KnownNodes) Node(publicKey string) (string, bool) {
	n, ok := k.node[publicKey]
	return n, ok
}

// Trust implements KeySet.
func (k *KnownNodes) Trust(publicKey string, sender Sender) error {
	name, ok := k.node[publicKey]
	switch {
	case !ok:
		return errors.New("not a known node key")
	case sender.Role != RoleNode || sender.Node != name:
		return fmt.Errorf("the key of node %s used as %s", name, sender)
	}
	return nil
}
