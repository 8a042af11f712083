package mcprun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// shared is the upstream connection of a Handler's stateless clients: a
// reboundmcp transport's, initialized once with the legacy protocol, its
// answers routed back to the requests that wait for them by the IDs it
// gave them, unique across all its clients.
type shared struct {
	conn  mcp.Connection
	ready chan struct{} // closed once initialized, or failed
	// Set before ready closes: the upstream's initialize answer as a
	// server/discover's result, or why there is none.
	discover json.RawMessage
	err      error
	next     atomic.Int64 // the last request ID given

	mu      sync.Mutex
	waits   map[jsonrpc.ID]chan *jsonrpc.Response // requests in flight, by the ID the upstream knows
	ended   bool                                  // the connection ended: no request waits any more
	retired bool                                  // replaced: it closes once no request waits
}

// errShuttingDown is why a request finds no upstream once Close began.
var errShuttingDown = errors.New("shutting down")

// sharedUpstream returns the upstream of holder's stateless clients once
// it is initialized, starting it (again, if it failed) when it must, or
// an error if it cannot be had before ctx ends. Each holder (of a token)
// has its own: what a server keeps for its session (tasks, their
// results, subscriptions) is one client's, and no other token's caller
// may list, read or cancel it.
func (f *Handler) sharedUpstream(ctx context.Context, holder string) (*shared, error) {
	for {
		u, err := f.currentUpstream(ctx, holder)
		if err != nil || !u.isRetired() {
			return u, err
		}
		// Replaced while it started (a SIGHUP): the new one serves.
	}
}

// currentUpstream returns the upstream of now of holder's stateless
// clients, once it is initialized.
func (f *Handler) currentUpstream(ctx context.Context, holder string) (*shared, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errShuttingDown
	}
	u := f.stateless[holder]
	if u == nil || u.hasEnded() {
		u = &shared{ready: make(chan struct{}), waits: map[jsonrpc.ID]chan *jsonrpc.Response{}}
		if f.stateless == nil {
			f.stateless = map[string]*shared{}
		}
		f.stateless[holder] = u
		conn, err := f.newTransport().Connect(f.ctx)
		if err != nil {
			u.err, u.ended = err, true
			close(u.ready)
		} else {
			u.conn = conn
			f.relays.Add(1)
			go func() {
				defer f.relays.Done()
				u.run(f.ctx)
			}()
		}
	}
	f.mu.Unlock()
	select {
	case <-u.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if u.err != nil {
		return nil, u.err
	}
	return u, nil
}

// renewStateless has the next stateless request start a new shared
// upstream, with the options of now (a SIGHUP's tool rules); the one
// before is closed once the requests it has in flight are answered.
func (f *Handler) renewStateless() {
	f.mu.Lock()
	for _, u := range f.stateless {
		f.retired = append(f.retired, u)
	}
	f.stateless = nil
	f.retired = slices.DeleteFunc(f.retired, (*shared).hasEnded)
	retired := slices.Clone(f.retired)
	f.mu.Unlock()
	for _, u := range retired {
		u.retire()
	}
}

// retire closes the connection once no request waits for it.
func (u *shared) retire() {
	u.mu.Lock()
	u.retired = true
	u.mu.Unlock()
	u.closeIfDone()
}

// isRetired says whether the connection was replaced.
func (u *shared) isRetired() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.retired
}

// closeIfDone closes a retired connection, once started, that no request
// waits for.
func (u *shared) closeIfDone() {
	select {
	case <-u.ready:
	default:
		return // initialized() asks again
	}
	u.mu.Lock()
	done := u.retired && len(u.waits) == 0 && u.conn != nil
	u.mu.Unlock()
	if done {
		u.conn.Close()
	}
}

// initializeParams are those the shared upstream is initialized with: no
// capabilities, since a stateless client can be asked nothing.
var initializeParams = json.RawMessage(`{"protocolVersion":"` + legacyVersion + `","capabilities":{},"clientInfo":{"name":"rebound","version":"1"}}`)

// run initializes the upstream, then hands each answer it reads to the
// request that waits for it, until the connection ends; then it answers
// every request still waiting, and closes the connection. A server's
// request is refused (a stateless client cannot be asked), its
// notifications dropped (a stateless client has no stream to take them).
func (u *shared) run(ctx context.Context) {
	defer u.conn.Close()
	initID := u.id()
	err := u.conn.Write(ctx, &jsonrpc.Request{ID: initID, Method: "initialize", Params: initializeParams})
	for err == nil {
		var msg jsonrpc.Message
		if msg, err = u.conn.Read(ctx); err != nil {
			break
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			if m.ID == initID {
				err = u.initialized(ctx, m)
				continue
			}
			u.answer(m)
		case *jsonrpc.Request:
			if m.IsCall() {
				u.conn.Write(ctx, &jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "a stateless client cannot be asked " + m.Method}})
			}
		}
	}
	u.end(err)
}

