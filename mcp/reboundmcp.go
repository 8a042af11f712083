package reboundmcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// ErrServerDown is wrapped by the error a caller sees when the server
// stayed down for all of Options.DownWait, or its respawn breaker is open.
var ErrServerDown = errors.New("reboundmcp: MCP server is down")

var errNoUpstream = errors.New("reboundmcp: the Upstream is not set: make one with Command or HTTP")

// Upstream says how to reach one MCP server. A fresh connection is opened
// when the server is first needed and after every crash or lost session.
// Make one with Command or HTTP.
type Upstream struct {
	name     string
	sessions bool // HTTP: the server may lose the session
	// inline: a request is written into a pipe with room for it (a
	// child's standard input), so that a call's first attempt may be
	// written on the goroutine that took it from the client
	inline bool
	dial   func(ctx context.Context, o *Options) (mcp.Connection, error)
}

// Command is an Upstream that runs cmd and speaks to it over its standard
// input and output. cmd is a template: its Path, Args, Env, Dir and Stderr
// are copied for each start, and cmd itself is never started. Each child
// runs in a process group of its own, which is killed whole (SIGTERM, then
// SIGKILL) when the server is replaced or the Transport closed, so that no
// grandchild outlives it; on Linux the child also gets SIGKILL when the
// program ends, however it ends. A server that stops reading its input,
// so that a write to it does not finish within Options.IdleTimeout, is
// killed as if it had crashed.
func Command(cmd *exec.Cmd) Upstream {
	tmpl := *cmd
	var args []string
	if len(cmd.Args) > 1 {
		args = cmd.Args[1:]
	}
	return Upstream{name: commandName(cmd.Path, args), inline: true, dial: func(ctx context.Context, o *Options) (mcp.Connection, error) {
		return startChild(ctx, &tmpl, o.idleTimeout())
	}}
}

// HTTP is an Upstream that speaks the streamable HTTP transport to the
// endpoint (the server's MCP URL). Requests go through client with
// rebound's Transport beneath it, which retries 429, 503 and refused
// connections under Options.Policy; a nil client means one with
// http.DefaultClient's settings. Closing the Transport ends the session
// with the spec's DELETE. The endpoint's user and password, path and query
// string (where hosted servers take their keys) go with every request to
// it, but never into errors and logs, which name the server by its host
// and port (Options.Name, if set).
func HTTP(endpoint string, client *http.Client) Upstream {
	name := "(bad endpoint)" // never the endpoint itself, which may hold a key
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		name = u.Host
	}
	return Upstream{name: name, sessions: true, dial: func(ctx context.Context, o *Options) (mcp.Connection, error) {
		return dialHTTP(ctx, endpoint, client, o)
	}}
}

// Options configure a Transport. The zero value works: each field
// documents its default.
type Options struct {
	// Name names the server in logs and events. Empty means, for a
	// Command, the package a runner such as npx or uvx fetches
	// (server-memory for npx -y @modelcontextprotocol/server-memory),
	// or else the command's base name; for HTTP, the endpoint's host.
	Name string
	// Policy bounds the retries of HTTP failures (429 and 503 with their
	// Retry-After, refused and reset connections) and of requests resent
	// after a crash or lost session; its Observer, Breaker and Budget
	// apply, its Hedge and AttemptTimeout do not (IdleTimeout bounds an
	// attempt). The zero value is rebound's default policy.
	Policy rebound.Policy
	// DownWait is how long a call waits for a server that is down (being
	// restarted, or its breaker open) before it fails with ErrServerDown.
	// Zero means 10 s; negative means calls fail at once.
	DownWait time.Duration
	// IdleTimeout cancels a call that has had no result and no progress
	// notification for this long: the server is sent
	// notifications/cancelled, the caller an error. Zero means 60 s;
	// negative means never.
	IdleTimeout time.Duration
	// RestartMin and RestartMax bound the respawn backoff (a new HTTP
	// session counts as a start), which rebound.Do's engine waits: the
	// first restart after a healthy run is at once, the next after
	// RestartMin, doubling up to RestartMax, each drawn from the upper
	// half of its span (rebound.JitterEqual). Zero or negative means
	// 100 ms and 2 s.
	RestartMin, RestartMax time.Duration
	// HealthyAfter is how long a server must run for the backoff to start
	// over. Zero or negative means 10 s.
	HealthyAfter time.Duration
	// CrashLimit crashes within CrashWindow open the respawn breaker, a
	// breaker.Breaker whose rolling window counts the crashes alone: no
	// restart for CrashCooldown, and calls fail at once with
	// ErrServerDown; then one probe start, which closes the breaker once
	// it has run for HealthyAfter, or opens it again when it dies sooner.
	// Zero means 10 crashes; negative means no breaker. Zero or negative
	// windows mean 30 s each.
	CrashLimit                 int
	CrashWindow, CrashCooldown time.Duration
	// Tools says, for the tools it names, whether a tools/call cut short
	// by a crash or a lost session may be sent again: tool.ReadOnly and
	// tool.Idempotent are resent, tool.SideEffects is not. It overrides
	// their annotations. A tool it does not name, or names as
	// tool.Unknown, is judged by its annotations: readOnlyHint or
	// idempotentHint in its last listing make it safe to resend, anything
	// else (no hints, a tool never listed) does not.
	Tools map[string]tool.Kind
	// IgnoreAnnotations treats every tool not in Tools as side-effecting,
	// whatever its annotations say.
	IgnoreAnnotations bool
	// Observer receives an Event for every attempt of a client request
	// (Target "mcp:NAME/TOOL" for a tools/call, "mcp:NAME/METHOD"
	// otherwise), and an EventRestart or EventBreaker (Target "mcp:NAME")
	// for every restart and change of the respawn breaker. Nil means
	// Policy.Observer. Events come on the session's own goroutines: a
	// panic in either Observer is recovered, logged (mcp.observer_panic)
	// and the event dropped, never the program ended.
	Observer rebound.Observer
	// Logger gets one line per client request: server, method, tool,
	// attempts, outcome, whether the server restarted, and duration;
	// never arguments or results. Restarts and breaker changes are logged
	// too. Nil means none.
	Logger *slog.Logger
}

