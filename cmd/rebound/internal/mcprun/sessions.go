package mcprun

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// A Handler serves one MCP server over streamable HTTP: each client
// session a StreamableServerTransport relayed by reboundmcp.Serve to an
// upstream connection of its own (a stdio server's process), with every
// guarantee of rebound mcp; clients of the stateless protocol, which
// open no session, share one upstream connection (stateless.go). It is
// what rebound mcp --addr serves behind its front, and what rebound
// proxy serves at /mcp/NAME behind its own. A session answers only the
// holder (of a token) that opened it.
type Handler struct {
	ctx          context.Context // the server's: a session outlives the request that opened it
	cancel       context.CancelFunc
	newTransport func() *reboundmcp.Transport
	max          int
	timeout      time.Duration
	// withTenant, if set, makes a transport whose lines carry a tenant.
	withTenant func(tenant string) *reboundmcp.Transport
	logger     *slog.Logger // nil: none
	name       string       // the server's, for the lines the Handler writes itself
	// caller returns who r comes from: the holder a session is bound
	// to, the tenant, and the tools it may use (nil: all); nil means
	// everyone is the same holder.
	caller func(r *http.Request) proxy.MCPCaller

	mu       sync.Mutex
	sessions map[string]*session
	// stateless are the upstreams of stateless clients, one for each
	// holder (of a token) that has sent one a request.
	stateless map[string]*shared
	retired   []*shared // those before it, closed once their requests are answered
	closed    bool
	inFlight  calls
	relays    sync.WaitGroup
}

func newHandler(ctx context.Context, newTransport func() *reboundmcp.Transport, max int, timeout time.Duration) *Handler {
	ctx, cancel := context.WithCancel(ctx)
	return &Handler{ctx: ctx, cancel: cancel, newTransport: newTransport, max: max, timeout: timeout, sessions: map[string]*session{}}
}

// Server is one MCP server as a Handler serves it.
type Server struct {
	// Command is a stdio server's command and arguments, run with Env
	// (nil: rebound's own environment, without HideEnv); Upstream, when
	// Command is empty, a streamable HTTP server's endpoint, sent Header
	// with every request.
	Command  []string
	Env      []string
	HideEnv  []string
	Upstream string
	Header   http.Header
	// Stderr takes a stdio server's own logs.
	Stderr io.Writer
	// Options are reboundmcp's: the name, tool rules, logger, observer.
	Options reboundmcp.Options
	// MaxSessions bounds the sessions open at once (0: no bound);
	// SessionTimeout ends one that has had no request for that long (0:
	// never).
	MaxSessions    int
	SessionTimeout time.Duration
	// Caller returns who a request comes from: the holder its session is
	// bound to, the tenant its lines name, and the tools it may list and
	// call (nil: all). Nil means one holder, no tenant, every tool.
	Caller func(r *http.Request) proxy.MCPCaller
}

// NewHandler returns the Handler of s; an error, in one line, if its
// command cannot be found. Close it to end its sessions and servers.
func NewHandler(s Server) (*Handler, error) {
	up, err := s.upstream()
	if err != nil {
		return nil, err
	}
	opts := s.Options
	h := newHandler(context.Background(), func() *reboundmcp.Transport { return reboundmcp.New(up, opts) }, s.MaxSessions, s.SessionTimeout)
	h.logger, h.caller, h.name = opts.Logger, s.Caller, opts.Name
	h.withTenant = func(tenant string) *reboundmcp.Transport {
		o := opts
		if o.Logger != nil {
			o.Logger = o.Logger.With("tenant", tenant)
		}
		return reboundmcp.New(up, o)
	}
	return h, nil
}

// ServeHTTP implements http.Handler for a request that has passed a front
// (the proxy's): its body is read here, bounded.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeServerError, fmt.Sprintf("the body is over %d bytes", maxBody))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, codeServerError, "could not read the body: "+err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(data)) // for the session's transport
	var c proxy.MCPCaller
	if h.caller != nil {
		c = h.caller(r)
	}
	h.serve(w, r, data, c)
}

// Close ends every session and its upstream, and refuses new ones.
func (h *Handler) Close() error {
	h.closeAll()
	h.cancel()
	return nil
}

// serve serves a request whose body is data, from caller c.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, data []byte, c proxy.MCPCaller) {
	defer h.begin(r)()
	id := r.Header.Get("Mcp-Session-Id")
	switch {
	case r.Method == http.MethodPost && id == "":
		h.open(w, r, data, c)
	case r.Method != http.MethodPost && r.Method != http.MethodGet && r.Method != http.MethodDelete:
		w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, codeServerError, "method not allowed")
	case id == "" && newProtocol(r.Header.Get(protocolHeader)):
		// As the SDK's stateless server answers: its clients only POST.
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, codeServerError, "Method Not Allowed: a stateless client only POSTs")
	case id == "":
		writeError(w, http.StatusBadRequest, codeServerError, "Bad Request: "+r.Method+" needs an Mcp-Session-Id header")
	default:
		h.serveSession(w, r, id, c, data)
	}
}

