package mcprun

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/cmd/rebound/internal/metrics"
	"github.com/rebound-go/rebound/internal/front"
	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
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
// /metrics, SIGHUP) until ctx is done, then ends every session (and so
// its upstream) and lets requests still in flight finish for up to
// c.Drain. closed is called once every upstream is closed, before the
// drain. At SIGHUP, hangup re-reads what it can.
func serveHTTP(ctx context.Context, c Config, newTransport func() *reboundmcp.Transport, m *metrics.Metrics, hangup func(), logger *slog.Logger, stdout, stderr io.Writer, closed func()) int {
	door, err := frontdoor.New(c.Door)
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 2
	}
	f := newFront(ctx, door, newTransport, c.MaxSessions, c.SessionTimeout)
	f.logger = logger
	f.metrics = m.Handler
	f.admin = front.Admin{Token: c.AdminToken, Server: "rebound mcp", Pages: "the admin pages (/metrics)"}
	errorLog := log.New(io.Discard, "", 0)
	if logger != nil {
		errorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	err = front.Run(ctx, front.Config{
		Addr:     c.Addr,
		Handler:  f,
		ErrorLog: errorLog,
		Path:     Path,
		Drain:    c.Drain,
		Stdout:   stdout,
		Hangup:   hangup,
		Stopping: func() {
			f.draining.Store(true)
			f.closeAll()
			closed() // a second signal may now cut the drain short
		},
	})
	f.closeAll()
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 1
	}
	return 0
}

// endpoint is the HTTP handler: the door, then the client sessions, each a
// StreamableServerTransport relayed by reboundmcp.Serve to an upstream
// connection of its own.
type endpoint struct {
	ctx          context.Context // the server's: a session outlives the request that opened it
	door         *frontdoor.Door
	newTransport func() *reboundmcp.Transport
	max          int
	timeout      time.Duration
	logger       *slog.Logger // nil: none
	metrics      http.Handler // nil: none
	admin        front.Admin
	draining     atomic.Bool

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
	relays   sync.WaitGroup
}

func newFront(ctx context.Context, door *frontdoor.Door, newTransport func() *reboundmcp.Transport, max int, timeout time.Duration) *endpoint {
	return &endpoint{ctx: ctx, door: door, newTransport: newTransport, max: max, timeout: timeout, sessions: map[string]*session{}}
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
	holder, ok := f.door.Match(r)
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
	id := r.Header.Get("Mcp-Session-Id")
	switch {
	case r.Method == http.MethodPost && id == "":
		f.open(w, r, data, holder)
	case r.Method != http.MethodPost && r.Method != http.MethodGet && r.Method != http.MethodDelete:
		w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, codeServerError, "method not allowed")
	case id == "":
		writeError(w, http.StatusBadRequest, codeServerError, "Bad Request: "+r.Method+" needs an Mcp-Session-Id header")
	default:
		f.serveSession(w, r, id, holder)
	}
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

// open starts a session for an initialize request (body) that names
// none, for the holder of the token the request carries.
func (f *endpoint) open(w http.ResponseWriter, r *http.Request, body []byte, holder int) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, codeServerError, "Content-Type must be application/json")
		return
	}
	var initID jsonrpc.ID
	// Only an initialize opens a session, and so starts a server: any
	// other message without a session is an old session's, or noise.
	if msg, err := reboundmcp.DecodeMessage(body); err != nil {
		writeError(w, http.StatusBadRequest, jsonrpc.CodeParseError, "Bad Request: the body is not one JSON-RPC message")
		return
	} else if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "initialize" || !req.IsCall() {
		writeError(w, http.StatusBadRequest, codeServerError, "Bad Request: no valid session ID provided (only initialize opens a session)")
		return
	} else {
		initID = req.ID
	}
	s, err := f.start(initID, holder)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeServerError, err.Error())
		return
	}
	s.serve(w, r)
	// A client whose initialize failed (the server is down), or who left
	// before its answer, has no session to use or to DELETE: kept, it
	// would hold a place and an upstream until the session timeout.
	if !s.conn.initialized.Load() {
		s.end()
		<-s.done
	}
}

// clientConn is a session's client connection as its relay writes to it:
// it notes whether the initialize that opened the session was answered
// without an error, and keeps a message the client's transport has
// nowhere to put from ending the session.
type clientConn struct {
	mcp.Connection
	id          jsonrpc.ID
	initialized atomic.Bool
	closed      atomic.Bool
	logger      *slog.Logger
}

