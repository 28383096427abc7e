package launch

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

func (e *BuildError) Error() string {
	msg := fmt.Sprintf("launch: go build %s: %v", e.Dir, e.Err)
	if out := strings.TrimRight(e.Output, "\n"); out != "" {
		msg += "\n" + out
	}
	return msg
}

func (e *BuildError) Unwrap() error { return e.Err }

// program is a resolved PROGRAM: either an executable path, or a package dir to build.
type program struct {
	path     string // absolute path of the executable (after build, for packages)
	buildDir string // absolute package directory, if PROGRAM is a Go package
}

// resolveProgram decides what PROGRAM names, without building anything yet.
func resolveProgram(name string) (program, error) {
	if name == "" {
		return program{}, errors.New("launch: no program given")
	}
	if !strings.ContainsRune(name, filepath.Separator) && !strings.ContainsRune(name, '/') {
		if p, err := exec.LookPath(name); err == nil {
			return program{path: p}, nil
		}
		// A bare name may still be a package directory, e.g. "mpirun heat2d".
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			return packageProgram(name)
		}
		return program{}, fmt.Errorf("launch: program %q: %w", name, ErrProgramNotFound)
	}
	fi, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return program{}, fmt.Errorf("launch: program %q: %w", name, ErrProgramNotFound)
	}
	if err != nil {
		return program{}, fmt.Errorf("launch: program %q: %w", name, err)
	}
	if fi.IsDir() {
		return packageProgram(name)
	}
	if _, err := exec.LookPath(name); err != nil {
		return program{}, fmt.Errorf("launch: program %q: not executable: %w", name, err)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return program{}, fmt.Errorf("launch: program %q: %w", name, err)
	}
	return program{path: abs}, nil
}

// packageProgram checks that dir holds a Go main package. Only package clauses are parsed:
// cheap, and it turns "go build" producing a non-executable into a clear message.
func packageProgram(dir string) (program, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return program{}, fmt.Errorf("launch: program %q: %w", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(abs, "*.go"))
	if err != nil {
		return program{}, fmt.Errorf("launch: program %q: %w", dir, err)
	}
	fset := token.NewFileSet()
	var pkgs []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly)
		if err != nil {
			return program{}, fmt.Errorf("launch: program %q: %w", dir, err)
		}
		pkgs = append(pkgs, af.Name.Name)
	}
	switch {
	case len(pkgs) == 0:
		return program{}, fmt.Errorf("launch: program %q is a directory without Go files", dir)
	case !slices.Contains(pkgs, "main"):
		return program{}, fmt.Errorf("launch: program %q: package %s is not a main package", dir, pkgs[0])
	}
	return program{buildDir: abs}, nil
}

// build compiles the package into tmpDir and sets p.path.
func (p *program) build(ctx context.Context, shown, tmpDir string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return &BuildError{Dir: shown, Err: fmt.Errorf("the go command is needed to build a package directory: %w", err)}
	}
	out := filepath.Join(tmpDir, filepath.Base(p.buildDir))
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, ".")
	cmd.Dir = p.buildDir
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		return &BuildError{Dir: shown, Output: buf.String(), Err: err}
	}
	p.path = out
	return nil
}