// open starts a session for an initialize request (body) that names
// none, for the caller c; a request of the stateless protocol it serves
// without one.
func (f *Handler) open(w http.ResponseWriter, r *http.Request, body []byte, c proxy.MCPCaller) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, codeServerError, "Content-Type must be application/json")
		return
	}
	msg, ok := decodeBody(w, body)
	if !ok {
		return
	}
	req, _ := msg.(*jsonrpc.Request)
	if stateless(r, req) {
		f.serveStateless(w, r, req, c)
		return
	}
	// Only an initialize opens a session, and so starts a server: any
	// other message without a session is an old session's, or noise.
	if req == nil || req.Method != "initialize" || !req.IsCall() {
		writeError(w, http.StatusBadRequest, codeServerError, "Bad Request: no valid session ID provided (only initialize opens a session)")
		return
	}
	s, err := f.start(req.ID, c)
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
	filter      toolFilter // a caller's tools
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
	c.filter.answer(msg)
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

// serveSession hands a request to its session's transport, once a POST
// (its body data) is read by reboundmcp's reader, and judged by the tools
// its caller may use; DELETE ends the session, and its upstream with it,
// before it is answered. A session opened with another token is unknown
// to the request.
func (f *Handler) serveSession(w http.ResponseWriter, r *http.Request, id string, c proxy.MCPCaller, data []byte) {
	start := time.Now()
	f.mu.Lock()
	s := f.sessions[id]
	f.mu.Unlock()
	if s == nil || s.holder != c.Holder {
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
	if r.Method == http.MethodPost {
		// The SDK's transport would read the body by other rules than
		// the relay and the tool filter: it gets only what they read.
		msg, ok := decodeBody(w, data)
		if !ok {
			return
		}
		if refusal := s.conn.filter.admit(w, msg, c.Tools); refusal != nil {
			f.logRefused(c, msg.(*jsonrpc.Request), refusal, start)
			return
		}
		defer s.conn.filter.forget(msg)
	}
	s.serve(w, r)
}

// decodeBody reads a POST's body (data) as one JSON-RPC message, by
// reboundmcp's one reader; what it refuses is answered here: -32700 if it
// is not JSON, -32600 if it is JSON but not one message (a batch, a
// member given twice).
func decodeBody(w http.ResponseWriter, data []byte) (jsonrpc.Message, bool) {
	msg, err := reboundmcp.DecodeMessage(data)
	switch {
	case err == nil:
		return msg, true
	case json.Valid(data):
		writeError(w, http.StatusBadRequest, jsonrpc.CodeInvalidRequest, "Bad Request: the body is not one JSON-RPC message: "+err.Error())
	default:
		writeError(w, http.StatusBadRequest, jsonrpc.CodeParseError, "Bad Request: the body is not one JSON-RPC message")
	}
	return nil, false
}

// start opens a session for caller c: a server transport, and the relay
// that ties it to an upstream connection of its own until either ends.
func (f *Handler) start(initID jsonrpc.ID, c proxy.MCPCaller) (*session, error) {
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
	s := &session{t: t, conn: watched, holder: c.Holder, done: make(chan struct{}), timeout: f.timeout}
	if f.timeout > 0 {
		s.idle = time.AfterFunc(f.timeout, s.end)
	}
	f.sessions[id] = s
	f.relays.Add(1)
	go func() {
		defer f.relays.Done()
		reboundmcp.Serve(f.ctx, watched, f.transport(c.Tenant)) // ends the upstream on its way out
		f.mu.Lock()
		delete(f.sessions, id)
		f.mu.Unlock()
		s.stopIdle()
		close(s.done)
	}()
	return s, nil
}

// transport returns a new upstream transport, its lines carrying
// tenant, if not empty.
func (f *Handler) transport(tenant string) *reboundmcp.Transport {
	if tenant != "" && f.withTenant != nil {
		return f.withTenant(tenant)
	}
	return f.newTransport()
}

// closeAll ends every session and the stateless clients' upstream,
// refuses new ones, and waits until every upstream is closed.
func (f *Handler) closeAll() {
	f.mu.Lock()
	f.closed = true
	var all []*session
	for _, s := range f.sessions {
		all = append(all, s)
	}
	ups := append(slices.Clone(f.retired), slices.Collect(maps.Values(f.stateless))...)
	f.mu.Unlock()
	for _, s := range all {
		s.end()
	}
	for _, u := range ups {
		if u != nil && u.conn != nil {
			u.conn.Close()
		}
	}
	f.relays.Wait()
}

// session is one client's: its transport, its relay's end, and the timer
// that ends it when it has had no request for the session timeout.
type session struct {
	t      *mcp.StreamableServerTransport
	conn   *clientConn
	holder string        // the index of the token that opened it (frontdoor.Door.Match)
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
