package reboundmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

// A call is one request of the client's, in flight. Its first attempt is
// made on the goroutine that wrote it, when the server is up, and its
// answer given to the client by the goroutine that reads the server: a
// call gets a goroutine of its own only when it must wait or be sent
// again.
type call struct {
	s        *session
	req      *jsonrpc.Request
	key      string // its ID's, in session.calls
	tool     string // for a tools/call
	progress string // its progress token's key, or ""
	start    time.Time
	byClient atomic.Bool   // the client cancelled it: it gets no answer
	alivec   chan struct{} // a progress notification came

	logger *slog.Logger // its line's: Options.Logger, or WithLogger's

	mu     sync.Mutex
	ctx    context.Context // set once the call has a goroutine
	cancel context.CancelFunc
	first  *generation  // the generation its first attempt awaits, without a goroutine
	firstN int64        // that attempt's request ID
	idleAt atomic.Int64 // when that attempt's idle timeout is due, in Unix ns; 0: none

	// Touched by one goroutine at a time: the one making the attempt.
	attempts  int
	firstGen  int
	restarted bool
}

// callError is an error rebound answers a call with.
type callError struct {
	code    int64
	msg     string
	outcome string
	err     error
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() error { return e.err }

// startCall takes a client's request, written with ctx, and answers it
// later.
func (s *session) startCall(ctx context.Context, req *jsonrpc.Request) error {
	tool, token, err := requestFacts(req.Params)
	c := &call{s: s, req: req, logger: s.o.Logger, key: idKey(req.ID.Raw()), tool: tool, start: time.Now(), alivec: make(chan struct{}, 1)}
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		c.logger = l
	}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return errors.New("reboundmcp: connection closed")
	}
	_, dup := s.calls[c.key]
	if dup || err != nil {
		answer := errorResponse(req.ID, &callError{code: jsonrpc.CodeInvalidRequest, msg: fmt.Sprintf("reboundmcp: request ID %v is already in flight", req.ID.Raw())})
		if err != nil {
			// Refused, not guessed: the server might run another tool
			// than the one the rules would judge.
			answer = errorResponse(req.ID, &callError{code: jsonrpc.CodeInvalidRequest, msg: "reboundmcp: invalid request: its params are read differently by different readers: " + err.Error()})
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.toClient(answer)
		}()
		s.mu.Unlock()
		return nil
	}
	s.calls[c.key] = c
	s.open++
	if token != nil {
		c.progress = idKey(token)
		s.progress[c.progress] = c
	}
	s.mu.Unlock()
	if !c.tryFirst() {
		c.goOn(nil, nil)
	}
	return nil
}

