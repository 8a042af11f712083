package chaosmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A generation is an MCP server and the HTTP handler of its sessions. To
// lose every session, the Server starts a new generation and closes the
// old one's sessions.
type generation struct {
	server  *mcp.Server
	handler *mcp.StreamableHTTPHandler
	// lost ends with the generation: the calls in flight end with it, as
	// they would with a restarted process, since closing a session waits
	// for them.
	lost context.Context
	lose context.CancelFunc
}

func (s *Server) newGeneration() *generation {
	srv := mcp.NewServer(&mcp.Implementation{Name: "rebound-chaos", Version: "1"}, nil)
	lost, lose := context.WithCancel(context.Background())
	s.addTools(srv, lost)
	return &generation{
		server:  srv,
		handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil),
		lost:    lost,
		lose:    lose,
	}
}

func (s *Server) current() *generation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// LoseSessions forgets every HTTP session, as a server that restarted
// would: their calls in flight end unanswered, and their next requests
// are answered 404 Not Found.
func (s *Server) LoseSessions() {
	s.mu.Lock()
	old := s.gen
	s.gen = s.newGeneration()
	s.mu.Unlock()
	old.lose()
	for ss := range old.server.Sessions() {
		ss.Close()
	}
}

// maxPeek bounds the body ServeHTTP reads to find a request's method.
const maxPeek = 1 << 20

// ServeHTTP serves MCP over streamable HTTP at /mcp and, at GET
// /chaos/counts, the runs by tool as a JSON object.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/chaos/counts" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Counts())
		return
	case r.URL.Path != "/mcp":
		http.NotFound(w, r)
		return
	}
	if s.cfg.LoseSessionsEvery > 0 && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") != "" {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxPeek))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		if s.loseNow(body) {
			s.LoseSessions()
		}
	}
	g := s.current()
	g.handler.ServeHTTP(&lostWriter{ResponseWriter: w, lost: g.lost}, r)
}

// lostWriter is a response of a generation's: once the generation is
// lost, what is written is dropped, so that a call ended by the loss
// ends its POST unanswered, as a server that restarted would leave it,
// rather than with the error its handler returned on the way out.
type lostWriter struct {
	http.ResponseWriter
	lost context.Context
}

func (w *lostWriter) Write(b []byte) (int, error) {
	if w.lost.Err() != nil {
		return 0, context.Cause(w.lost)
	}
	return w.ResponseWriter.Write(b)
}

func (w *lostWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.lost.Err() == nil {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer beneath.
func (w *lostWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// loseNow counts a tools/call and says whether it is the one whose
// session is to be lost.
func (s *Server) loseNow(body []byte) bool {
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.calls%s.cfg.LoseSessionsEvery == 0
}