// Transport is an mcp.Transport whose Connection survives the server's
// crashes, hangs and lost sessions. Give it to mcp.Client.Connect, or
// relay a client's connection through it with Serve. A Transport is
// connected at most once.
type Transport struct {
	up Upstream
	o  Options
}

// New returns a Transport to the server up, configured by o.
func New(up Upstream, o Options) *Transport {
	if o.Name == "" {
		o.Name = up.name
	}
	o.Observer = guardObserver(o.Observer, o.Logger)
	o.Policy.Observer = guardObserver(o.Policy.Observer, o.Logger)
	return &Transport{up: up, o: o}
}

// Connect opens the resilient connection. The server itself is started (or
// the HTTP session opened) when the first message is sent.
func (t *Transport) Connect(ctx context.Context) (mcp.Connection, error) {
	if t.up.dial == nil {
		return nil, errNoUpstream
	}
	return newSession(ctx, t, nil), nil
}

// Serve relays one client connection through t until the client closes
// it or ctx ends, then closes the upstream: a stdio server's process group
// is ended, an HTTP session DELETEd. A client whose input ends (io.EOF)
// first gets the answers to the requests it made, for at most the down
// wait and the idle timeout together. Over a client connection made by
// NewLineConn, a line that is not JSON-RPC is answered with a parse error
// and the relay goes on; over another, it ends the relay. The client's
// messages are passed on by the goroutine that reads them, and the answers
// written to the client by the goroutine that has them, without a hand-off
// between the two.
func Serve(ctx context.Context, client mcp.Connection, t *Transport) error {
	if t.up.dial == nil {
		client.Close()
		return errNoUpstream
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once    sync.Once
		failure error
	)
	fail := func(err error) {
		once.Do(func() {
			failure = err
			cancel()
			client.Close()
		})
	}
	// A client's Read may not heed its context (a lineConn's does not):
	// closing the client ends it.
	defer context.AfterFunc(parent, func() { fail(parent.Err()) })()
	up := newSession(ctx, t, func(msg jsonrpc.Message) error {
		err := client.Write(ctx, msg)
		if err != nil {
			fail(err)
		}
		return err
	})
	lines, _ := client.(*lineConn)
	for {
		msg, err := client.Read(ctx)
		var bad *lineError
		if lines != nil && errors.As(err, &bad) {
			if t.o.Logger != nil {
				t.o.Logger.Warn("mcp.parse_error", "server", t.o.Name, "error", bad.Error())
			}
			err = lines.answerParseError(bad)
		} else if err == nil {
			err = up.Write(ctx, msg)
		}
		if errors.Is(err, io.EOF) {
			// The client is done asking, not done listening: what it
			// asked is answered first, as a server it talked to directly
			// would, for as long as a call may take.
			settle, stop := context.WithTimeout(ctx, max(orDefault(t.o.DownWait, defaultDownWait), 0)+orDefault(t.o.idleTimeout(), defaultIdleTimeout))
			up.settled(settle)
			stop()
		}
		if err != nil {
			fail(err)
			break
		}
	}
	up.Close()
	if parent.Err() != nil || errors.Is(failure, io.EOF) || errors.Is(failure, mcp.ErrConnectionClosed) {
		return nil
	}
	return failure
}