// cancelByClient ends the call at the client's word: the server is told,
// the client gets no answer.
func (c *call) cancelByClient() {
	c.byClient.Store(true)
	if g, id, ok := c.takeFirst(); ok {
		c.tellCancelled(g, id, "cancelled by the client")
		c.finish(nil, context.Canceled)
		return
	}
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// alive notes a progress notification.
func (c *call) alive() {
	select {
	case c.alivec <- struct{}{}:
	default:
	}
	c.mu.Lock()
	if c.first != nil && c.idleAt.Load() != 0 {
		c.idleAt.Store(time.Now().Add(c.s.o.idleTimeout()).UnixNano())
	}
	c.mu.Unlock()
}

// resendable says whether the call may be sent again once it may have
// reached a server that then died or lost the session.
func (c *call) resendable() bool {
	if c.req.Method != "tools/call" {
		return resendable[c.req.Method]
	}
	c.s.mu.Lock()
	listed := c.s.state.tools[c.tool]
	c.s.mu.Unlock()
	return c.s.o.kindOf(c.tool, listed).Safe()
}

// awaitListing waits, before a tools/call of a tool not yet seen listed,
// for a listing under way to end, so that the call is judged by the
// tool's annotations rather than as a stranger.
func (c *call) awaitListing(ctx context.Context) error {
	if c.req.Method != "tools/call" {
		return nil
	}
	c.s.mu.Lock()
	_, known := c.s.state.tools[c.tool]
	end := c.s.state.listEnd
	listing := c.s.state.listing
	c.s.mu.Unlock()
	if known || !listing {
		return nil
	}
	select {
	case <-end:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// target names the call in events.
func (c *call) target() string {
	if c.req.Method == "tools/call" {
		return "mcp:" + c.s.o.Name + "/" + c.tool
	}
	return "mcp:" + c.s.o.Name + "/" + c.req.Method
}

// policy is the Policy a call's attempts run under.
func (s *session) policy() rebound.Policy {
	p := s.o.Policy
	if s.o.Observer != nil {
		p.Observer = s.o.Observer
	}
	// A hedge would send the request twice at once, and a timeout per
	// attempt would send again a call that may be running; the idle
	// timeout is the bound on an attempt.
	p.Hedge, p.AttemptTimeout = nil, 0
	classify := p.Classifier
	if classify == nil {
		classify = rebound.Classify
	}
	p.Classifier = func(err error) rebound.Verdict {
		if errors.As(err, new(resendAtOnce)) {
			// The wait before this resend is the restart's (waitReady):
			// the Policy's backoff on top of it would only delay a call
			// that a new server is ready for.
			return rebound.Verdict{Kind: rebound.KindTransient, HasServerWait: true}
		}
		return classify(err)
	}
	return p
}

// resendAtOnce marks a failed attempt whose resend waits only for the
// next server: one the server died under or refused for a lost session.
type resendAtOnce struct{ error }

func (e resendAtOnce) Unwrap() error { return e.error }

// goOn gives the call a goroutine of its own, which makes its attempts
// under the Policy and answers the client. resp and err, when either is
// set, are the outcome of a first attempt already made; rebound.Do takes
// it as its first attempt's.
func (c *call) goOn(resp *jsonrpc.Response, err error) {
	s := c.s
	c.mu.Lock()
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	if c.byClient.Load() {
		c.cancel()
	}
	c.mu.Unlock()
	made := resp != nil || err != nil
	attempt := func(ctx context.Context) (*jsonrpc.Response, error) {
		if made {
			made = false
			return resp, err
		}
		return c.attempt(ctx)
	}
	ok := s.spawn(func() {
		defer c.cancel()
		resp, err := rebound.Do(rebound.WithTarget(c.ctx, c.target()), s.policy(), attempt)
		c.finish(resp, err)
	})
	if !ok {
		c.cancel()
		c.finish(nil, s.ctx.Err())
	}
}

// finish ends the call with the outcome of its attempts and answers the
// client, unless the client cancelled it or the session closed.
func (c *call) finish(resp *jsonrpc.Response, err error) {
	s := c.s
	s.mu.Lock()
	delete(s.calls, c.key)
	if c.progress != "" && s.progress[c.progress] == c {
		delete(s.progress, c.progress)
	}
	s.mu.Unlock()
	outcome := "ok"
	switch {
	case c.byClient.Load():
		outcome = "cancelled"
	case s.ctx.Err() != nil:
		outcome = "closed"
	case err != nil:
		ce := asCallError(err, c)
		outcome = ce.outcome
		resp = errorResponse(c.req.ID, ce)
	default:
		outcome = c.remember(resp)
		answer := *resp // the server's is still read by its connection
		answer.ID = c.req.ID
		resp = &answer
	}
	c.log(outcome, time.Since(c.start))
	if outcome != "cancelled" && outcome != "closed" {
		s.toClient(resp)
	}
	s.callDone()
}

// attempt sends the call to the server that is up and waits for its
// answer. An error marked Retryable sends it again; any other ends it.
func (c *call) attempt(ctx context.Context) (*jsonrpc.Response, error) {
	g, err := c.s.waitReady(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, rebound.Permanent(&callError{code: jsonrpc.CodeInternalError, msg: err.Error(), outcome: "server_down", err: err})
	}
	c.attempts++
	if c.firstGen == 0 {
		c.firstGen = g.n
	} else if g.n != c.firstGen {
		c.restarted = true
	}
	if err := c.awaitListing(ctx); err != nil {
		return nil, err
	}
	wctx := ctx
	if !c.resendable() {
		wctx = rebound.WithSideEffects(ctx) // for the engine under an HTTP upstream
	}
	id, answer, err := g.send(wctx, c.req.Method, c.req.Params)
	if err != nil {
		return c.writeFailed(ctx, g, err)
	}
	defer g.forget(id)
	idle := c.s.o.idleTimeout()
	if lasting[c.req.Method] {
		idle = 0
	}
	var timeout <-chan time.Time
	timer := time.NewTimer(max(idle, 1))
	defer timer.Stop()
	if idle > 0 {
		timeout = timer.C
	}
	for {
		select {
		case resp := <-answer:
			return c.judge(g, resp)
		case <-g.dead:
			return nil, c.cut(g, errServerExited)
		case <-c.alivec:
			if idle > 0 {
				timer.Reset(idle)
			}
		case <-timeout:
			return nil, c.idleTimedOut(g, id, idle)
		case <-ctx.Done():
			c.tellCancelled(g, id, "cancelled by the client")
			return nil, ctx.Err()
		}
	}
}

// judge reads the server's answer to an attempt: the SDK's word that the
// answer's stream ended is a cut; anything else, a JSON-RPC error of any
// code included, is the answer (a lost session is the transport's word,
// never an answer's: see sessionLost).
func (c *call) judge(g *generation, resp *jsonrpc.Response) (*jsonrpc.Response, error) {
	var we *jsonrpc.Error
	if resp.Error != nil && !errors.As(resp.Error, &we) {
		return nil, c.cut(g, resp.Error)
	}
	g.served.Store(true)
	return resp, nil
}

// tellCancelled sends the server notifications/cancelled for request id.
func (c *call) tellCancelled(g *generation, id int64, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.s.ctx), time.Second)
	defer cancel()
	g.notify(ctx, "notifications/cancelled", map[string]any{"requestId": id, "reason": reason})
}

// writeFailed judges a request the server's connection would not take:
// an HTTP server's JSON-RPC error is its answer, a lost session or a
// refusal is sent again, anything else is a cut.
func (c *call) writeFailed(ctx context.Context, g *generation, err error) (*jsonrpc.Response, error) {
	c.s.logDebug("mcp.write_failed", "method", c.req.Method, "error", err.Error())
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errNotSent):
		return nil, rebound.Retryable(resendAtOnce{err})
	case g.hadSession() && sessionLost(err):
		g.end(true)
		return nil, rebound.Retryable(resendAtOnce{errSessionLost}) // refused: it never ran
	case c.s.t.up.sessions && serverError(err) != nil:
		return &jsonrpc.Response{Error: serverError(err)}, nil // the server's answer, sent as an HTTP error
	case !c.s.t.up.sessions:
		// A stdio server whose pipe broke read no whole line: resent
		// once the next one is up.
		g.end(false)
		return nil, rebound.Retryable(resendAtOnce{err})
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(err.Error(), "Service Unavailable"):
		// An HTTP server that refused the connection or said 503 took
		// nothing on.
		g.end(false)
		return nil, rebound.Retryable(err)
	case strings.Contains(err.Error(), "Too Many Requests"):
		return nil, rebound.Retryable(err) // the engine beneath waited as told; the session is fine
	}
	g.end(false)
	return nil, c.cut(g, err)
}

