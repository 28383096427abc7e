package pcmd

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ownerEnv makes the test binary a pcmd stand-in (TestMain): it creates a memory store
// ("ROOT NODE"), prints its directory and holds it until killed or its stdin closes.
const ownerEnv = "MPIOS_TEST_MEMSTORE_OWNER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(ownerEnv); spec != "" {
		os.Exit(holdMemStore(spec))
	}
	os.Exit(m.Run())
}

func holdMemStore(spec string) int {
	root, node, _ := strings.Cut(spec, " ")
	m, err := createMemStore(root, node)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	os.Stdout.WriteString(m.dir + "\n")
	io.Copy(io.Discard, os.Stdin)
	if err := m.close(); err != nil {
		return 1
	}
	return 0
}

// startOwner starts a process owning a new memory store of node under root, and returns
// the process and the store's directory.
func startOwner(t *testing.T, root, node string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+root+" "+node)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil { // held open: the owner lives until killed
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("owner of a store of %s: %v", node, err)
	}
	return cmd, strings.TrimSpace(line)
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// age sets the modification time of path and everything under it d before now.
func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	err := filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemStoreOfKilledPcmdIsReclaimed: the memory store of a pcmd killed with SIGKILL is
// reclaimed with the memory its pieces held; the store of a live pcmd is not, however old.
func TestMemStoreOfKilledPcmdIsReclaimed(t *testing.T) {
	root := t.TempDir()
	dead, deadDir := startOwner(t, root, "n1")
	_, liveDir := startOwner(t, root, "n2")
	if !strings.HasPrefix(filepath.Base(deadDir), memPrefix+"n1-") || !exists(t, filepath.Join(deadDir, ownerFile)) {
		t.Fatalf("store %s: want %sn1-* holding %s", deadDir, memPrefix, ownerFile)
	}
	const piece = 1 << 20
	for _, dir := range []string{deadDir, liveDir} {
		if err := os.MkdirAll(filepath.Join(dir, "job", "1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "job", "1", "rank-0"), make([]byte, piece), 0o600); err != nil {
			t.Fatal(err)
		}
		age(t, dir, time.Hour)
	}

	dirs, n, err := reclaimMemStores(root, time.Now())
	if err != nil || len(dirs) != 0 || n != 0 {
		t.Fatalf("with both owners alive: reclaimed %v (%d bytes), %v; want nothing", dirs, n, err)
	}

	if err := dead.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	dead.Wait()
	dirs, n, err = reclaimMemStores(root, time.Now())
	if err != nil || !slices.Equal(dirs, []string{deadDir}) || n < piece {
		t.Fatalf("after n1's owner was killed: reclaimed %v (%d bytes), %v; want %s (at least %d bytes)", dirs, n, err, deadDir, piece)
	}
	if exists(t, deadDir) || !exists(t, filepath.Join(liveDir, "job", "1", "rank-0")) {
		t.Fatalf("after reclaiming: %s exists %v (want gone), %s's piece exists %v (want kept)",
			deadDir, exists(t, deadDir), liveDir, exists(t, filepath.Join(liveDir, "job", "1", "rank-0")))
	}
}

// TestMemStoreInCreationIsKept: a store under its temporary name is left to the pcmd
// creating it, unless left alone for reclaimAge with no one holding its lock.
func TestMemStoreInCreationIsKept(t *testing.T) {
	root := t.TempDir()
	fresh := filepath.Join(root, memTempPrefix+"n1-1")  // just made, its lock file not locked yet
	locked := filepath.Join(root, memTempPrefix+"n2-2") // old, but its owner holds it
	left := filepath.Join(root, memTempPrefix+"n3-3")   // old, its creator died
	for _, dir := range []string{fresh, locked, left} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m, err := createMemStore(t.TempDir(), "n2")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	// The lock of another opening of the same file: held against the reclaimer as if
	// another process held it.
	if err := os.Rename(filepath.Join(m.dir, ownerFile), filepath.Join(locked, ownerFile)); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, left} {
		if err := os.WriteFile(filepath.Join(dir, ownerFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	age(t, locked, 2*reclaimAge)
	age(t, left, 2*reclaimAge)

	reclaimsOnly(t, root, left)
	if !exists(t, fresh) || !exists(t, locked) {
		t.Fatalf("store in creation removed: %s %v, %s %v", fresh, exists(t, fresh), locked, exists(t, locked))
	}
}

// TestMemStoreOfOlderPcmdIsReclaimedWhenIdle: a store without an owner lock (made by a
// pcmd from before it) is reclaimed once nothing in it was modified for reclaimAge, not
// before. Nothing else
// under the root is touched, and links are not followed.
func TestMemStoreOfOlderPcmdIsReclaimedWhenIdle(t *testing.T) {
	root := t.TempDir()
	recent := filepath.Join(root, memPrefix+"n1-1")
	idle := filepath.Join(root, memPrefix+"n2-2")
	busy := filepath.Join(root, memPrefix+"n3-3") // a piece written just now, deep inside
	other := filepath.Join(root, "other-store")
	for _, dir := range []string{recent, idle, filepath.Join(busy, "job", "1"), other} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	age(t, busy, 2*reclaimAge)
	if err := os.WriteFile(filepath.Join(busy, "job", "1", "rank-0"), []byte("piece"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, memPrefix+"link")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	age(t, idle, 2*reclaimAge)
	age(t, other, 2*reclaimAge)

	reclaimsOnly(t, root, idle)
	for _, p := range []string{recent, busy, other, link} {
		if !exists(t, p) {
			t.Errorf("%s removed", p)
		}
	}
	if dirs, _, err := reclaimMemStores(root, time.Now().Add(2*reclaimAge)); err != nil || !slices.Equal(dirs, []string{recent, busy}) {
		t.Fatalf("%v later: reclaimed %v, %v; want %s and %s", 2*reclaimAge, dirs, err, recent, busy)
	}
}

// TestMemStoreClose: a pcmd that stops removes its store itself.
func TestMemStoreClose(t *testing.T) {
	root := t.TempDir()
	m, err := createMemStore(root, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Fatalf("after close: %v in %s, %v; want nothing", ents, root, err)
	}
}

// reclaimsOnly reclaims the memory stores under root and checks that exactly dir went.
func reclaimsOnly(t *testing.T, root, dir string) {
	t.Helper()
	dirs, _, err := reclaimMemStores(root, time.Now())
	if err != nil || !slices.Equal(dirs, []string{dir}) {
		t.Fatalf("reclaimed %v, %v; want only %s", dirs, err, dir)
	}
}
