package reboundmcp

import (
	"bytes"
	"context"
	"errors"
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
	endpoint, base, err := hideEndpoint(endpoint, hc.Transport)
	if err != nil {
		return nil, err
	}
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

// errBadEndpoint: the endpoint is not a URL. It is not quoted: it may
// hold a key.
var errBadEndpoint = errors.New("reboundmcp: the MCP server's endpoint is not an http:// or https:// URL")

// hideEndpoint keeps all of the endpoint but its scheme, host and port
// (its user and password, its path and its query string, where hosted
// servers take their keys) out of the URL the SDK's client and net/http
// see, whose errors quote it and reach the logs and the caller: it returns
// the endpoint cut to scheme://host:port, and a RoundTripper beneath every
// other that sends the requests for that URL, and for no other, to the
// whole endpoint (a redirect elsewhere gets none of it).
func hideEndpoint(endpoint string, base http.RoundTripper) (string, http.RoundTripper, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, errBadEndpoint
	}
	if base == nil {
		base = http.DefaultTransport
	}
	bare := &url.URL{Scheme: u.Scheme, Host: u.Host}
	return bare.String(), wholeEndpoint{base: base, bare: bare, whole: u}, nil
}

// wholeEndpoint sends the requests for the bare endpoint to the whole one.
type wholeEndpoint struct {
	base        http.RoundTripper
	bare, whole *url.URL
}

func (w wholeEndpoint) RoundTrip(req *http.Request) (*http.Response, error) {
	if u := req.URL; u.Scheme != w.bare.Scheme || u.Host != w.bare.Host || u.Path != "" || u.RawQuery != "" || u.Opaque != "" || u.User != nil {
		return w.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	whole := *w.whole
	whole.User = nil // what net/http's client would make of it, made here
	r.URL = &whole
	if user := w.whole.User; user != nil && r.Header.Get("Authorization") == "" {
		pass, _ := user.Password()
		r.SetBasicAuth(user.Username(), pass)
	}
	resp, err := w.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// A relative Location is the server's, relative to the whole endpoint:
	// the client above, which knows only the bare one, would resolve it
	// wrong.
	if loc := resp.Header.Get("Location"); loc != "" {
		if to, err := w.whole.Parse(loc); err == nil {
			to.User = nil // as a redirect elsewhere, it gets none of the endpoint's
			resp.Header.Set("Location", to.String())
		}
	}
	return resp, nil
}

// sessionCheckBytes bounds how much of a 400's body is read to find
// whether it speaks of the session.
const sessionCheckBytes = 4 << 10

// sessionCheck reads the refusals of an HTTP server for what they mean,
// and so decides, from the transport alone, that the server lost the
// session. A 404 to a request that carried a session ID, or a 400 whose
// body says the session is missing, invalid or unknown (as the official
// TypeScript SDK's servers answer a session they do not know), is made a
// 404 without a body, which the SDK's client reports as
// mcp.ErrSessionMissing: with the body, it would report the JSON-RPC
// error in it (-32001 "Session not found", id null) as though the server
// had answered the request. Any other refusal of a request (a 4xx but
// 404, 408 and 429) is the server's answer to it: its body becomes a
// JSON-RPC error under the request's ID, which the SDK's client can read
// (it reads none with a null ID), so that the caller is answered rather
// than the request sent again: a server that wants an initialize before
// anything else refuses a server/discover so.
type sessionCheck struct{ base http.RoundTripper }

func (s sessionCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	inSession := req.Header.Get("Mcp-Session-Id") != ""
	if resp.StatusCode == http.StatusNotFound && inSession {
		return sessionLostResponse(resp), nil
	}
	if !refusal(resp.StatusCode) {
		return resp, nil
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, sessionCheckBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if resp.StatusCode == http.StatusBadRequest && inSession && saysSessionLost(strings.ToLower(string(head))) {
		return sessionLostResponse(resp), nil
	}
	if answer := refusalAnswer(req, resp, head); answer != nil {
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		resp.ContentLength = int64(len(answer))
		resp.Header.Set("Content-Type", "application/json")
	}
	return resp, nil
}

// sessionLostResponse makes resp the bare 404 the SDK's client reads as
// a lost session (mcp.ErrSessionMissing) and nothing else.
func sessionLostResponse(resp *http.Response) *http.Response {
	io.Copy(io.Discard, io.LimitReader(resp.Body, sessionCheckBytes)) // so that the connection may be used again
	resp.Body.Close()
	resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
	resp.Body, resp.ContentLength = http.NoBody, 0
	resp.Header.Del("Content-Type")
	resp.Header.Del("Content-Length")
	return resp
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
	msg, err := DecodeMessage(sent)
	call, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !call.IsCall() {
		return nil
	}
	we := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(head)))}
	if theirs, err := readWire(head); err == nil && theirs.err != nil {
		we = theirs.err
	}
	answer, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: call.ID, Error: we})
	if err != nil {
		return nil
	}
	return answer
}
