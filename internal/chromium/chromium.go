// Package chromium finds, for tests, a headless Chromium from the
// machine's own packages, installing it when it is missing, so that the
// proxy's status page is tested in a real browser and not only against
// its own idea of one.
//
// Find looks for the browser on PATH (chromium, chromium-browser) and,
// when there is none, installs Debian's package "chromium" with apt-get
// (apt-get update, then apt-get install -y chromium): only as root, and
// under a lock file in the temporary folder, so that test binaries that
// start at the same time wait for one install rather than each running
// apt-get. Later runs find it on PATH and need neither apt nor the
// network.
//
// Need is what tests call: it fails the test with one line when there is
// no browser and none could be installed (a test that needs a real
// browser must not pass without one), and skips it, saying why, only when
// SkipEnv=1 asks for that. Home gives the browser a test runs folders of
// the test's own, so that it leaves nothing in the home or temporary
// folder.
package chromium

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rebound-go/rebound/internal/filelock"
	"time"
)

// SkipEnv set to 1 makes the tests that need a browser skip, saying so,
// on a machine where Chromium cannot be installed.
const SkipEnv = "REBOUND_NO_CHROMIUM"

// Package is the Debian package installed when no browser is found.
const Package = "chromium"

// names are the executables looked for on PATH, in order.
var names = []string{"chromium", "chromium-browser"}

// installTimeout bounds apt-get update and install together.
const installTimeout = 10 * time.Minute

// ErrNotRoot is returned when no browser is on PATH and the process may
// not install one.
var ErrNotRoot = errors.New("chromium: no chromium on PATH and not root to install it: run apt-get install -y " + Package + ", or set " + SkipEnv + "=1 to skip the browser tests")

// An InstallError says that apt-get failed to install the browser.
type InstallError struct {
	Step   string // "apt-get update" or "apt-get install"
	Output string // apt-get's last line of output
	Err    error
}

func (e *InstallError) Error() string {
	msg := fmt.Sprintf("chromium: %s: %v", e.Step, e.Err)
	if e.Output != "" {
		msg += ": " + e.Output
	}
	return msg
}

func (e *InstallError) Unwrap() error { return e.Err }

// Find returns the path of a Chromium executable, installing the
// browser's package first when none is on PATH. It is safe to call from
// several goroutines and processes at once.
func Find(ctx context.Context) (string, error) {
	if path, ok := lookPath(); ok {
		return path, nil
	}
	if os.Geteuid() != 0 {
		return "", ErrNotRoot
	}
	unlock, err := filelock.Lock(filepath.Join(os.TempDir(), "rebound-chromium-install.lock"))
	if err != nil {
		return "", fmt.Errorf("chromium: %w", err)
	}
	defer unlock()
	if path, ok := lookPath(); ok { // another process installed it while this one waited
		return path, nil
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	if err := aptGet(ctx, "apt-get update", "update"); err != nil {
		return "", err
	}
	if err := aptGet(ctx, "apt-get install", "install", "-y", "--no-install-recommends", Package); err != nil {
		return "", err
	}
	if path, ok := lookPath(); ok {
		return path, nil
	}
	return "", fmt.Errorf("chromium: apt-get installed %s but none of %v is on PATH", Package, names)
}

// lookPath returns the first of names on PATH.
func lookPath() (string, bool) {
	for _, n := range names {
		if path, err := exec.LookPath(n); err == nil {
			return path, true
		}
	}
	return "", false
}

// aptGet runs apt-get with args, without questions.
func aptGet(ctx context.Context, step string, args ...string) error {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &InstallError{Step: step, Output: lastLine(string(out)), Err: err}
	}
	return nil
}

// lastLine returns the last line of out that says something.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Home returns the environment of a browser run by t, to add to its own,
// and a folder for its profile (--user-data-dir), so that it leaves
// nothing in the home or temporary folder: Chromium writes its crash
// reports' settings under the home's .config and GLib's under .cache,
// whatever its profile, and makes a folder in the temporary folder for
// its profile's lock, which a browser killed at the test's end never
// removes. The home and XDG folders and the profile are in t.TempDir();
// the temporary folder is one of the system's, short-named because the
// lock is a Unix socket, whose path may not pass 107 bytes. Both go when
// t ends, after the cleanups t registers later (the browser's end).
func Home(t TB) (env []string, profile string) {
	t.Helper()
	dir := t.TempDir()
	tmp, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(tmp); err != nil {
			t.Errorf("chromium: removing its temporary folder: %v", err)
		}
	})
	return []string{
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(dir, ".local", "share"),
		"TMPDIR=" + tmp,
	}, filepath.Join(dir, "profile")
}

// TB is the part of testing.TB that Need and Home use.
type TB interface {
	Helper()
	Context() context.Context
	TempDir() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Need returns the path of a Chromium for t, installing one if it must.
// It skips t if SkipEnv asks and fails it with one line on any error.
func Need(t TB) string {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s=1: not running the test in a real Chromium", SkipEnv)
	}
	path, err := Find(t.Context())
	if err != nil {
		t.Fatalf("%v", err)
	}
	return path
}
