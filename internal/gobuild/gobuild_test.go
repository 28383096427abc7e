package gobuild

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveTellsWhatProgramNames(t *testing.T) {
	pkg := t.TempDir()
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(pkg)
	if err != nil || p.PackageDir != pkg || p.Path != "" {
		t.Errorf("package dir: %+v, %v", p, err)
	}
	p, err = Resolve("sh")
	if err != nil || !filepath.IsAbs(p.Path) || p.PackageDir != "" {
		t.Errorf("command in $PATH: %+v, %v", p, err)
	}
	_, err = Resolve("./no/such/program")
	if !errors.Is(err, ErrProgramNotFound) || !strings.HasPrefix(err.Error(), `program "./no/such/program": not found`) {
		t.Errorf("missing program: %v", err)
	}
	lib := t.TempDir()
	if err := os.WriteFile(filepath.Join(lib, "lib.go"), []byte("package lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(lib); err == nil || !strings.Contains(err.Error(), "not a main package") {
		t.Errorf("library package: %v", err)
	}
}
