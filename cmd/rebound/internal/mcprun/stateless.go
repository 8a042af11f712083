package mcprun

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// A client of the stateless protocol (2026-07-28 on, SEP-2575) opens no
// session: it asks server/discover where another initializes, and sends
// every request on its own, its protocol version, its own name and
// capabilities in the request's _meta. A Handler serves such clients
// through one upstream connection shared by all of them (shared): a
// reboundmcp transport initialized once, with the legacy protocol every
// server speaks, and so restarted, replayed and resent as a session's
// upstream is. Each request goes to it under an ID of the connection's
// own, and its answer comes back to the POST that waits for it; a
// server/discover is answered from the upstream's initialize.

const (
	protocolHeader = "Mcp-Protocol-Version"
	// statelessVersion is the one version served without a session.
	statelessVersion = "2026-07-28"
	// legacyVersion is what the shared upstream is initialized with.
	legacyVersion = "2025-11-25"

	metaVersion        = "io.modelcontextprotocol/protocolVersion"
	metaServerInfo     = "io.modelcontextprotocol/serverInfo"
	codeHeaderMismatch = -32020 // the SDK's CodeHeaderMismatch
)

// requestMeta are the _meta members of a stateless request that a server
// of the legacy protocol is not sent: its session has them already.
var requestMeta = []string{metaVersion, "io.modelcontextprotocol/clientInfo", "io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/logLevel"}

// removed are the methods the stateless protocol has not: the SDK's
// stateless server answers them as unknown.
var removed = map[string]bool{
	"initialize": true, "ping": true, "logging/setLevel": true, "resources/subscribe": true, "resources/unsubscribe": true,
	// The list changes a stream of subscriptions/listen would carry are
	// not offered (discoverResult): the shared upstream's are no one
	// client's.
	"subscriptions/listen": true,
}

// newProtocol says whether version (a header's) is the stateless
// protocol's or later, compared as the SDK compares them.
func newProtocol(version string) bool { return version >= statelessVersion }

// stateless says whether a POST without a session, its message req (nil:
// an answer), is of the stateless protocol: sent with its version, or a
// call whose _meta names a version, or a server/discover.
func stateless(r *http.Request, req *jsonrpc.Request) bool {
	if req == nil {
		return false
	}
	return newProtocol(r.Header.Get(protocolHeader)) ||
		req.IsCall() && (req.Method == "server/discover" || requestVersion(req.Params) != "")
}

// serveStateless answers a stateless client's request req, from caller
// c: a notification is taken and dropped (a request ends when its POST
// does), a call checked as the SDK's stateless server checks it, judged
// by the caller's tools, and relayed through the shared upstream.
func (f *Handler) serveStateless(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, c proxy.MCPCaller) {
	start := time.Now()
	if !req.IsCall() {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if !acceptsJSON(r) {
		writeError(w, http.StatusBadRequest, codeServerError, "Accept must contain application/json")
		return
	}
	if refusal := checkStateless(r, req); refusal != nil {
		writeAnswer(w, errorStatus(refusal), refusal)
		return
	}
	if refusal := refuseTool(req, c.Tools); refusal != nil {
		writeAnswer(w, errorStatus(refusal), refusal)
		f.logRefused(c, req, refusal, start)
		return
	}
	u, err := f.sharedUpstream(r.Context(), c.Holder)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeAnswer(w, http.StatusServiceUnavailable, &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: codeServerError, Message: err.Error()}})
		return
	}
	if req.Method == "server/discover" {
		writeAnswer(w, http.StatusOK, &jsonrpc.Response{ID: req.ID, Result: u.discover})
		return
	}
	ctx := r.Context()
	if c.Tenant != "" && f.logger != nil {
		ctx = reboundmcp.WithLogger(ctx, f.logger.With("tenant", c.Tenant))
	}
	resp := u.call(ctx, f.ctx, req)
	if resp == nil {
		return // the client left; the server was told
	}
	if req.Method == "tools/list" {
		cutTools(resp, c.Tools)
	}
	writeAnswer(w, errorStatus(resp), resp)
}

