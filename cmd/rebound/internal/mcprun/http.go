package mcprun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/cmd/rebound/internal/metrics"
	"github.com/rebound-go/rebound/internal/front"
	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// Path is where the MCP endpoint is served.
const Path = "/mcp"

// maxBody caps a client's POST body, as the SDK's own handler does.
const maxBody = mcp.DefaultMaxRequestBodyBytes

// runHTTP serves up over streamable HTTP (serveHTTP) with opts, the
// metrics of its calls on /metrics, and the tool rules of c.ConfigFile
// re-read at each SIGHUP for the sessions opened after it.
func runHTTP(ctx context.Context, c Config, up reboundmcp.Upstream, opts reboundmcp.Options, stdout, stderr io.Writer, closed func()) int {
	m, err := metrics.New()
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: metrics: %v\n", err)
		return 1
	}
	defer m.Close()
	opts.Observer = m.Observer
	var live atomic.Pointer[reboundmcp.Options]
	live.Store(&opts)
	newTransport := func() *reboundmcp.Transport { return reboundmcp.New(up, *live.Load()) }
	hangup := func() { reloadTools(c.ConfigFile, &live, opts.Logger) }
	return serveHTTP(ctx, c, newTransport, m, hangup, opts.Logger, stdout, stderr, closed)
}

// reloadTools re-reads the tool rules of file into live, or logs why not
// in one line (and that there is no file to re-read, when there is none).
func reloadTools(file string, live *atomic.Pointer[reboundmcp.Options], logger *slog.Logger) {
	if file == "" {
		if logger != nil {
			logger.Warn("SIGHUP ignored: there is no --config to re-read")
		}
		return
	}
	tools, err := readToolRules(file)
	if err != nil {
		if logger != nil {
			logger.Error("config refused", "error", err.Error())
		}
		return
	}
	o := *live.Load()
	o.Tools = tools
	live.Store(&o)
	if logger != nil {
		logger.Info("config loaded", "tools", len(tools))
	}
}

// serveHTTP serves streamable HTTP at Path behind the front of every
// server of rebound's (internal/front: the door, /healthz, /readyz,
// /metrics, SIGHUP) until ctx is done, then takes no new session, lets
// the calls in flight finish for up to c.Drain, and ends every session
// (and so its upstream). closed is called once every upstream is closed.
// At SIGHUP, hangup re-reads what it can, and the stateless clients' next
// request starts an upstream that holds it.
func serveHTTP(ctx context.Context, c Config, newTransport func() *reboundmcp.Transport, m *metrics.Metrics, hangup func(), logger *slog.Logger, stdout, stderr io.Writer, closed func()) int {
	door, err := frontdoor.New(c.Door)
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 2
	}
	// The sessions outlive ctx: at its end they finish their calls in
	// flight (Stopping), and f.Close ends them.
	f := newFront(context.WithoutCancel(ctx), door, newTransport, c.MaxSessions, c.SessionTimeout)
	f.logger, f.name = logger, c.Options.Name
	f.metrics = m.Handler
	f.admin = front.Admin{Token: c.AdminToken, Server: "rebound mcp", Pages: "the admin pages (/metrics)"}
	errorLog := log.New(io.Discard, "", 0)
	if logger != nil {
		errorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	var shut sync.WaitGroup
	err = front.Run(ctx, front.Config{
		Addr:     c.Addr,
		Handler:  f,
		ErrorLog: errorLog,
		Path:     Path,
		Drain:    c.Drain,
		Stdout:   stdout,
		Hangup:   func() { hangup(); f.renewStateless() },
		Stopping: func() {
			f.draining.Store(true)
			// The calls in flight finish, for up to the drain, then the
			// sessions end: a client's event stream would hold the drain
			// open to its end.
			ctx, cancel := context.WithTimeout(context.Background(), c.Drain)
			shut.Go(func() {
				defer cancel()
				f.Shutdown(ctx)
				closed() // a second signal may now cut the drain short
			})
		},
	})
	f.Close()
	shut.Wait()
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 1
	}
	return 0
}

