package reboundmcp

import (
	"context"
	"log/slog"
	"time"

	"github.com/rebound-go/rebound/observe"
)

// log writes the call's one line, never its arguments or result, and
// hands the call to the Observer as an Operation, if it records them.
func (c *call) log(outcome string, took time.Duration) {
	if r, ok := c.s.o.Observer.(observe.OperationRecorder); ok {
		op := observe.Operation{Kind: "mcp", Method: c.methodLabel(), Tool: c.toolLabel(), Duration: took, Attempts: c.attempts}
		if outcome != "ok" {
			op.ErrorType = outcome // tool_error, may_have_run, gave_up, ...
		}
		r.RecordOperation(context.Background(), op)
	}
	l := c.logger
	if l == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("kind", "mcp"), slog.String("server", c.s.o.Name), slog.String("method", c.req.Method),
	}
	if c.tool != "" {
		attrs = append(attrs, slog.String("tool", c.tool))
	}
	attrs = append(attrs, slog.Int("attempts", c.attempts), slog.String("outcome", outcome),
		slog.Bool("restarted", c.restarted), slog.Float64("latency_ms", float64(took.Microseconds())/1000))
	// The access line of rebound proxy's schema: one level, the outcome
	// telling how the request went.
	l.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// otherLabel is the label of a method or tool a metric does not name: a
// client chooses the names it sends, and one that makes them up must grow
// no series.
const otherLabel = "other"

// methodLabel is the call's method, if MCP defines it, else otherLabel.
func (c *call) methodLabel() string {
	if m := c.req.Method; resendable[m] || m == "tools/call" {
		return m
	}
	return otherLabel
}

// toolLabel is the tool a tools/call names, if the server listed it or
// Options.Tools names it, else otherLabel; "" for another method.
func (c *call) toolLabel() string {
	if c.tool == "" {
		return ""
	}
	c.s.mu.Lock()
	_, listed := c.s.state.tools[c.tool]
	c.s.mu.Unlock()
	if _, named := c.s.o.Tools[c.tool]; listed || named {
		return c.tool
	}
	return otherLabel
}
