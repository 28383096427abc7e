package spawner

import (
	"slices"
	"strings"
)

// PassedEnv names the variables of pcmd's own environment that every rank inherits: what a
// program needs to find its tools, its home, its locale and its per-user directories.
// Nothing else reaches the ranks — in particular not pcmd's NATS credentials
// ($PCMD_NATS_TOKEN, $PCMD_NATS_PASS) nor its own MPIOS_* settings; an operator adds
// variables with pcmd serve --pass-env.
var PassedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ",
	"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES",
	"XDG_RUNTIME_DIR", "XDG_STATE_HOME",
}

// BaseEnv picks from environ (KEY=VALUE entries, as os.Environ) the variables named in
// PassedEnv and in extra, in environ's order. MPIOS_* variables are never picked: the job's
// come from its spawn request, the node's from pcmd.
func BaseEnv(environ, extra []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && !strings.HasPrefix(name, "MPIOS_") && (slices.Contains(PassedEnv, name) || slices.Contains(extra, name)) {
			out = append(out, kv)
		}
	}
	return out
}

// RankEnv is the environment of a rank: base, then the variables the request asks for
// (requested, MPIOS_* only, checked by job.SpawnRequest.Validate) except those the node sets
// itself, then the node's own (node), which a request can thus never override.
func RankEnv(base, requested, node []string) []string {
	env := slices.Clone(base)
	for _, kv := range requested {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := Lookup(node, name); !set {
			env = append(env, kv)
		}
	}
	return append(env, node...)
}

// Lookup returns the value of the last entry for name in env (KEY=VALUE entries), as the
// process that receives env would see it.
func Lookup(env []string, name string) (string, bool) {
	v, found := "", false
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v, found = val, true
		}
	}
	return v, found
}
