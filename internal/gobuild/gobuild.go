// Package gobuild decides what mpirun's PROGRAM names — an executable, a command in $PATH or
// a Go main package directory — and builds a package directory into an executable.
//
// Errors name the program and carry no package prefix: mpirun shows them as they are.
package gobuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrProgramNotFound reports that PROGRAM is neither an executable file, a command in $PATH,
// nor a Go package directory.
var ErrProgramNotFound = errors.New("not found (want an executable, a command in $PATH, or a Go main package directory)")

// BuildError reports that building a Go package directory given as PROGRAM failed.
type BuildError struct {
	Dir    string // the directory as given
	Output string // the go tool's combined output
	Err    error
}

// Error returns "go build DIR: reason" and the go tool's output on the following lines.
func (e *BuildError) Error() string {
	msg := fmt.Sprintf("go build %s: %v", e.Dir, e.Err)
	if out := strings.TrimRight(e.Output, "\n"); out != "" {
		msg += "\n" + out
	}
	return msg
}

// Unwrap returns the go tool's failure.
func (e *BuildError) Unwrap() error { return e.Err }

// Program is a resolved PROGRAM: an executable, or a package directory to build first.
type Program struct {
	Path       string // absolute path of the executable; for a package, set by Build
	PackageDir string // absolute package directory, if PROGRAM is a Go package
}

// Resolve decides what PROGRAM names, without building anything yet.
func Resolve(name string) (Program, error) {
	if name == "" {
		return Program{}, errors.New("no program given")
	}
	if !strings.ContainsRune(name, filepath.Separator) && !strings.ContainsRune(name, '/') {
		if p, err := exec.LookPath(name); err == nil {
			return Program{Path: p}, nil
		}
		// A bare name may still be a package directory, e.g. "mpirun heat2d".
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			return packageProgram(name)
		}
		return Program{}, fmt.Errorf("program %q: %w", name, ErrProgramNotFound)
	}
	fi, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return Program{}, fmt.Errorf("program %q: %w", name, ErrProgramNotFound)
	}
	if err != nil {
		return Program{}, fmt.Errorf("program %q: %w", name, err)
	}
	if fi.IsDir() {
		return packageProgram(name)
	}
	if _, err := exec.LookPath(name); err != nil {
		return Program{}, fmt.Errorf("program %q: not executable: %w", name, err)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return Program{}, fmt.Errorf("program %q: %w", name, err)
	}
	return Program{Path: abs}, nil
}

// packageProgram checks that dir holds a Go main package. Only package clauses are parsed:
// cheap, and it turns "go build" producing a non-executable into a clear message.
func packageProgram(dir string) (Program, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Program{}, fmt.Errorf("program %q: %w", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(abs, "*.go"))
	if err != nil {
		return Program{}, fmt.Errorf("program %q: %w", dir, err)
	}
	fset := token.NewFileSet()
	var pkgs []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly)
		if err != nil {
			return Program{}, fmt.Errorf("program %q: %w", dir, err)
		}
		pkgs = append(pkgs, af.Name.Name)
	}
	switch {
	case len(pkgs) == 0:
		return Program{}, fmt.Errorf("program %q is a directory without Go files", dir)
	case !slices.Contains(pkgs, "main"):
		return Program{}, fmt.Errorf("program %q: package %s is not a main package", dir, pkgs[0])
	}
	return Program{PackageDir: abs}, nil
}

// Build compiles the package into tmpDir and sets p.Path; shown is the directory as the user
// gave it, for messages. Cancelling ctx stops the go tool.
func (p *Program) Build(ctx context.Context, shown, tmpDir string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return &BuildError{Dir: shown, Err: fmt.Errorf("the go command is needed to build a package directory: %w", err)}
	}
	out := filepath.Join(tmpDir, filepath.Base(p.PackageDir))
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, ".")
	cmd.Dir = p.PackageDir
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		return &BuildError{Dir: shown, Output: buf.String(), Err: err}
	}
	p.Path = out
	return nil
}