// cut judges a call the server died or lost the session under.
func (c *call) cut(g *generation, err error) error {
	if c.resendable() {
		return rebound.Retryable(resendAtOnce{fmt.Errorf("reboundmcp: %s was cut short: %w", c.what(), err)})
	}
	return rebound.Permanent(&callError{
		code:    jsonrpc.CodeInternalError,
		msg:     mayHaveRunMessage(c.s.o.Name, c.req.Method, c.tool, g.sessionWasLost()),
		outcome: "may_have_run",
		err:     err,
	})
}

// what names the call in messages.
func (c *call) what() string {
	if c.req.Method == "tools/call" {
		return fmt.Sprintf("tool %q", c.tool)
	}
	return c.req.Method
}

// remember keeps what a restart must replay from a successful answer, and
// returns the outcome to log.
func (c *call) remember(resp *jsonrpc.Response) string {
	if resp.Error != nil {
		return "error"
	}
	s := c.s
	var relistOn *generation
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		if relistOn != nil {
			s.relist(relistOn, false)
		}
	}()
	switch c.req.Method {
	case "initialize":
		s.state.initParams = c.req.Params
	case "server/discover":
		var p struct {
			Meta json.RawMessage `json:"_meta"`
		}
		json.Unmarshal(c.req.Params, &p)
		s.state.discoverMeta = p.Meta
		relistOn = s.sup.current()
	case "logging/setLevel":
		s.state.logLevel = c.req.Params
	case "resources/subscribe", "resources/unsubscribe":
		var p struct {
			URI string `json:"uri"`
		}
		json.Unmarshal(c.req.Params, &p)
		if s.state.subs == nil {
			s.state.subs = map[string]bool{}
		}
		if c.req.Method == "resources/subscribe" {
			s.state.subs[p.URI] = true
		} else {
			delete(s.state.subs, p.URI)
		}
	case "tools/list":
		// The client's own listing says the same as rebound's, its list
		// found by its exact key, as the client finds it.
		var page map[string]json.RawMessage
		var tools []json.RawMessage
		json.Unmarshal(resp.Result, &page)
		json.Unmarshal(page["tools"], &tools)
		if s.state.tools == nil {
			s.state.tools = map[string]*mcp.ToolAnnotations{}
		}
		maps.Copy(s.state.tools, annotations(tools))
	case "tools/call":
		var r struct {
			IsError bool `json:"isError"`
		}
		json.Unmarshal(resp.Result, &r)
		if r.IsError {
			return "tool_error"
		}
	}
	return "ok"
}

// asCallError turns the error a call ended with into what the client is
// told.
func asCallError(err error, c *call) *callError {
	var ce *callError
	if errors.As(err, &ce) {
		return ce
	}
	msg := fmt.Sprintf("reboundmcp: %s to MCP server %s failed after %d attempts: %v", c.what(), c.s.o.Name, c.attempts, err)
	return &callError{code: jsonrpc.CodeInternalError, msg: msg, outcome: "gave_up", err: err}
}

func errorResponse(id jsonrpc.ID, ce *callError) *jsonrpc.Response {
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: ce.code, Message: ce.msg}}
}

func notification(method string) *jsonrpc.Request {
	return &jsonrpc.Request{Method: method, Params: json.RawMessage("{}")}
}