// Write passes a message to the client. One that the transport refuses
// while the session is open is dropped, and the relay goes on: a
// server's notification (or request) while the client has no GET stream
// open, an answer whose POST the client has left. The relay would take
// the refusal for the client's end, and end the session: a client that
// opens no GET stream would lose its session to the first notification
// of the server's.
func (c *clientConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && resp.Error == nil && resp.ID == c.id {
		c.initialized.Store(true) // before the answer can reach the client
	}
	err := c.Connection.Write(ctx, msg)
	if err == nil || c.closed.Load() {
		return err
	}
	if c.logger != nil {
		what := "answer"
		if req, ok := msg.(*jsonrpc.Request); ok {
			what = req.Method
		}
		c.logger.Debug("mcp.undelivered", "message", what, "error", err.Error())
	}
	return nil
}

// Close ends the client's side: from then on a failed write is the end.
func (c *clientConn) Close() error {
	c.closed.Store(true)
	return c.Connection.Close()
}

// serveSession hands a request to its session's transport; DELETE ends
// the session, and its upstream with it, before it is answered. A
// session opened with another token is unknown to the request.
func (f *endpoint) serveSession(w http.ResponseWriter, r *http.Request, id string, holder int) {
	f.mu.Lock()
	s := f.sessions[id]
	f.mu.Unlock()
	if s == nil || s.holder != holder {
		writeError(w, http.StatusNotFound, codeSessionNotFound, "Session not found")
		return
	}
	if r.Method == http.MethodDelete {
		s.end()
		select {
		case <-s.done:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.serve(w, r)
}

// start opens a session for holder: a server transport, and the relay
// that ties it to an upstream connection of its own until either ends.
func (f *endpoint) start(initID jsonrpc.ID, holder int) (*session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return nil, fmt.Errorf("shutting down")
	case f.max > 0 && len(f.sessions) >= f.max:
		return nil, fmt.Errorf("all %d sessions (--max-sessions) are open; end one with DELETE or try later", f.max)
	}
	id := crand.Text()
	t := &mcp.StreamableServerTransport{SessionID: id}
	conn, err := t.Connect(f.ctx)
	if err != nil {
		return nil, err
	}
	watched := &clientConn{Connection: conn, id: initID, logger: f.logger}
	s := &session{t: t, conn: watched, holder: holder, done: make(chan struct{}), timeout: f.timeout}
	if f.timeout > 0 {
		s.idle = time.AfterFunc(f.timeout, s.end)
	}
	f.sessions[id] = s
	f.relays.Add(1)
	go func() {
		defer f.relays.Done()
		reboundmcp.Serve(f.ctx, watched, f.newTransport()) // ends the upstream on its way out
		f.mu.Lock()
		delete(f.sessions, id)
		f.mu.Unlock()
		s.stopIdle()
		close(s.done)
	}()
	return s, nil
}

// closeAll ends every session, refuses new ones, and waits until every
// upstream is closed.
func (f *endpoint) closeAll() {
	f.mu.Lock()
	f.closed = true
	var all []*session
	for _, s := range f.sessions {
		all = append(all, s)
	}
	f.mu.Unlock()
	for _, s := range all {
		s.end()
	}
	f.relays.Wait()
}

// session is one client's: its transport, its relay's end, and the timer
// that ends it when it has had no request for the session timeout.
type session struct {
	t      *mcp.StreamableServerTransport
	conn   *clientConn
	holder int           // the index of the token that opened it (frontdoor.Door.Match)
	done   chan struct{} // closed when the relay has returned

	timeout  time.Duration
	mu       sync.Mutex
	inFlight int
	idle     *time.Timer // nil: no timeout, or stopped for good
}

// serve serves one request of the session, its idle timer paused while
// the request is open (a GET's event stream may stay open for hours).
func (s *session) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.idle != nil && s.inFlight == 0 {
		s.idle.Stop()
	}
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		if s.idle != nil && s.inFlight == 0 {
			s.idle.Reset(s.timeout)
		}
		s.mu.Unlock()
	}()
	s.t.ServeHTTP(w, r)
}

// end closes the client's side; the relay then closes the upstream.
func (s *session) end() { s.conn.Close() }

func (s *session) stopIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}