// checkStateless checks a stateless call as the SDK's stateless server
// does, and returns the error it answers, or nil.
func checkStateless(r *http.Request, req *jsonrpc.Request) *jsonrpc.Response {
	refuse := func(code int64, msg string, data any) *jsonrpc.Response {
		e := &jsonrpc.Error{Code: code, Message: msg}
		if data != nil {
			e.Data, _ = json.Marshal(data)
		}
		return &jsonrpc.Response{ID: req.ID, Error: e}
	}
	version, header := requestVersion(req.Params), r.Header.Get(protocolHeader)
	switch {
	case version == "":
		return refuse(jsonrpc.CodeInvalidParams, fmt.Sprintf("missing or invalid _meta field %q", metaVersion), nil)
	case header == "":
		return refuse(codeHeaderMismatch, fmt.Sprintf("%s header is required for requests carrying %q", protocolHeader, metaVersion), nil)
	case header != version:
		return refuse(codeHeaderMismatch, fmt.Sprintf("%s header %q does not match request %s %q", protocolHeader, header, metaVersion, version), nil)
	case version != statelessVersion:
		return refuse(mcp.CodeUnsupportedProtocolVersion, "unsupported protocol version",
			mcp.UnsupportedProtocolVersionData{Supported: mcp.SupportedProtocolVersions(), Requested: version})
	case r.Header.Get("Mcp-Method") != "" && r.Header.Get("Mcp-Method") != req.Method:
		return refuse(codeHeaderMismatch, fmt.Sprintf("Mcp-Method header %q does not match the method %q", r.Header.Get("Mcp-Method"), req.Method), nil)
	case removed[req.Method]:
		return refuse(jsonrpc.CodeMethodNotFound, fmt.Sprintf("%q is not served to a stateless client", req.Method), nil)
	}
	if name, ok := r.Header["Mcp-Name"]; ok && req.Method == "tools/call" && (len(name) != 1 || name[0] != toolName(req.Params)) {
		return refuse(codeHeaderMismatch, fmt.Sprintf("Mcp-Name header %q does not match the tool %q", name, toolName(req.Params)), nil)
	}
	return nil
}

// errorStatus is the HTTP status of an answer, as SEP-2575 has it: 404
// for a method not found, 400 for invalid params, an unsupported version
// and headers that do not match the body (as the SDK's server answers
// them), else 200.
func errorStatus(resp *jsonrpc.Response) int {
	e, _ := resp.Error.(*jsonrpc.Error)
	switch {
	case e == nil:
		return http.StatusOK
	case e.Code == jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case e.Code == jsonrpc.CodeInvalidParams, e.Code == mcp.CodeUnsupportedProtocolVersion, e.Code == mcp.CodeMissingRequiredClientCapabilities, e.Code == codeHeaderMismatch:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// acceptsJSON says whether r's client takes an application/json answer,
// the only kind a stateless request gets.
func acceptsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if mt == "application/json" || mt == "application/*" || mt == "*/*" {
				return true
			}
		}
	}
	return false
}

// requestVersion is the protocol version a request's _meta names, or "".
func requestVersion(params json.RawMessage) string {
	var p, meta map[string]json.RawMessage
	var v string
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p["_meta"], &meta) != nil || json.Unmarshal(meta[metaVersion], &v) != nil {
		return ""
	}
	return v
}

// toolName is the tool a tools/call's params name, as the tool filter
// and the relay read it ("" when they refuse the params).
func toolName(params json.RawMessage) string {
	name, _ := reboundmcp.ToolName(params)
	return name
}

// legacyParams returns params without the _meta members of the stateless
// protocol (requestMeta), which a server might read as a stateless
// client's request of its own, and with a progress token, if the client
// gave one, replaced by token: clients that share the connection may give
// the same, and each call's progress must keep that call alive, not
// another's. (A stateless client is sent no progress: it gets its answer
// alone.)
func legacyParams(params json.RawMessage, token json.RawMessage) json.RawMessage {
	var p, meta map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p["_meta"], &meta) != nil {
		return params
	}
	for _, k := range requestMeta {
		delete(meta, k)
	}
	if _, ok := meta["progressToken"]; ok {
		meta["progressToken"] = token
	}
	if len(meta) == 0 {
		delete(p, "_meta")
	} else {
		p["_meta"], _ = json.Marshal(meta)
	}
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}
