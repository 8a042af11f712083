package reboundmcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is the resilient mcp.Connection a Transport's Connect returns:
// the client writes requests into it and reads answers and the server's
// messages from it, while the server beneath is restarted and re-initialized
// as often as it takes.
type session struct {
	t      *Transport
	o      *Options
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	out    chan jsonrpc.Message        // to the client, unless sink is set
	sink   func(jsonrpc.Message) error // writes to the client: Serve's
	nextID atomic.Int64                // the IDs of requests to the server
	wg     sync.WaitGroup              // every goroutine the session starts
	closed sync.Once

	sup supervisor

	mu       sync.Mutex
	calls    map[string]*call // client requests in flight, by their ID
	progress map[string]*call // by progress token
	open     int              // calls taken and not yet answered (or dropped)
	answered chan struct{}    // closed when open falls to 0; nil when none waits
	state    replayState

	asked     map[int64]asked // the server's requests to the client, by the ID the client knows (ask.go)
	lastAsked int64           // the last such ID given

	idleWatch    *time.Timer // sweepIdle's, for first attempts without a goroutine
	idleWatching bool        // idleWatch is set
}

// settled waits until every call the session took has been answered (or
// dropped), or ctx ends, and says whether they all were.
func (s *session) settled(ctx context.Context) bool {
	s.mu.Lock()
	if s.open == 0 {
		s.mu.Unlock()
		return true
	}
	if s.answered == nil {
		s.answered = make(chan struct{})
	}
	ch := s.answered
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// callDone counts a call answered or dropped, after its answer went out.
func (s *session) callDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.open == 0 && s.answered != nil {
		close(s.answered)
		s.answered = nil
	}
}

// newSession opens a session; sink, if not nil, takes the messages for
// the client, which Read then never returns.
func newSession(ctx context.Context, t *Transport, sink func(jsonrpc.Message) error) *session {
	s := &session{t: t, o: &t.o, sink: sink, out: make(chan jsonrpc.Message, 16), calls: map[string]*call{}, progress: map[string]*call{}}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.sup.init()
	s.spawn(s.supervise)
	return s
}

// Read returns the next message for the client.
func (s *session) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case msg := <-s.out:
		return msg, nil
	case <-s.ctx.Done():
		return nil, mcp.ErrConnectionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write takes a message from the client: a request is answered later, by
// Read; a notification goes to the server that is up, if one is, and an
// answer to the server's request to the start that asked, if it still
// runs (ask.go).
func (s *session) Write(ctx context.Context, msg jsonrpc.Message) error {
	if s.ctx.Err() != nil {
		return mcp.ErrConnectionClosed
	}
	switch msg := msg.(type) {
	case *jsonrpc.Request:
		if msg.IsCall() {
			return s.startCall(ctx, msg)
		}
		s.fromClientNotification(ctx, msg)
	case *jsonrpc.Response:
		s.answerServer(ctx, msg)
	}
	return nil
}

type loggerKey struct{}

// WithLogger returns a copy of ctx with l: a request written with it to
// a Transport's connection has its line logged to l rather than
// Options.Logger (a nil l: none), as a connection shared by several
// clients tells them apart.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Close ends every call in flight and the server: a stdio server's process
// group is killed, an HTTP session DELETEd. It waits for all the session's
// goroutines.
func (s *session) Close() error {
	s.closed.Do(func() {
		s.mu.Lock()
		s.cancel()
		if s.idleWatch != nil {
			s.idleWatch.Stop()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return nil
}

// SessionID is empty: the client's session with rebound outlives every
// session rebound has with the server.
func (s *session) SessionID() string { return "" }

// toClient hands a message to the client, unless the session has closed.
func (s *session) toClient(msg jsonrpc.Message) bool {
	if s.sink != nil {
		return s.ctx.Err() == nil && s.sink(msg) == nil
	}
	select {
	case s.out <- msg:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// fromClientNotification passes a client's notification on, keeping what
// a restart replays and turning a cancellation's request ID into the one
// the server knows.
func (s *session) fromClientNotification(ctx context.Context, msg *jsonrpc.Request) {
	switch msg.Method {
	case "notifications/initialized":
		s.mu.Lock()
		s.state.initialized = true
		s.mu.Unlock()
	case "notifications/cancelled":
		var p struct {
			RequestID any `json:"requestId"`
		}
		json.Unmarshal(msg.Params, &p)
		s.mu.Lock()
		c := s.calls[idKey(p.RequestID)]
		s.mu.Unlock()
		if c != nil {
			c.cancelByClient() // the call tells the server, under the ID it knows
		}
		return
	}
	g := s.sup.current()
	if g == nil {
		return // a restart replays the state that matters; the rest is moot on a new server
	}
	if err := g.conn.Write(ctx, msg); err != nil {
		s.logDebug("mcp.notification_lost", "method", msg.Method, "error", err.Error())
	}
	if msg.Method == "notifications/initialized" {
		s.relist(g, false)
	}
}

// fromServer passes a server's request or notification to the client,
// noting progress and list changes on the way, and naming the server's
// requests as the client knows them (ask.go). It returns false once the
// session has closed.
func (s *session) fromServer(ctx context.Context, g *generation, msg *jsonrpc.Request) bool {
	if msg.IsCall() {
		if msg = s.askClient(g, msg); msg == nil {
			return true
		}
		return s.toClient(msg)
	}
	switch msg.Method {
	case "notifications/cancelled":
		if msg = s.serverCancelled(g, msg); msg == nil {
			return true
		}
	case "notifications/progress":
		var p struct {
			ProgressToken any `json:"progressToken"`
		}
		json.Unmarshal(msg.Params, &p) // a token nobody asked for keeps nothing alive
		s.mu.Lock()
		c := s.progress[idKey(p.ProgressToken)]
		s.mu.Unlock()
		if c != nil {
			c.alive()
		}
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		s.relist(g, false)
	}
	return s.toClient(msg)
}

// spawn runs f in a goroutine the session waits for at Close, unless the
// session has closed.
func (s *session) spawn(f func()) bool {
	if !s.enter() {
		return false
	}
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// enter counts the goroutine about to run among the ones Close waits for,
// unless the session has closed; one that entered calls s.wg.Done.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *session) logDebug(msg string, args ...any) {
	if s.o.Logger != nil {
		s.o.Logger.Debug(msg, append([]any{"server", s.o.Name}, args...)...)
	}
}

func (s *session) logInfo(msg string, args ...any) {
	if s.o.Logger != nil {
		s.o.Logger.Info(msg, append([]any{"server", s.o.Name}, args...)...)
	}
}
