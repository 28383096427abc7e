package spawner

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// argPin fixes the arguments of the programs matching prog: a request must give exactly
// len(args) arguments, each matching its pattern.
type argPin struct {
	prog string
	args []string
}

// parsePins reads pcmd serve --pin-args values: "PROGRAM_GLOB ARG_GLOB..." separated by
// white space (so the patterns cannot contain any); "PROGRAM_GLOB" alone allows no
// argument.
func parsePins(specs []string) ([]argPin, error) {
	var pins []argPin
	for _, spec := range specs {
		f := strings.Fields(spec)
		if len(f) == 0 || !filepath.IsAbs(f[0]) {
			return nil, fmt.Errorf("pcmd: --pin-args %q: want an absolute program pattern, then argument patterns", spec)
		}
		for _, p := range f {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("pcmd: --pin-args %q: %q: %w", spec, p, err)
			}
		}
		pins = append(pins, argPin{prog: f[0], args: f[1:]})
	}
	return pins, nil
}

// checkArgs applies the pins to a program (its cleaned path) and the arguments a request
// gives it. A program that no pin names runs with any arguments (the --allow risk); one
// that pins name runs only with arguments that one of them matches. It returns why not,
// or "".
func checkArgs(pins []argPin, prog string, args []string) string {
	var named []string
	for _, p := range pins {
		if ok, _ := filepath.Match(p.prog, prog); !ok {
			continue
		}
		if p.matches(args) {
			return ""
		}
		named = append(named, strings.Join(append([]string{p.prog}, p.args...), " "))
	}
	if named == nil {
		return ""
	}
	return fmt.Sprintf("refuses to run %s with arguments %q: --pin-args allows only %q", prog, args, named)
}

// matches reports whether args are exactly as many as the pin's patterns, each matching its
// own.
func (p argPin) matches(args []string) bool {
	if len(args) != len(p.args) {
		return false
	}
	for i, a := range args {
		if ok, _ := path.Match(p.args[i], a); !ok {
			return false
		}
	}
	return true
}
