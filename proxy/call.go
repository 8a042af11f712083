package proxy

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/scrub"
)

// call is what the proxy knows of one request, for its access log line.
type call struct {
	start   time.Time
	secrets scrub.Secrets // the client's own credentials
	method  string
	path    string
	model   string
	dialect string
	route   string
	rt      *route
	body    *heldBody

	// Set by the forwarder, on the handler's goroutine.
	upstream   string
	tried      int      // upstreams tried
	skipped    []string // upstreams skipped, cooling down after a quota
	slotWaited bool     // an upstream had no slot of its limit on requests in flight in time
	stream     bool     // the answer is a stream

	outcome string // why the proxy answered itself
	aborted bool   // the response broke off as the upstream's did
	err     error

	mu       sync.Mutex // guards attempts, kinds, next and usage: the events may come from a stream's reader
	attempts int
	kinds    []string
	next     rebound.Observer // the Observer of the upstream being called
	usage    *cost.Usage      // what the answer reported it used, once read
}

// tokens notes the usage the answer reported (final or not: what was seen).
func (c *call) tokens(u cost.Usage, _ bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u != (cost.Usage{}) {
		c.usage = &u
	}
}

// Observe notes the attempts and verdicts of c's upstreams for the access
// line, and passes every event on to the Observer of the upstream being
// called (the chain's, and then the metrics').
func (c *call) Observe(e rebound.Event) {
	c.mu.Lock()
	switch e.Type {
	case rebound.EventAttempt:
		c.attempts++
	case rebound.EventRetry, rebound.EventGiveUp:
		c.kinds = append(c.kinds, e.Verdict.Kind.String())
	}
	next := c.next
	c.mu.Unlock()
	if next != nil {
		next.Observe(e)
	}
}

// observe makes c the Observer of the call to the next upstream, whose
// own Observer is next.
func (c *call) observe(next rebound.Observer) rebound.Observer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = next
	return c
}

// logCall writes the access log line of c, answered with status. It
// carries no header, body, key or prompt; an error is scrubbed of every
// credential the proxy knows and of anything shaped like one.
func (p *Proxy) logCall(c *call, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	attrs := []slog.Attr{
		slog.String("method", c.method),
		slog.String("path", c.path),
		slog.String("route", c.route),
		slog.String("upstream", c.upstream),
		slog.String("model", c.model),
		slog.Int("attempts", c.attempts),
		slog.Any("kinds", c.kinds),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(time.Since(c.start).Microseconds())/1000),
	}
	if c.usage != nil {
		attrs = append(attrs, slog.Int64("input_tokens", c.usage.InputTokens), slog.Int64("output_tokens", c.usage.OutputTokens))
	}
	if c.tried > 1 {
		attrs = append(attrs, slog.Int("upstreams_tried", c.tried))
	}
	if len(c.skipped) > 0 {
		attrs = append(attrs, slog.Any("skipped", c.skipped))
	}
	if c.outcome != "" {
		attrs = append(attrs, slog.String("outcome", c.outcome))
	}
	if c.aborted {
		attrs = append(attrs, slog.Bool("broken", true))
	}
	if c.err != nil {
		attrs = append(attrs, slog.String("error", p.secrets.String(c.secrets.String(c.err.Error()))))
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}
