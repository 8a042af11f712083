package mcprun

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// codeInvalidParams is what an SDK's server answers a call of a tool it
// does not have.
const codeInvalidParams = -32602

// toolFilter keeps a caller given some of a server's tools to those: a
// tools/call of another is answered with an error naming it, before the
// server sees it, and the answer to a tools/list is cut down to the
// tools the caller was given when it asked.
type toolFilter struct {
	mu    sync.Mutex
	lists map[jsonrpc.ID][]string // tools/list requests in flight: the tools their callers may see
	// last are the tools of the session's latest caller given some (nil:
	// none was): an answer that lists tools is cut to them when no
	// tools/list in flight has its ID (another request of the same ID
	// was answered first), never passed on whole.
	last []string
}

// admit judges a POST's message (msg) from a caller who may use tools
// (nil: all): it returns nil if it goes on to the session, or the
// refusal it has answered it with.
func (f *toolFilter) admit(w http.ResponseWriter, msg jsonrpc.Message, tools []string) *jsonrpc.Response {
	req, ok := msg.(*jsonrpc.Request)
	if tools == nil || !ok || !req.IsCall() {
		return nil
	}
	f.mu.Lock()
	f.last = tools
	f.mu.Unlock()
	if refusal := refuseTool(req, tools); refusal != nil {
		writeAnswer(w, http.StatusOK, refusal)
		return refusal
	}
	if req.Method == "tools/list" {
		f.mu.Lock()
		if f.lists == nil {
			f.lists = map[jsonrpc.ID][]string{}
		}
		f.lists[req.ID] = tools
		f.mu.Unlock()
	}
	return nil
}

// refuseTool returns the answer to req, if it is a tools/call of a tool
// not in tools (nil: all), or else nil.
func refuseTool(req *jsonrpc.Request, tools []string) *jsonrpc.Response {
	if tools == nil || req.Method != "tools/call" {
		return nil
	}
	// Read as the relay reads it: a name the caller may use, under a
	// second spelling, would be judged here and another run there.
	name, err := reboundmcp.ToolName(req.Params)
	switch {
	case err != nil:
		return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: the tool's name is given twice, or spelled another way"}}
	case slices.Contains(tools, name):
		return nil
	}
	return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: codeInvalidParams, Message: fmt.Sprintf("tool %q is not one this caller may use", name)}}
}

// writeAnswer writes resp, a JSON-RPC message, as a POST's answer.
func writeAnswer(w http.ResponseWriter, status int, resp *jsonrpc.Response) {
	body, _ := jsonrpc.EncodeMessage(resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// answer cuts down msg, on its way to the client, if it answers a
// tools/list of a caller given some tools.
func (f *toolFilter) answer(msg jsonrpc.Message) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return
	}
	lists := resp.Error == nil && listsTools(resp.Result)
	f.mu.Lock()
	tools, listed := f.lists[resp.ID]
	if listed && (lists || resp.Error != nil) {
		// Taken by the answer to the tools/list alone: a ping of the
		// same ID, answered first, leaves it.
		delete(f.lists, resp.ID)
	}
	if !listed {
		tools = f.last
	}
	f.mu.Unlock()
	if lists {
		cutTools(resp, tools)
	}
}

// forget drops what admit kept for msg, once its POST has ended: its
// answer has gone to the client, or never will (the transport refused
// the message, or the client left).
func (f *toolFilter) forget(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" {
		f.mu.Lock()
		delete(f.lists, req.ID)
		f.mu.Unlock()
	}
}

// listsTools says whether result, a JSON-RPC result, has a "tools" list.
func listsTools(result json.RawMessage) bool {
	var r struct {
		Tools []json.RawMessage `json:"tools"`
	}
	return json.Unmarshal(result, &r) == nil && r.Tools != nil
}

// cutTools cuts resp, the answer to a tools/list, down to the tools a
// caller may see (nil: all).
func cutTools(resp *jsonrpc.Response, tools []string) {
	if tools == nil || resp.Error != nil {
		return
	}
	var result map[string]json.RawMessage
	var all []json.RawMessage
	if json.Unmarshal(resp.Result, &result) != nil || json.Unmarshal(result["tools"], &all) != nil {
		return
	}
	kept := all[:0]
	for _, t := range all {
		// By the name the client reads: a tool that names itself twice
		// is dropped.
		if name, err := reboundmcp.ToolName(t); err == nil && slices.Contains(tools, name) {
			kept = append(kept, t)
		}
	}
	result["tools"], _ = json.Marshal(kept)
	resp.Result, _ = json.Marshal(result)
}