// endpoint is rebound mcp --addr's HTTP handler: the front (the door,
// the front's own paths), then the server's Handler.
type endpoint struct {
	*Handler
	door     *frontdoor.Door
	metrics  http.Handler // nil: none
	admin    front.Admin
	draining atomic.Bool
}

func newFront(ctx context.Context, door *frontdoor.Door, newTransport func() *reboundmcp.Transport, max int, timeout time.Duration) *endpoint {
	return &endpoint{Handler: newHandler(ctx, newTransport, max, timeout), door: door}
}

// Door, Refuse, Draining, Metrics and AdmitAdmin make the endpoint a
// front.Mounted.
func (f *endpoint) Door() *frontdoor.Door { return f.door }

// Refuse writes a refusal as the MCP client reads errors, a JSON-RPC
// error body.
func (f *endpoint) Refuse(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	refuse(w, status, msg)
}

func refuse(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusForbidden {
		msg = "Forbidden: " + msg
	}
	writeError(w, status, codeServerError, msg)
}

func (f *endpoint) Draining() bool        { return f.draining.Load() }
func (f *endpoint) Metrics() http.Handler { return f.metrics }

func (f *endpoint) AdmitAdmin(w http.ResponseWriter, r *http.Request) bool {
	return f.admin.Admit(w, r, refuse)
}

// ServeHTTP implements http.Handler: the front first (the door, whose
// refusals are written as the MCP client reads errors, and the front's
// own paths), then the client sessions.
func (f *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A body is bounded from the first: net/http reads what is left of
	// one before it sends any answer, a refusal's too, and would wait
	// for ever for one that does not come.
	body := frontdoor.NewBodyReader(http.MaxBytesReader(w, r.Body, maxBody), http.NewResponseController(w), time.Now().Add(frontdoor.BodyTimeout), r.ContentLength)
	if r.Body != http.NoBody {
		body.Push()
	}
	if front.Enter(f, w, r) {
		return // refused, a pre-flight, or the front's own paths
	}
	// A session answers only the token that opened it, known by its index
	// (the same for all without tokens): no token is kept beside a session.
	index, ok := f.door.Match(r)
	if f.door.HasTokens() && !ok {
		writeError(w, http.StatusUnauthorized, codeServerError, "missing or wrong token (send it as Authorization: Bearer TOKEN)")
		return
	}
	if r.URL.Path != Path {
		writeError(w, http.StatusNotFound, codeServerError, "the MCP endpoint is "+Path)
		return
	}
	data, ok := readBody(w, r, &body)
	if !ok {
		return
	}
	f.serve(w, r, data, proxy.MCPCaller{Holder: strconv.Itoa(index)})
}

// readBody reads r's body whole through br (at most maxBody bytes, within
// frontdoor's limits), takes the read deadline away, and hands the body to
// the session's transport as a reader of those bytes, which then waits
// for nothing: a GET's event stream may stay open for hours. It answers a
// body that does not come (408) or is too large (413) itself, and says
// whether to go on.
func readBody(w http.ResponseWriter, r *http.Request, br *frontdoor.BodyReader) ([]byte, bool) {
	if r.ContentLength > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, codeServerError, fmt.Sprintf("the body is over %d bytes", maxBody))
		return nil, false
	}
	body, err := io.ReadAll(br)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeServerError, fmt.Sprintf("the body is over %d bytes", maxBody))
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, codeServerError, "the request body did not come in time")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, codeServerError, "could not read the body: "+err.Error())
		return nil, false
	}
	br.Clear()
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// JSON-RPC error codes of the answers the front writes itself.
const (
	codeServerError     = -32000
	codeSessionNotFound = -32001 // what the SDKs' servers answer for a session they do not know
)

// writeError writes a JSON-RPC error response with no id, as the SDKs'
// servers answer an HTTP request they refuse.
func writeError(w http.ResponseWriter, status, code int, msg string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
