package reboundmcp

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A generation is one start of a stdio server, or one HTTP session: the
// connection to it and the requests waiting for its answers. It ends (dead
// closes) when the connection fails or the session is found lost, and is
// never used again.
type generation struct {
	s       *session
	conn    mcp.Connection
	n       int // 1 for the first start
	started time.Time

	mu      sync.Mutex
	waiting map[int64]waiter // by the ID rebound gave the request
	dead    chan struct{}
	lost    bool // the server lost the session (rather than died)

	served atomic.Bool // it answered a request of the client's

	asked map[jsonrpc.ID]int64 // its requests to the client, open, by its ID: the client's ID; under s.mu
}

func newGeneration(s *session, conn mcp.Connection, n int) *generation {
	return &generation{s: s, conn: conn, n: n, started: time.Now(), waiting: map[int64]waiter{}, dead: make(chan struct{})}
}

// A waiter awaits the answer to one request: on a channel, read by a
// goroutine that selects on it and on dead too; or, for a call's first
// attempt, made without a goroutine of its own, as a call the reader hands
// the answer to, and end the death.
type waiter struct {
	answer chan *jsonrpc.Response
	call   *call
}

// end marks the generation dead, lost says whether for its session, and
// closes its connection (a stdio child's group is killed, an HTTP session
// DELETEd). The calls whose first attempt awaited it are told, and the
// client that its requests to it are void. It is safe to call more than
// once.
func (g *generation) end(lost bool) {
	g.mu.Lock()
	select {
	case <-g.dead:
		g.mu.Unlock()
		return
	default:
	}
	g.lost = lost
	close(g.dead)
	var cut []*call
	for id, w := range g.waiting {
		if w.call != nil {
			cut = append(cut, w.call)
			delete(g.waiting, id)
		}
	}
	g.mu.Unlock()
	g.conn.Close()
	for _, c := range cut {
		c.firstCut(g)
	}
	g.s.abandonAsked(g)
}

// hadSession says whether the generation is an HTTP session the server
// gave an ID: only then can the server have lost it.
func (g *generation) hadSession() bool {
	return g.s.t.up.sessions && g.conn.SessionID() != ""
}

// isDead says whether the generation has ended.
func (g *generation) isDead() bool {
	select {
	case <-g.dead:
		return true
	default:
		return false
	}
}

// sessionWasLost says whether the generation ended for its session.
func (g *generation) sessionWasLost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

// send writes a request with a fresh ID, under which its answer is
// awaited on the returned channel; forget drops the wait.
func (g *generation) send(ctx context.Context, method string, params json.RawMessage) (id int64, answer chan *jsonrpc.Response, err error) {
	id = g.s.nextID.Add(1)
	answer = make(chan *jsonrpc.Response, 1)
	if err := g.write(ctx, id, waiter{answer: answer}, method, params); err != nil {
		g.forget(id)
		return 0, nil, err
	}
	return id, answer, nil
}

// write awaits w for request id, then writes the request; the caller
// forgets a request that could not be written. A dead generation takes
// no request.
func (g *generation) write(ctx context.Context, id int64, w waiter, method string, params json.RawMessage) error {
	g.mu.Lock()
	if g.isDead() { // its end has told the waiters it had: none would tell this one
		g.mu.Unlock()
		return errNotSent
	}
	g.waiting[id] = w
	g.mu.Unlock()
	rid, _ := jsonrpc.MakeID(float64(id))
	return g.conn.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: params})
}

// forget drops the wait for request id, and says whether it was still
// awaited: whoever drops a call's wait is the one to end its attempt.
func (g *generation) forget(id int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.waiting[id]
	delete(g.waiting, id)
	return ok
}

// call sends a request of rebound's own and waits for its answer, for as
// long as ctx allows and the generation lives.
func (g *generation) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	id, answer, err := g.send(ctx, method, raw)
	if err != nil {
		return nil, err
	}
	defer g.forget(id)
	select {
	case resp := <-answer:
		return resp.Result, resp.Error
	case <-g.dead:
		return nil, errServerExited
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// notify sends a notification to the server.
func (g *generation) notify(ctx context.Context, method string, params any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return g.conn.Write(ctx, &jsonrpc.Request{Method: method, Params: raw})
}

// read takes the server's messages until its connection fails: answers go
// to whoever waits for them (an answer nobody waits for, a duplicate or a
// late one, is dropped), everything else to the session.
func (g *generation) read(ctx context.Context) {
	for {
		msg, err := g.conn.Read(ctx)
		if err != nil {
			g.s.logDebug("mcp.read_failed", "start", g.n, "error", err.Error())
			g.end(g.hadSession() && sessionLost(err))
			return
		}
		switch msg := msg.(type) {
		case *jsonrpc.Response:
			id, ok := msg.ID.Raw().(int64)
			g.mu.Lock()
			w, awaited := g.waiting[id]
			delete(g.waiting, id)
			g.mu.Unlock()
			switch {
			case !ok || !awaited:
			case w.call != nil:
				w.call.firstAnswered(g, msg) // on this goroutine: no hand-off
			default:
				w.answer <- msg
			}
		case *jsonrpc.Request:
			if !g.s.fromServer(ctx, g, msg) {
				return
			}
		}
	}
}
