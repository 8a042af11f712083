package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// portkeyVersion is the release of Portkey's gateway the benchmark runs,
// pinned so that figures from different days compare.
const portkeyVersion = "1.15.2"

// startTimeout bounds how long a gateway may take to start listening.
const startTimeout = 60 * time.Second

// loopbackOnly is loaded into Node before Portkey's gateway: the gateway
// listens on every interface and has no flag to say otherwise, and the
// benchmark keeps all of its traffic on the loopback.
const loopbackOnly = `import net from 'node:net';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && (args[1] === undefined || typeof args[1] === 'function')) {
    if (args[1] === undefined) args[1] = '127.0.0.1'; else args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};`

// target is one endpoint the load generator calls: the upstream itself or
// a gateway in front of it.
type target struct {
	name   string
	url    string // the chat completions URL
	header http.Header
	pid    int // the process that serves it (its workers may be its children)
}

// child is a process the harness started. Its stderr goes to a file, not
// to a pipe the harness would read: a target that logs each request (as
// rebound proxy does) must not make the harness copy its logs on the cores
// it measures with. The first bytes of the file explain a failure.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *os.File
	exited chan struct{}
}

// start runs cmd as a child that ends with the harness, even when the
// harness is killed (see endWithParent).
func start(name string, cmd *exec.Cmd) (*child, error) {
	f, err := os.CreateTemp("", "gateway-"+name+"-*.log")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // kept open, gone when the harness ends
	c := &child{name: name, cmd: cmd, stderr: f, exited: make(chan struct{})}
	cmd.Stderr = f
	endWithParent(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop asks the child to end, then kills it if it has not within a second.
func (c *child) stop() {
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
	case <-time.After(time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	c.stderr.Close()
}

// failure describes a child that did not come up: the error, and the
// first 16 KiB the child wrote on stderr.
func (c *child) failure(err error) error {
	buf := make([]byte, 16<<10)
	n, _ := c.stderr.ReadAt(buf, 0)
	if msg := strings.TrimSpace(string(buf[:n])); msg != "" {
		return fmt.Errorf("%s: %w; its stderr: %s", c.name, err, msg)
	}
	return fmt.Errorf("%s: %w", c.name, err)
}

// buildRebound builds the rebound command from the repository at repo into
// dir and returns the binary's path.
func buildRebound(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "rebound")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rebound")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rebound: %w: %s", err, out)
	}
	return bin, nil
}

// startRebound runs `rebound proxy` in front of upstream on a free loopback
// port.
func startRebound(ctx context.Context, bin, upstream string) (*child, target, error) {
	cmd := exec.CommandContext(ctx, bin, "proxy", "--upstream", upstream, "--addr", "127.0.0.1:0")
	c, base, err := startListening(ctx, "rebound proxy", cmd)
	if err != nil {
		return nil, target{}, err
	}
	return c, target{name: "rebound", url: base + "/v1/chat/completions", pid: c.pid()}, nil
}

// startListening runs cmd as a child whose first line on stdout is
// "listening on http://HOST:PORT", as rebound proxy's is, and returns the
// base URL that line gives.
func startListening(ctx context.Context, name string, cmd *exec.Cmd) (*child, string, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	c, err := start(name, cmd)
	if err != nil {
		return nil, "", err
	}
	first := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		line := ""
		if lines.Scan() {
			line = lines.Text()
		}
		first <- line
		for lines.Scan() { // keep the pipe drained so the child never blocks on it
		}
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(startTimeout):
		c.stop()
		return nil, "", c.failure(errors.New("no listening line in time"))
	case <-ctx.Done():
		c.stop()
		return nil, "", ctx.Err()
	}
	base, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		c.stop()
		return nil, "", c.failure(fmt.Errorf("first line %q, want \"listening on http://HOST:PORT\"", line))
	}
	return c, strings.TrimSpace(base), nil
}

// portkeyPackage is the package.json npm installs Portkey's gateway from:
// the release, and its HTTP server packages at the versions its own
// lockfile holds for that release. The published package leaves them to
// ranges, and @hono/node-server 1.19 breaks its streamed answers (it
// appends headers to a response whose headers it shares with the
// upstream's, which are immutable: every stream fails with a 500).
const portkeyPackage = `{"private":true,` +
	`"dependencies":{"@portkey-ai/gateway":"` + portkeyVersion + `"},` +
	`"overrides":{"@hono/node-server":"1.13.5","@hono/node-ws":"1.2.0","hono":"4.9.7"}}
`

// installPortkey installs Portkey's gateway with npm under dir, unless the
// same install is there already, and returns the path of its server
// script, the package's bin.
func installPortkey(ctx context.Context, dir string) (string, error) {
	pkg := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway")
	var manifest struct {
		Version string `json:"version"`
		Bin     string `json:"bin"`
	}
	read := func() error {
		b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &manifest)
	}
	installed, _ := os.ReadFile(filepath.Join(dir, "package.json"))
	if err := read(); err != nil || string(installed) != portkeyPackage {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(portkeyPackage), 0o644); err != nil {
			return "", err
		}
		// --ignore-scripts: the gateway's only install script applies
		// patches to its own development tree, which the package does not ship.
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-package-lock", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("npm install @portkey-ai/gateway@%s: %w: %s", portkeyVersion, err, out)
		}
		if err := read(); err != nil {
			return "", err
		}
	}
	if manifest.Version != portkeyVersion || manifest.Bin == "" {
		return "", fmt.Errorf("installed @portkey-ai/gateway is %s with bin %q, want %s and its bin", manifest.Version, manifest.Bin, portkeyVersion)
	}
	return filepath.Join(pkg, manifest.Bin), nil
}

// startPortkey runs Portkey's gateway with Node on a free loopback port,
// headless (no console UI), waits until it answers, and returns the target
// that reaches upstream through it with retries on, configured by its
// x-portkey-config header.
func startPortkey(ctx context.Context, script, upstream string, attempts int) (*child, target, error) {
	port, err := freePort()
	if err != nil {
		return nil, target{}, err
	}
	cmd := exec.CommandContext(ctx, "node", "--import", "data:text/javascript,"+url.PathEscape(loopbackOnly),
		script, "--port="+strconv.Itoa(port), "--headless")
	c, err := start("portkey gateway", cmd) // its stdout is a start-up banner only
	if err != nil {
		return nil, target{}, err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := awaitHTTP(ctx, base+"/", c.exited); err != nil {
		c.stop()
		return nil, target{}, c.failure(err)
	}
	config, err := json.Marshal(map[string]any{
		"provider":    "openai",
		"api_key":     "sk-bench",
		"custom_host": upstream + "/v1",
		"retry":       map[string]any{"attempts": attempts},
	})
	if err != nil {
		return nil, target{}, err
	}
	h := http.Header{}
	h.Set("x-portkey-config", string(config))
	return c, target{name: "portkey", url: base + "/v1/chat/completions", header: h, pid: c.pid()}, nil
}

// freePort returns a loopback port nothing listens on now, for a child
// that takes a port number rather than reporting the one it got.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// awaitHTTP polls u until it answers with any status, the child exits,
// or startTimeout passes.
func awaitHTTP(ctx context.Context, u string, exited <-chan struct{}) error {
	deadline := time.After(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before it listened")
		case <-deadline:
			return fmt.Errorf("not answering at %s after %s", u, startTimeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
