package spawner

import (
	"slices"
	"strings"
)

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