// initialized takes the answer to the upstream's initialize: the
// upstream is ready once it is told it was initialized.
func (u *shared) initialized(ctx context.Context, resp *jsonrpc.Response) error {
	if resp.Error != nil {
		return fmt.Errorf("the MCP server could not be initialized: %w", resp.Error)
	}
	if err := u.conn.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage("{}")}); err != nil {
		return err
	}
	u.discover = discoverResult(resp.Result)
	close(u.ready)
	u.closeIfDone()
	return nil
}

// id returns a request ID no other request of the connection has.
func (u *shared) id() jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(u.next.Add(1))) // MakeID takes no int64
	return id
}

// call relays req to the upstream under an ID of its own and returns the
// answer, under req's ID; or nil once ctx ends first, after the upstream
// was told the request was cancelled (with done, the Handler's context).
func (u *shared) call(ctx, done context.Context, req *jsonrpc.Request) *jsonrpc.Response {
	id := u.id()
	answer := make(chan *jsonrpc.Response, 1)
	u.mu.Lock()
	if !u.ended {
		u.waits[id] = answer
	}
	ended := u.ended
	u.mu.Unlock()
	var err error
	if !ended {
		// The request's own ID, unique on the connection, is its progress
		// token there too.
		token, _ := json.Marshal(id.Raw())
		err = u.conn.Write(ctx, &jsonrpc.Request{ID: id, Method: req.Method, Params: legacyParams(req.Params, token)})
	}
	if ended || err != nil {
		u.forget(id)
		return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: codeServerError, Message: "rebound: the MCP server's connection has ended (shutting down): the request was not sent"}}
	}
	select {
	case resp := <-answer:
		resp.ID = req.ID
		return resp
	case <-ctx.Done():
		if u.take(id) {
			params, _ := json.Marshal(map[string]any{"requestId": id.Raw(), "reason": "the client left"})
			u.conn.Write(done, &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
		}
		u.closeIfDone()
		return nil
	}
}

// take takes the request id from those waiting, and says whether it
// still waited.
func (u *shared) take(id jsonrpc.ID) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.waits[id]
	delete(u.waits, id)
	return ok
}

// forget takes the request id from those waiting.
func (u *shared) forget(id jsonrpc.ID) {
	u.take(id)
	u.closeIfDone()
}

// answer hands resp to the request that waits for it, if one does.
func (u *shared) answer(resp *jsonrpc.Response) {
	u.mu.Lock()
	ch := u.waits[resp.ID]
	delete(u.waits, resp.ID)
	u.mu.Unlock()
	if ch != nil {
		ch <- resp
	}
	u.closeIfDone()
}

// end ends the connection for its requests: one not yet initialized fails
// with err, every request still waiting is told it may have reached the
// server.
func (u *shared) end(err error) {
	if err == nil || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, context.Canceled) {
		err = errShuttingDown
	}
	u.mu.Lock()
	waits := u.waits
	u.waits, u.ended = nil, true
	u.mu.Unlock()
	select {
	case <-u.ready:
	default:
		u.err = err
		close(u.ready)
	}
	for id, ch := range waits {
		ch <- &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: "rebound: the MCP server's connection ended (" + err.Error() + ") while the request ran: it may have taken effect"}}
	}
}

// hasEnded says whether the connection has ended.
func (u *shared) hasEnded() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ended
}

// discoverResult is the answer to a stateless client's server/discover,
// made from the upstream's answer to initialize: every version the SDK
// serves (the legacy ones in sessions), the server's capabilities but
// the list changes and subscriptions a stateless client would be told of
// on a subscriptions/listen stream, and the log messages none is sent,
// its instructions, and its name in _meta.
func discoverResult(initialize json.RawMessage) json.RawMessage {
	var init struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
		ServerInfo   json.RawMessage            `json:"serverInfo"`
		Instructions string                     `json:"instructions"`
	}
	json.Unmarshal(initialize, &init)
	caps := map[string]json.RawMessage{}
	for name, c := range init.Capabilities {
		var members map[string]json.RawMessage
		switch name {
		case "logging":
			continue
		case "tools", "prompts", "resources":
			if json.Unmarshal(c, &members) == nil {
				delete(members, "listChanged")
				delete(members, "subscribe")
				c, _ = json.Marshal(members)
			}
		}
		caps[name] = c
	}
	result := map[string]any{"supportedVersions": mcp.SupportedProtocolVersions(), "capabilities": caps}
	if init.Instructions != "" {
		result["instructions"] = init.Instructions
	}
	if init.ServerInfo != nil {
		result["_meta"] = map[string]json.RawMessage{metaServerInfo: init.ServerInfo}
	}
	data, _ := json.Marshal(result)
	return data
}
