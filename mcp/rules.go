package reboundmcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/internal/jsonscan"
	"github.com/rebound-go/rebound/tool"
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

// kindOf says how a tools/call of name is resent, from the caller's
// overrides and then the annotations last listed (listed is nil for a tool
// never seen listed). It never answers tool.Unknown: what nothing says is
// safe is taken for side effects.
func (o *Options) kindOf(name string, listed *mcp.ToolAnnotations) tool.Kind {
	if k := o.Tools[name]; k != tool.Unknown {
		return k
	}
	switch {
	case o.IgnoreAnnotations || listed == nil:
		return tool.SideEffects
	case listed.ReadOnlyHint:
		return tool.ReadOnly
	case listed.IdempotentHint:
		return tool.Idempotent
	}
	return tool.SideEffects
}

// errSessionLost: the server refused a request for its session, so the
// request never ran.
var errSessionLost = errors.New("the server lost the session")

// sessionLost says whether err (from writing a request, or from reading
// the server) is the transport's word that the server lost the session:
// the SDK's mcp.ErrSessionMissing, which it reports for a 404 to a request
// that carried the session's ID, and which sessionCheck makes of a 400
// that names the session. A JSON-RPC error never is, whatever its code or
// message: an error that answers a request is the server's answer to it
// (-32001, say, is also the TypeScript SDK's timeout of a tool's own
// request), and a side-effecting tool it answers may have acted.
func sessionLost(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing)
}

// rejectedCode is the code of the SDK's own jsonrpc2.ErrRejected, which
// its streamable client wraps around every request it could not deliver:
// the client's word, never the server's.
const rejectedCode = -32005

// serverError returns the first JSON-RPC error in err's tree that is the
// server's, skipping the SDK's "rejected by transport", or nil.
func serverError(err error) *jsonrpc.Error {
	for err != nil {
		if we, ok := err.(*jsonrpc.Error); ok && !(we.Code == rejectedCode && we.Message == "rejected by transport") {
			return we
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if we := serverError(e); we != nil {
					return we
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
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

// The names of a request's params that the rules decide by, and of its
// _meta.
var (
	paramsNames = jsonscan.NewNames("name", "_meta")
	metaNames   = jsonscan.NewNames("progressToken")
)

// requestFacts reads what the rules need from a client request's params:
// the tool of a tools/call and the progress token. They are read by
// jsonscan's rules: params that give one twice, or spell one another way
// ({"name":"create","Name":"safe"}), are an error, since the server may
// run another tool than the one judged. Params that are not JSON, or a
// name or a _meta of another type, say nothing: the server cannot read
// them either, and will say so.
func requestFacts(params json.RawMessage) (tool string, progressToken any, err error) {
	var s jsonscan.Scanner
	s.Reset(params)
	if s.Next() != jsonscan.Object {
		return "", nil, nil
	}
	for m := s.Object(paramsNames); m.Next(); {
		switch {
		case m.Name() == 0:
			if v, ok := s.Str(); ok {
				tool = string(s.Text(nil, v))
			}
		case m.Name() == 1 && s.Next() == jsonscan.Object:
			for mm := s.Object(metaNames); mm.Next(); {
				v := s.Skip()
				if mm.Name() == 0 && v.Set() {
					json.Unmarshal(s.Bytes(v), &progressToken)
				}
			}
		default:
			s.Skip()
		}
	}
	if err := s.Err(); errors.Is(err, jsonscan.ErrDuplicateKey) || errors.Is(err, jsonscan.ErrKeySpelling) {
		return "", nil, err
	}
	return tool, progressToken, nil
}

// ToolName returns the tool a tools/call's params name, read as the
// relay reads it to judge the call: by its exact key, escapes resolved.
// Params that give the name twice, or spell it another way, are an error
// (the relay answers such a call -32600, never sending it), since the
// server may run another tool than the one judged; params that are not
// an object, or a name that is not a string, give "".
func ToolName(params json.RawMessage) (string, error) {
	tool, _, err := requestFacts(params)
	return tool, err
}

// idKey is a map key for a JSON-RPC ID or progress token: 1 and "1"
// differ, and a number is the same key whether the SDK read it (an ID's
// int64) or encoding/json did (a float64, in a cancellation's requestId).
func idKey(v any) string {
	switch v := v.(type) {
	case string:
		return "s:" + v
	case int64:
		return "n:" + strconv.FormatInt(v, 10)
	case float64:
		if i := int64(v); float64(i) == v {
			return "n:" + strconv.FormatInt(i, 10)
		}
		return "n:" + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprintf("%T:%v", v, v)
}
