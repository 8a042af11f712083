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
}

// admit judges a POST's message (msg) from a caller who may use tools
// (nil: all): it returns nil if it goes on to the session, or the
// refusal it has answered it with.
func (f *toolFilter) admit(w http.ResponseWriter, msg jsonrpc.Message, tools []string) *jsonrpc.Response {
	req, ok := msg.(*jsonrpc.Request)
	if tools == nil || !ok || !req.IsCall() {
		return nil
	}
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
	f.mu.Lock()
	tools, listed := f.lists[resp.ID]
	delete(f.lists, resp.ID)
	f.mu.Unlock()
	if listed {
		cutTools(resp, tools)
	}
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
		var named struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &named) == nil && slices.Contains(tools, named.Name) {
			kept = append(kept, t)
		}
	}
	result["tools"], _ = json.Marshal(kept)
	resp.Result, _ = json.Marshal(result)
}
