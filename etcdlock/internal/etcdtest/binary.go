package etcdtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// EnvBinary, when set, names an etcd server binary to use instead of the
// one Binary builds.
const EnvBinary = "SQLOCK_ETCD_BINARY"

// EnvCache, when set, is the directory Binary builds into (default: the
// user's cache directory's sqlock/etcdtest).
const EnvCache = "SQLOCK_ETCD_CACHE"

// serverModule is the module path of the server's main, a module of its
// own so that etcd's server dependencies stay out of etcdlock's graph.
const serverModule = "github.com/sqlock/sqlock/etcdlock/internal/etcdtest/etcdserver"

var binary struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of an etcd server binary: $SQLOCK_ETCD_BINARY
// if set; otherwise Debian's etcd-server (`etcd` on PATH, 3.4 or later:
// `make test` installs it); otherwise the one built from the etcdserver
// module beside this file (go.etcd.io/etcd/server/v3 at the version
// etcdlock's client uses) into the cache, on first use. The installed
// server comes first because building etcd's server costs minutes of CPU
// on a two-core CI machine, where the whole suite has a 15-minute budget;
// etcdlock speaks only the v3 KV, lease and watch APIs that 3.4 serves as
// later releases do. The cache entry is named by a hash of the module's
// files, so a version bump builds anew; concurrent test binaries build it
// once (a file lock).
func Binary() (string, error) {
	binary.once.Do(func() { binary.path, binary.err = findOrBuild() })
	return binary.path, binary.err
}

func findOrBuild() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	if p, ok := installed(); ok {
		return p, nil
	}
	src, err := serverSource()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", fmt.Errorf("etcdtest: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s/%s\n", runtime.GOOS, runtime.GOARCH)
	cache := os.Getenv(EnvCache)
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "sqlock", "etcdtest")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("etcdtest: %w", err)
	}
	bin := filepath.Join(cache, "etcd-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Another test binary may be building it: wait for its lock.
	lf, err := os.OpenFile(filepath.Join(cache, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("etcdtest: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("etcdtest: lock the build: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := bin + ".building"
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("etcdtest: build the etcd server in %s: %w\n%s", src, err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("etcdtest: %w", err)
	}
	return bin, nil
}

// installed is the etcd server on PATH when its version is 3.4 or later
// (the first release whose flags the cluster harness passes all exist).
func installed() (string, bool) {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", false
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return "", false
	}
	return p, supported(string(out))
}

// supported reads `etcd --version`'s "etcd Version: 3.4.23" line.
func supported(version string) bool {
	for _, line := range strings.Split(version, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version: ")
		if !ok {
			continue
		}
		var major, minor int
		if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
			return false
		}
		return major > 3 || major == 3 && minor >= 4
	}
	return false
}

// serverSource is the directory of the etcdserver module: beside this
// file, or (in a -trimpath build, whose file names are not paths) where
// the go command finds this package.
func serverSource() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "etcdserver")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", strings.TrimSuffix(serverModule, "/etcdserver")).Output()
	if err != nil {
		return "", errors.New("etcdtest: cannot find the etcdserver module's directory (set " + EnvBinary + ")")
	}
	return filepath.Join(strings.TrimSpace(string(out)), "etcdserver"), nil
}
