package proxy

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
)

// The states of an MCP server on the status page (mcpStatus.state).
const (
	mcpUp         = "up"
	mcpRestarting = "restarting"
	mcpStopped    = "stopped"
)

// mcpHealthyAfter is how long after a restart is due that a server no
// event has said more of counts as up again: reboundmcp's default
// HealthyAfter, the time a start must run to be judged healthy.
const mcpHealthyAfter = 10 * time.Second

// mcpLastFailures is how many of an MCP server's latest failed calls its
// row lists.
const mcpLastFailures = 10

// mcpStatus is an MCP server's figures for the status page, gathered
// from what its handler reports to the Observer the proxy gave it
// (observer): each client request's observe.Operation, each restart and
// each change of the respawn breaker. A reload that keeps the server
// keeps its mcpStatus, as it keeps its handler. Every session of the
// server reports to the same one, under the same target: the figures are
// the server's, all sessions together. It is safe for concurrent use.
type mcpStatus struct {
	// row holds the calls over the window and the chart, as an
	// upstream's key's row does (see operation); its board is nil. Its
	// latency is a fixed histogram, not a reservoir: bounded at any rate,
	// and its window's buckets add up and drop out whole.
	row      statusRow
	restarts atomic.Int64 // since the proxy started

	mu       sync.Mutex // guards the fields below
	health   mcpHealth
	failures [mcpLastFailures]mcpFailure
	next     int // where the next failure goes in failures
	count    int // failures held, up to mcpLastFailures
}

// mcpHealth is what the latest of a server's restarts and respawn
// breaker's changes said, which its state is read from.
type mcpHealth struct {
	at   time.Time // of the latest event; zero: none, or the breaker closed
	open bool      // the breaker opened: no start until due
	// due is when the start the event announced comes: a restart's after
	// its wait, an open breaker's probe after its cool-down.
	due time.Time
	// answered says a call was answered since: the server is up.
	answered bool
}

// mcpFailure is a call of an MCP server that did not end well, as its
// row lists it: never its arguments or its result.
type mcpFailure struct {
	at           time.Time
	method, tool string // the Operation's labels: bounded, whatever the client sends
	outcome      string
	attempts     int
}

// state returns the server's state at now: "stopped" while its respawn
// breaker is open, before its cool-down ends; "restarting" from a
// restart, or the end of that cool-down, until a call is answered or
// mcpHealthyAfter has passed since the start was due with no other
// event; "up" otherwise.
func (h mcpHealth) state(now time.Time) string {
	switch {
	case h.at.IsZero():
		return mcpUp
	case h.open && now.Before(h.due):
		return mcpStopped
	case h.answered || !now.Before(h.due.Add(mcpHealthyAfter)):
		return mcpUp
	}
	return mcpRestarting
}

