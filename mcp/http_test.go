package reboundmcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

// httpFake is an MCP server on the official SDK behind a streamable HTTP
// handler that a test can restart (a new handler, which knows none of the
// old sessions) or make refuse requests.
type httpFake struct {
	srv     *httptest.Server
	handler atomic.Pointer[http.Handler]

	mu      sync.Mutex
	runs    map[string]int
	methods []string // the HTTP methods of the requests, in order
	refuse  func(r *http.Request) (status int, retryAfter string)
	// refusal is the body of a refusal, if any
	refusal string
	// writeErr, if set, is what the tool write answers with, after it
	// has acted (counted its run)
	writeErr error
}

func newHTTPFake(t *testing.T) *httpFake {
	f := &httpFake{runs: map[string]int{}}
	f.restart()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.methods = append(f.methods, r.Method)
		refuse := f.refuse
		f.mu.Unlock()
		if refuse != nil {
			if status, after := refuse(r); status != 0 {
				w.Header().Set("Retry-After", after)
				w.WriteHeader(status)
				io.WriteString(w, f.refusal)
				return
			}
		}
		(*f.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// restart replaces the server: every session is lost.
func (f *httpFake) restart() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "httpfake", Version: "1"}, nil)
	schema := map[string]any{"type": "object"}
	for name, a := range map[string]*mcp.ToolAnnotations{"read": {ReadOnlyHint: true}, "write": nil} {
		srv.AddTool(&mcp.Tool{Name: name, Annotations: a, InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.mu.Lock()
			f.runs[name]++
			n := f.runs[name]
			err := f.writeErr
			f.mu.Unlock()
			if name == "write" && err != nil {
				return nil, err
			}
			return text(fmt.Sprintf("%s %d", name, n)), nil
		})
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	f.handler.Store(&h)
}

func (f *httpFake) runsOf(tool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[tool]
}

func TestHTTPLostSessionIsReinitializedWithoutTheCallerSeeingIt(t *testing.T) {
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("protocol "+version, func(t *testing.T) {
			f := newHTTPFake(t)
			var logs logBuffer
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{Logger: logs.logger()}), &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got, err := callText(t, cs, "write"); err != nil || got != "write 1" {
				t.Fatalf("%q, %v", got, err)
			}
			f.restart()
			if got, err := callText(t, cs, "write"); err != nil || got != "write 2" {
				t.Fatalf("after the server restarted: %q, %v; want write 2", got, err)
			}
			if n := f.runsOf("write"); n != 2 {
				t.Errorf("write ran %d times, want 2", n)
			}
			t.Logf("%s", logs.String())
		})
	}
}

