package reboundmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

// dialHTTP opens a streamable HTTP connection to endpoint, with rebound's
// Transport under the client: every POST counts as side-effecting there,
// so the engine sends one again only when it provably never ran (a refused
// connection, a 429 or 503); resending a request that may have run is this
// package's decision, made by what the request is.
func dialHTTP(ctx context.Context, endpoint string, client *http.Client, o *Options) (mcp.Connection, error) {
	hc := &http.Client{}
	if client != nil {
		*hc = *client
	}
	// A call's stream may stay silent as long as the idle timeout allows;
	// the engine's own bounds on silence must not cut it sooner.
	lookahead := 24 * time.Hour
	if idle := o.idleTimeout(); idle > 0 {
		lookahead = idle + time.Minute
	}
	endpoint, base := hideQuery(endpoint, hc.Transport)
	hc.Transport = &rebound.Transport{
		Base:            base,
		Policy:          o.Policy,
		SideEffects:     func(r *http.Request) bool { return r.Method == http.MethodPost },
		StreamLookahead: lookahead,
		StreamStall:     -1,
	}
	hc.Transport = sessionCheck{hc.Transport}
	st := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}
	return st.Connect(ctx)
}

// hideQuery keeps the endpoint's query string (where hosted servers often
// take a key) out of the URL the SDK's client and net/http see, whose
// errors quote it and reach the logs and the caller: it returns the
// endpoint without its query, and a RoundTripper beneath every other that
// puts the query back on the requests to that endpoint, and to no other
// (a redirect elsewhere does not get the key).
func hideQuery(endpoint string, base http.RoundTripper) (string, http.RoundTripper) {
	u, err := url.Parse(endpoint)
	if err != nil || u.RawQuery == "" {
		return endpoint, base
	}
	query := u.RawQuery
	u.RawQuery, u.ForceQuery = "", false
	if base == nil {
		base = http.DefaultTransport
	}
	return u.String(), withQuery{base: base, scheme: u.Scheme, host: u.Host, path: u.Path, query: query}
}

// withQuery adds a query string to the requests for one URL.
type withQuery struct {
	base                      http.RoundTripper
	scheme, host, path, query string
}

func (w withQuery) RoundTrip(req *http.Request) (*http.Response, error) {
	u := req.URL
	if u.Scheme != w.scheme || u.Host != w.host || u.Path != w.path || u.RawQuery != "" {
		return w.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.URL.RawQuery = w.query
	return w.base.RoundTrip(r)
}

// sessionCheckBytes bounds how much of a 400's body is read to find
// whether it speaks of the session.
const sessionCheckBytes = 4 << 10

// sessionCheck reads the refusals of an HTTP server for what they mean.
// A 400 to a request that carried a session ID, whose body says the
// session is missing, invalid or unknown (as the official TypeScript
// SDK's servers answer a session they do not know, often without an ID
// the SDK's client can read), becomes the spec's 404, which the SDK's
// client reports as mcp.ErrSessionMissing. Any other refusal of a
// request (a 4xx but 404, 408 and 429) is the server's answer to it: its
// body becomes a JSON-RPC error under the request's ID, which the SDK's
// client can read (it reads none with a null ID), so that the caller is
// answered rather than the request sent again: a server that wants an
// initialize before anything else refuses a server/discover so.
type sessionCheck struct{ base http.RoundTripper }

func (s sessionCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if err != nil || !refusal(resp.StatusCode) {
		return resp, err
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, sessionCheckBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if resp.StatusCode == http.StatusBadRequest && req.Header.Get("Mcp-Session-Id") != "" && saysSessionLost(strings.ToLower(string(head))) {
		resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
		return resp, nil
	}
	if answer := refusalAnswer(req, resp, head); answer != nil {
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		resp.ContentLength = int64(len(answer))
		resp.Header.Set("Content-Type", "application/json")
	}
	return resp, nil
}

// refusal says whether status is a server's refusal of a request that it
// read: a 4xx but 404 (a lost session), 408 and 429 (try again).
func refusal(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusNotFound &&
		status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// refusalAnswer returns the JSON-RPC error answer to req that a refusal
// stands for, or nil when req is not a request with an ID.
func refusalAnswer(req *http.Request, resp *http.Response, head []byte) []byte {
	if req.Method != http.MethodPost || req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil
	}
	sent, _ := io.ReadAll(io.LimitReader(body, sessionCheckBytes<<4))
	body.Close()
	var call struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(sent, &call) != nil || len(call.ID) == 0 || string(call.ID) == "null" {
		return nil
	}
	var theirs struct {
		Error *jsonrpc.Error `json:"error"`
	}
	we := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(head)))}
	if json.Unmarshal(head, &theirs) == nil && theirs.Error != nil {
		we = theirs.Error
	}
	answer, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": call.ID, "error": we})
	if err != nil {
		return nil
	}
	return answer
}
