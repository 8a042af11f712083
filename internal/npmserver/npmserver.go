// Package npmserver runs, for tests, MCP servers and clients that no one
// here wrote: the reference servers published with npm, and the official
// OpenAI Node SDK and TypeScript MCP SDK, at versions pinned here, so
// that the MCP module and the proxy are tested against the behaviour of
// real servers and SDKs and not only against their own idea of one.
//
// Install puts a package into a cache folder once (os.UserCacheDir()/
// rebound/npm/NAME@VERSION, or under $REBOUND_NPM_CACHE): npm installs it
// into a temporary folder beside the final one, which is then renamed into
// place, so a folder that exists is a complete install; a lock file beside
// it makes test binaries that install at the same time wait for one
// another rather than all running npm. Later runs find the folder and need
// neither npm nor the network.
//
// EverythingStdio, MemoryStdio, EverythingHTTP, NodeScript and
// NodeScriptWith are what tests call: they install the server or SDK,
// fail the test with one line if Node.js or npm is missing (a test that
// needs a real server must not pass without one), and skip it, saying
// why, only when REBOUND_NO_NPM=1 asks for that. The servers
// run with an environment of PATH, HOME and TMPDIR only, since the
// everything server has a tool that echoes its environment back.
package npmserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rebound-go/rebound/internal/filelock"
)

// A Package is an npm package, at a pinned version: an MCP server, or a
// library a test's script requires.
type Package struct {
	Name    string // the npm package name
	Version string // the exact version installed
	Bin     string // the name of the executable the package declares; "" for a library
}

// The pinned servers. A new version is taken by changing it here; the
// cache keeps each version in a folder of its own.
var (
	// Everything is the reference server that exercises every feature of
	// the protocol, over stdio or streamable HTTP.
	Everything = Package{Name: "@modelcontextprotocol/server-everything", Version: "2026.8.31", Bin: "mcp-server-everything"}
	// Memory is the reference knowledge-graph server, over stdio; it keeps
	// its graph in the file MEMORY_FILE_PATH names.
	Memory = Package{Name: "@modelcontextprotocol/server-memory", Version: "2026.8.31", Bin: "mcp-server-memory"}
	// OpenAI is the official OpenAI SDK for Node.js, a library: a test's
	// script (NodeScript) requires it as "openai".
	OpenAI = Package{Name: "openai", Version: "7.59.0"}
	// MCPSDK is the official TypeScript MCP SDK, a library: a test's
	// script (NodeScript) requires its client, as
	// "@modelcontextprotocol/sdk/client/index.js".
	MCPSDK = Package{Name: "@modelcontextprotocol/sdk", Version: "1.32.2"}
)

// The environment variables the package reads.
const (
	// CacheEnv names a folder that replaces os.UserCacheDir()/rebound/npm.
	CacheEnv = "REBOUND_NPM_CACHE"
	// SkipEnv set to 1 makes the tests that need a server skip, saying so,
	// on a machine without Node.js.
	SkipEnv = "REBOUND_NO_NPM"
)

// ErrNoNode is returned when node or npm is not on PATH.
var ErrNoNode = errors.New("node and npm are needed to run the real MCP servers these tests use; install Node.js, or set " + SkipEnv + "=1 to skip the tests")

// An InstallError says that npm failed to install a package.
type InstallError struct {
	Package Package
	Output  string // npm's own line about the failure
	Err     error
}

func (e *InstallError) Error() string {
	msg := fmt.Sprintf("npmserver: npm install %s@%s: %v", e.Package.Name, e.Package.Version, e.Err)
	if e.Output != "" {
		msg += ": " + e.Output
	}
	return msg
}

func (e *InstallError) Unwrap() error { return e.Err }

// cacheRoot returns the folder that holds the installs.
func cacheRoot() (string, error) {
	if dir := os.Getenv(CacheEnv); dir != "" {
		return filepath.Abs(dir)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("npmserver: no cache folder (set %s): %w", CacheEnv, err)
	}
	return filepath.Join(dir, "rebound", "npm"), nil
}

// folder is the name of p's install under the cache root; a scoped
// name's slash would otherwise make a folder level of its own.
func (p Package) folder() string {
	return strings.ReplaceAll(p.Name, "/", "+") + "@" + p.Version
}

// Install installs p into the cache unless it is there, and returns the
// path of the script that starts its server; for a library, the
// node_modules folder that holds it (NODE_PATH for a script that
// requires it). It is safe to call from
// several goroutines and processes at once.
func Install(ctx context.Context, p Package) (script string, err error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("npmserver: %w", ErrNoNode)
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, p.folder())
	if script, err := p.script(dir); err == nil {
		return script, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("npmserver: %w", err)
	}
	unlock, err := filelock.Lock(filepath.Join(root, p.folder()+".lock"))
	if err != nil {
		return "", fmt.Errorf("npmserver: %w", err)
	}
	defer unlock()
	// Another process may have installed it while this one waited.
	if script, err := p.script(dir); err == nil {
		return script, nil
	}
	// A folder there but broken (files deleted by hand) is replaced.
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("npmserver: %w", err)
	}
	if err := p.installInto(ctx, root, dir); err != nil {
		return "", err
	}
	return p.script(dir)
}

// installInto runs npm into a temporary folder in root and renames it to
// dir, so that dir, once it exists, is complete.
func (p Package) installInto(ctx context.Context, root, dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npmserver: %w", ErrNoNode)
	}
	tmp, err := os.MkdirTemp(root, "."+p.folder()+".tmp-")
	if err != nil {
		return fmt.Errorf("npmserver: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", tmp,
		"--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", p.Name+"@"+p.Version)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &InstallError{Package: p, Output: npmErrorLine(string(out)), Err: err}
	}
	if _, err := p.script(tmp); err != nil {
		return &InstallError{Package: p, Err: err}
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Where there is no lock (see lock), another process may have won.
		if _, serr := p.script(dir); serr == nil {
			return nil
		}
		return fmt.Errorf("npmserver: %w", err)
	}
	return nil
}

// npmErrorLine picks, from npm's output, the line that says what went
// wrong: its first "npm error" line, else its last line.
func npmErrorLine(out string) string {
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "npm error") || strings.HasPrefix(l, "npm ERR!") {
			return strings.TrimSpace(l)
		}
	}
	return lastLine(out)
}

// script returns the path of the script p declares as Bin in an install
// folder, or an error if it is not there.
func (p Package) script(dir string) (string, error) {
	pkg := filepath.Join(dir, "node_modules", filepath.FromSlash(p.Name))
	data, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		return "", err
	}
	var manifest struct {
		Version string          `json:"version"`
		Bin     json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		return "", fmt.Errorf("%s/package.json: %w", p.Name, err)
	}
	if manifest.Version != p.Version {
		return "", fmt.Errorf("%s is at version %q, want %s", p.Name, manifest.Version, p.Version)
	}
	if p.Bin == "" {
		return filepath.Join(dir, "node_modules"), nil
	}
	// "bin" is a path, or a map from executable name to path.
	var bins map[string]string
	if err := json.Unmarshal(manifest.Bin, &bins); err != nil {
		var one string
		if json.Unmarshal(manifest.Bin, &one) != nil {
			return "", fmt.Errorf("%s/package.json: no bin", p.Name)
		}
		bins = map[string]string{p.Bin: one}
	}
	rel, ok := bins[p.Bin]
	if !ok {
		return "", fmt.Errorf("%s declares no executable %q", p.Name, p.Bin)
	}
	script := filepath.Join(pkg, filepath.FromSlash(rel))
	if _, err := os.Stat(script); err != nil {
		return "", err
	}
	return script, nil
}