func TestHTTP503WithRetryAfterIsRetriedBeneathTheSession(t *testing.T) {
	f := newHTTPFake(t)
	var refused atomic.Int32
	f.refuse = func(r *http.Request) (int, string) {
		if r.Method == http.MethodPost && refused.Add(1) == 3 { // the first tools/call
			return http.StatusServiceUnavailable, "0"
		}
		return 0, ""
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	synctestFreeWaitListing(cs, t)
	if got, err := callText(t, cs, "write"); err != nil || got != "write 1" {
		t.Fatalf("%q, %v", got, err)
	}
}

// synctestFreeWaitListing makes sure rebound's own listing is done: a
// ping is answered after the notifications/initialized before it.
func synctestFreeWaitListing(cs *mcp.ClientSession, t *testing.T) {
	if err := cs.Ping(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPCloseEndsTheSessionWithDELETE(t *testing.T) {
	f := newHTTPFake(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	cs.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if last := f.methods[len(f.methods)-1]; last != http.MethodDelete {
		t.Errorf("the last request was %s, want DELETE: %s", last, strings.Join(f.methods, " "))
	}
}

// TestHTTPServerThatRefusesConnectionsForAWhileLosesNoCall: a server that
// stops listening, refuses connections for a while and comes back without
// its sessions: the side-effecting call made meanwhile never reached it
// (each refusal is provable), so it is sent again, and runs once. The
// client keeps no idle connection: a request written into a pooled one the
// old server had closed may have reached it, and is rightly never sent
// again; that is a race the test would otherwise lose now and then.
func TestHTTPServerThatRefusesConnectionsForAWhileLosesNoCall(t *testing.T) {
	f := newHTTPFake(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		s := &http.Server{Handler: f.srv.Config.Handler}
		go s.Serve(ln)
		return s
	}
	first := serve(ln)
	var once sync.Once
	back := make(chan *http.Server, 1)
	o := Options{}
	// The server comes back once the engine beneath has seen a refusal.
	o.Policy.Observer = rebound.ObserverFunc(func(e rebound.Event) {
		if e.Err != nil && strings.Contains(e.Err.Error(), "refused") {
			once.Do(func() {
				f.restart()
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("listening again on %s: %v", addr, err)
					close(back)
					return
				}
				back <- serve(ln)
			})
		}
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP("http://"+addr+"/mcp", &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}), o), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got, err := callText(t, cs, "write"); err != nil || got != "write 1" {
		t.Fatalf("%q, %v", got, err)
	}
	first.Close()
	if got, err := callText(t, cs, "write"); err != nil || got != "write 2" {
		t.Fatalf("through the refusals and the lost session: %q, %v; want write 2", got, err)
	}
	if second := <-back; second != nil {
		defer second.Close()
	}
	if n := f.runsOf("write"); n != 2 {
		t.Errorf("write ran %d times, want 2", n)
	}
}

// TestHTTPEndpointSecretsAreSentButNeverLoggedNorTold: a key in the
// endpoint's user, path or query string (hosted servers take one in each)
// goes with every request, but never into a log line or an error, which
// would hand it to whoever reads the logs, or to the model: those name the
// server by scheme, host and port alone.
func TestHTTPEndpointSecretsAreSentButNeverLoggedNorTold(t *testing.T) {
	const (
		user   = "tok_USER42"
		pass   = "PASSWORD42"
		path   = "/api/mcp/s/PATHSECRET42/mcp"
		secret = "SECRET-KEY-42"
	)
	endpoint := func(hostport string) string {
		return "http://" + user + ":" + pass + "@" + hostport + path + "?api_key=" + secret
	}
	t.Run("sent", func(t *testing.T) {
		f := newHTTPFake(t)
		var missing atomic.Int32
		f.refuse = func(r *http.Request) (int, string) {
			u, p, _ := r.BasicAuth()
			if r.URL.Query().Get("api_key") != secret || r.URL.Path != path || u != user || p != pass {
				missing.Add(1)
			}
			return 0, ""
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), New(HTTP(endpoint(f.srv.Listener.Addr().String()), nil), Options{}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := callText(t, cs, "read"); err != nil || got != "read 1" {
			t.Fatalf("%q, %v", got, err)
		}
		cs.Close()
		if n := missing.Load(); n != 0 {
			t.Errorf("%d requests reached the server without the endpoint's user, path or query", n)
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens: every connection is refused
		var logs logBuffer
		o := Options{Logger: logs.logger(), DownWait: -1}
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), New(HTTP(endpoint(addr), nil), o), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err == nil {
			cs.Close()
			t.Fatal("connected to a server that is not there")
		}
		t.Logf("the caller got: %v\n%s", err, logs.String())
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("the caller's error does not name the server %s: %v", addr, err)
		}
		for _, s := range []string{user, pass, "PATHSECRET42", secret} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("the caller's error holds %s: %v", s, err)
			}
			if strings.Contains(logs.String(), s) {
				t.Errorf("the logs hold %s:\n%s", s, logs.String())
			}
		}
	})
}

// TestHTTPInBandErrorIsTheServersAnswerNotALostSession: a JSON-RPC error
// answering a side-effecting call is the server's answer, whatever its
// code or message: -32001 is also the TypeScript SDK's RequestTimeout,
// what a tool whose nested request timed out is answered with, and a
// message may speak of any session. The tool acted once, the caller gets
// the error as it came, and the session goes on.
func TestHTTPInBandErrorIsTheServersAnswerNotALostSession(t *testing.T) {
	for _, we := range []*jsonrpc.Error{
		{Code: -32001, Message: "Request timed out"},
		{Code: -32001, Message: "Session not found"},
		{Code: -32000, Message: "Bad Request: No valid session ID provided"},
		{Code: jsonrpc.CodeInternalError, Message: "the payments API says: invalid session token"},
	} {
		t.Run(fmt.Sprintf("%d %s", we.Code, we.Message), func(t *testing.T) {
			f := newHTTPFake(t)
			f.writeErr = we
			var logs logBuffer
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{Logger: logs.logger()}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			_, err = callText(t, cs, "write")
			var got *jsonrpc.Error
			if !errors.As(err, &got) || got.Code != we.Code || got.Message != we.Message {
				t.Errorf("the caller got %v; want the server's error %d %q as it came", err, we.Code, we.Message)
			}
			if n := f.runsOf("write"); n != 1 {
				t.Errorf("write acted %d times, want 1", n)
			}
			if r := logs.lines(t, "mcp.restart"); len(r) != 0 {
				t.Errorf("%d new sessions opened, want none:\n%s", len(r), logs.String())
			}
		})
	}
}

// TestHTTPLostSessionIsToldByTheTransport: a 404, or a 400 that names
// the session, to a request that carried the session's ID is a lost
// session whatever its body says (the TypeScript SDK's servers answer a
// 404 with a JSON-RPC error -32001, id null; the Go SDK's with plain
// text): the side-effecting call was refused, so it never ran, and it is
// sent again on a new session, where it runs once.
func TestHTTPLostSessionIsToldByTheTransport(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
	}{
		{http.StatusNotFound, `{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}`},
		{http.StatusNotFound, "session not found\n"},
		{http.StatusNotFound, `{"jsonrpc":"2.0","error":{"code":-32603,"message":"gone"},"id":3}`},
		{http.StatusBadRequest, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`},
	} {
		t.Run(fmt.Sprintf("%d %s", c.status, c.body), func(t *testing.T) {
			f := newHTTPFake(t)
			f.refusal = c.body
			var refused atomic.Bool
			f.refuse = func(r *http.Request) (int, string) {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if r.Header.Get("Mcp-Session-Id") != "" && strings.Contains(string(body), `"tools/call"`) && refused.CompareAndSwap(false, true) {
					return c.status, ""
				}
				return 0, ""
			}
			var logs logBuffer
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{Logger: logs.logger()}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got, err := callText(t, cs, "write"); err != nil || got != "write 1" {
				t.Errorf("%q, %v; want write 1, on a new session", got, err)
			}
			if n := f.runsOf("write"); n != 1 {
				t.Errorf("write acted %d times, want 1", n)
			}
			if r := logs.lines(t, "mcp.restart"); len(r) != 1 || r[0]["cause"] != errSessionLost.Error() {
				t.Errorf("new sessions %v, want one, for the lost session:\n%s", r, logs.String())
			}
		})
	}
}

// TestHTTPServerRefusingConnectionsIsReportedAsDownNotAsItsAnswer: when
// every connection to an HTTP server is refused (or it answers 503 or 429
// until the engine beneath gives up), the caller is told rebound gave up
// on the server, not the SDK's "rejected by transport", as if the server
// had answered so.
func TestHTTPServerRefusingConnectionsIsReportedAsDownNotAsItsAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs logBuffer
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP("http://"+addr+"/mcp", nil), Options{Logger: logs.logger(), DownWait: -1}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil {
		cs.Close()
		t.Fatal("connected to nothing")
	}
	// Which of rebound's two words the caller gets depends on whether the
	// last attempt found the server still being restarted (down, and no
	// wait for it) or found it refusing again (gave up): on a busy machine
	// either comes. Both say the server is down; neither passes a refused
	// connection off as the server's answer.
	gaveUp := strings.Contains(err.Error(), "reboundmcp: initialize to MCP server "+addr+" failed after")
	down := strings.Contains(err.Error(), ErrServerDown.Error()+": "+addr+" has been down")
	if !gaveUp && !down {
		t.Errorf("the caller got %v; want rebound's word that it gave up on the server, or that the server is down", err)
	}
	if reqs := logs.requests(t); len(reqs) != 1 || (reqs[0]["outcome"] != "gave_up" && reqs[0]["outcome"] != "server_down") {
		t.Errorf("logged %v; want one initialize that gave up, or found the server down", reqs)
	}
}
