package reboundmcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resendable lists the requests that are read-only by the spec, or state
// that a restart replays: sent again, whatever happened to the attempt
// before.
var resendable = map[string]bool{
	"initialize": true, "server/discover": true, "ping": true,
	"tools/list": true, "prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true, "logging/setLevel": true,
	"subscriptions/listen": true,
}

// lasting lists the requests that stay open by design, answered only when
// cancelled: the idle timeout does not apply to them.
var lasting = map[string]bool{"subscriptions/listen": true}

// ruleOf says how a tools/call of tool is resent, from the caller's
// overrides and then the annotations last listed (listed is nil for a tool
// never seen listed).
func (o *Options) ruleOf(tool string, listed *mcp.ToolAnnotations) ToolRule {
	if r := o.Tools[tool]; r != 0 {
		return r
	}
	switch {
	case o.IgnoreAnnotations || listed == nil:
		return ToolSideEffects
	case listed.ReadOnlyHint:
		return ToolReadOnly
	case listed.IdempotentHint:
		return ToolIdempotent
	}
	return ToolSideEffects
}

// errSessionLost: the server refused a request for its session, so the
// request never ran.
var errSessionLost = errors.New("the server lost the session")

// sessionLost says whether err (from writing a request, or the error of
// its answer) is the server refusing the request for its session: the
// SDK's 404 (mcp.ErrSessionMissing), a JSON-RPC error -32001 "Session not
// found", or a 400 whose error says the session ID is missing or invalid,
// as the official SDKs' servers answer.
func sessionLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, mcp.ErrSessionMissing) {
		return true
	}
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return false
	}
	return we.Code == -32001 || saysSessionLost(strings.ToLower(we.Message))
}

// saysSessionLost says whether a lower-cased error message is about a
// session ID that is missing, invalid or unknown.
func saysSessionLost(m string) bool {
	return strings.Contains(m, "session") &&
		(strings.Contains(m, "not found") || strings.Contains(m, "missing") || strings.Contains(m, "invalid") ||
			strings.Contains(m, "no valid") || strings.Contains(m, "unknown") || strings.Contains(m, "required"))
}

// MayHaveRun is the message of the error a caller gets for a request cut
// short that is not sent again.
func mayHaveRunMessage(server, method, tool string, lost bool) string {
	what := "died"
	if lost {
		what = "lost the session"
	}
	if method == "tools/call" {
		return fmt.Sprintf("reboundmcp: MCP server %s %s while tool %q ran: the call may have taken effect, and was not sent again", server, what, tool)
	}
	return fmt.Sprintf("reboundmcp: MCP server %s %s while %s ran: the request may have taken effect, and was not sent again", server, what, method)
}

// requestFacts reads what the rules need from a client request's params:
// the tool of a tools/call and the progress token.
func requestFacts(params json.RawMessage) (tool string, progressToken any) {
	var p struct {
		Name string `json:"name"`
		Meta struct {
			ProgressToken any `json:"progressToken"`
		} `json:"_meta"`
	}
	json.Unmarshal(params, &p) // a request the server cannot read either; it will say so
	return p.Name, p.Meta.ProgressToken
}

// idKey is a map key for a JSON-RPC ID or progress token: 1 and "1"
// differ, but a number is one key however it was decoded, so that the
// requestId of a client's notifications/cancelled (a float64, read from
// params) finds the request whose ID the SDK decoded as an int64.
func idKey(v any) string {
	switch n := v.(type) {
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<63 {
			return "n:" + strconv.FormatInt(int64(n), 10)
		}
		return "n:" + strconv.FormatFloat(n, 'g', -1, 64)
	case int64:
		return "n:" + strconv.FormatInt(n, 10)
	case string:
		return "s:" + n
	}
	return fmt.Sprintf("%T:%v", v, v)
}