// event notes e, if it is of the server's health.
func (s *mcpStatus) event(e rebound.Event) {
	if e.Type != rebound.EventRestart && e.Type != rebound.EventBreaker {
		return
	}
	now := time.Now()
	if e.Type == rebound.EventRestart {
		s.restarts.Add(1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e.Type == rebound.EventBreaker && e.State == "closed":
		s.health = mcpHealth{}
	case e.Type == rebound.EventBreaker && e.State == "open":
		s.health = mcpHealth{at: now, open: true, due: now.Add(e.Wait)}
	default: // a restart, or the breaker's probe (half-open): a start comes
		s.health = mcpHealth{at: now, due: now.Add(e.Wait)}
	}
}

// operation counts op, a client request the server's handler ended.
func (s *mcpStatus) operation(op observe.Operation) {
	now := time.Now()
	answered := mcpAnswered(op.ErrorType)
	s.row.operation(op, answered, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered && !s.health.open {
		s.health.answered = true
	}
	// A call the client cancelled, or whose session closed, is no
	// failure of the server's: a client that cancels often would push
	// the server's own out of the list.
	if op.ErrorType != "" && op.ErrorType != "cancelled" && op.ErrorType != "closed" {
		s.failures[s.next] = mcpFailure{at: now, method: op.Method, tool: op.Tool, outcome: op.ErrorType, attempts: op.Attempts}
		s.next = (s.next + 1) % mcpLastFailures
		s.count = min(s.count+1, mcpLastFailures)
	}
}

// mcpAnswered reports whether a call with errorType (an Operation's) was
// answered by the server: a success, a tool's error or the server's
// JSON-RPC error. Any other (gave_up, may_have_run, server_down,
// idle_timeout, and a call the client cancelled or whose session closed,
// as an upstream's row counts a call its client left) was given up.
func mcpAnswered(errorType string) bool {
	switch errorType {
	case "", "tool_error", "error":
		return true
	}
	return false
}

// operation counts op, a call to an MCP server, in r's window and chart:
// a call with its attempts, resent when it had more than one (each one
// after the first is a retry of the chart), answered by the first or a
// later, or given up; its latency when it reached the server.
func (r *statusRow) operation(op observe.Operation, answered bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, m := r.bucket(now), r.minute(now)
	b.calls++
	m.calls++
	b.attempts += int64(op.Attempts)
	if op.Attempts > 1 {
		b.retried++
		m.retries += int64(op.Attempts - 1)
	}
	switch {
	case !answered:
		b.gaveUp++
		m.gaveUp++
	case op.Attempts > 1:
		b.afterRetries++
	default:
		b.first++
	}
	if op.ErrorType == "may_have_run" {
		b.mayHaveRun++
	}
	if op.Attempts > 0 {
		b.latency[latencySlot(op.Duration)]++
		b.latencies++
	}
}

// observer returns obs (nil: none) with s told of what the server's
// handler reports: what obs can do, it still does (an
// observe.OperationRecorder records, a rebound.CallObserver gives each
// call its own).
func (s *mcpStatus) observer(obs rebound.Observer) rebound.Observer {
	o := mcpObserver{s: s, next: obs}
	if co, ok := obs.(rebound.CallObserver); ok {
		return mcpCallObserver{o, co}
	}
	return o
}

// mcpObserver tells an mcpStatus, then next, of what an MCP server's
// handler reports.
type mcpObserver struct {
	s    *mcpStatus
	next rebound.Observer // nil: none
}

func (o mcpObserver) Observe(e rebound.Event) {
	o.s.event(e)
	if o.next != nil {
		o.next.Observe(e)
	}
}

func (o mcpObserver) RecordOperation(ctx context.Context, op observe.Operation) {
	o.s.operation(op)
	if r, ok := o.next.(observe.OperationRecorder); ok {
		r.RecordOperation(ctx, op)
	}
}

// mcpCallObserver is an mcpObserver whose next is a CallObserver: each
// call's events go to the Observer next gives it, as they would without
// the status page (the server's health events, which the status needs,
// never do).
type mcpCallObserver struct {
	mcpObserver
	co rebound.CallObserver
}

func (o mcpCallObserver) ObserveCall(ctx context.Context) rebound.Observer {
	return o.co.ObserveCall(ctx)
}

// mcpServerJSON is an MCP server of the config on the status page.
type mcpServerJSON struct {
	Name string `json:"name"`
	// State is "up", "restarting" or "stopped" (mcpHealth.state).
	State string `json:"state"`
	// Restarts are the server's since the proxy started, every
	// session's.
	Restarts int64 `json:"restarts"`
	// The rest are over the window, as an upstream's: the calls (every
	// client request), those sent more than once, those that ended
	// "may have run", and how each ended.
	Calls                int64    `json:"calls"`
	Resends              int64    `json:"resends"`
	MayHaveRun           int64    `json:"may_have_run"`
	AnsweredFirst        int64    `json:"answered_first"`
	AnsweredAfterRetries int64    `json:"answered_after_retries"`
	GaveUp               int64    `json:"gave_up"`
	Attempts             int64    `json:"attempts"`
	P50Ms                *float64 `json:"p50_ms"`
	P99Ms                *float64 `json:"p99_ms"`
	// LastFailures are the latest calls that did not end well, newest
	// first.
	LastFailures []mcpFailureJSON `json:"last_failures"`
	PerMinute    []minuteJSON     `json:"per_minute"`
}

type mcpFailureJSON struct {
	Time     time.Time `json:"time"`
	Method   string    `json:"method"`
	Tool     string    `json:"tool,omitempty"`
	Outcome  string    `json:"outcome"`
	Attempts int       `json:"attempts"`
}

// json returns s's row, named name, at now.
func (s *mcpStatus) json(name string, now time.Time) mcpServerJSON {
	f := s.row.figures(now)
	j := mcpServerJSON{Name: name, Restarts: s.restarts.Load(), Calls: f.calls, Resends: f.retried, MayHaveRun: f.mayHaveRun,
		AnsweredFirst: f.first, AnsweredAfterRetries: f.afterRetries, GaveUp: f.gaveUp, Attempts: f.attempts,
		LastFailures: []mcpFailureJSON{}, PerMinute: perMinute(now, f.minutes)}
	if f.p50 > 0 {
		p50, p99 := milliseconds(f.p50), milliseconds(f.p99)
		j.P50Ms, j.P99Ms = &p50, &p99
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j.State = s.health.state(now)
	for i := 1; i <= s.count; i++ {
		fl := s.failures[(s.next-i+mcpLastFailures)%mcpLastFailures]
		j.LastFailures = append(j.LastFailures, mcpFailureJSON{Time: fl.at.UTC(), Method: fl.method, Tool: fl.tool, Outcome: fl.outcome, Attempts: fl.attempts})
	}
	return j
}

// mcpRows returns the rows of p's MCP servers, by name.
func (p *Proxy) mcpRows(now time.Time) []mcpServerJSON {
	rows := []mcpServerJSON{}
	if p.mcp == nil {
		return rows
	}
	for _, name := range slices.Sorted(maps.Keys(p.mcp.status)) {
		rows = append(rows, p.mcp.status[name].json(name, now))
	}
	return rows
}
