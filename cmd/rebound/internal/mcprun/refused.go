package mcprun

import (
	"context"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// maxLoggedTool bounds the tool name a refused call's line carries: the
// client chose it, and the server never saw it.
const maxLoggedTool = 64

// logRefused writes the access line of req, a call the Handler answered
// with refusal itself, never sending it to the server (a tool the caller
// was not given): the schema of the relay's lines ("kind":"mcp", no
// attempt made), with the caller's tenant, never the call's arguments.
func (h *Handler) logRefused(c proxy.MCPCaller, req *jsonrpc.Request, refusal *jsonrpc.Response, start time.Time) {
	if h.logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("kind", "mcp"), slog.String("server", h.name), slog.String("method", req.Method)}
	if req.Method == "tools/call" {
		tool, _ := reboundmcp.ToolName(req.Params)
		if len(tool) > maxLoggedTool {
			tool = tool[:maxLoggedTool]
		}
		attrs = append(attrs, slog.String("tool", tool))
	}
	outcome := "refused"
	if e, ok := refusal.Error.(*jsonrpc.Error); ok && e.Code == codeInvalidParams {
		outcome = "tool_not_given"
	}
	attrs = append(attrs, slog.Int("attempts", 0), slog.String("outcome", outcome),
		slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000))
	if c.Tenant != "" {
		attrs = append(attrs, slog.String("tenant", c.Tenant))
	}
	h.logger.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}
