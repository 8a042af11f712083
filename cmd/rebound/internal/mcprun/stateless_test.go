package mcprun

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// statelessMeta is the _meta of a stateless request of version v.
func statelessMeta(v string) string {
	return `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + v + `"}`
}

// TestStatelessRequestsAreCheckedAsTheSDKChecksThem: a stateless request
// whose header and _meta disagree, or that lacks either, or names a
// version not served, or a method the stateless protocol has not, is
// refused with the SDK's stateless server's code and HTTP status; a
// notification is taken (202); a GET without a session is not allowed; a
// server/discover is answered with the versions served and the server's
// capabilities, but the list changes no stateless client is told of.
func TestStatelessRequestsAreCheckedAsTheSDKChecksThem(t *testing.T) {
	upURL, sessions := sdkUpstream(t)
	_, url := serveFront(t, upURL, 4)
	discover := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + statelessMeta("2026-07-28") + `}}`
	for _, c := range []struct {
		name, body   string
		header       []string
		status, code int
	}{
		{"no header", discover, nil, 400, -32020},
		{"another header", discover, []string{"Mcp-Protocol-Version", "2025-11-25"}, 400, -32020},
		{"no _meta version", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, []string{"Mcp-Protocol-Version", "2026-07-28"}, 400, -32602},
		{"a later version", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + statelessMeta("2099-01-01") + `}}`, []string{"Mcp-Protocol-Version", "2099-01-01"}, 400, mcp.CodeUnsupportedProtocolVersion},
		{"ping", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + statelessMeta("2026-07-28") + `}}`, []string{"Mcp-Protocol-Version", "2026-07-28"}, 404, -32601},
		{"subscriptions/listen", `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{` + statelessMeta("2026-07-28") + `}}`, []string{"Mcp-Protocol-Version", "2026-07-28"}, 404, -32601},
		{"Mcp-Method not the method", discover, []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list"}, 400, -32020},
		{"a notification", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, []string{"Mcp-Protocol-Version", "2026-07-28"}, 202, 0},
	} {
		if status, _, code := send(t, "POST", url, c.body, c.header...); status != c.status || code != c.code {
			t.Errorf("%s: %d, JSON-RPC code %d; want %d, %d", c.name, status, code, c.status, c.code)
		}
	}
	if n := sessions.Load(); n != 0 {
		t.Errorf("refused requests opened %d upstream sessions", n)
	}
	get, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	get.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	get.Header.Set("Accept", "text/event-stream")
	if resp, err := http.DefaultClient.Do(get); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET without a session: %d, Allow %q; want 405, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}

	status, body := postStateless(t, t.Context(), url, discover)
	var answer struct {
		Result struct {
			SupportedVersions []string                   `json:"supportedVersions"`
			Capabilities      map[string]json.RawMessage `json:"capabilities"`
			Meta              map[string]json.RawMessage `json:"_meta"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(body), &answer)
	r := answer.Result
	if status != 200 || len(r.SupportedVersions) == 0 || r.SupportedVersions[0] != "2026-07-28" || r.Meta[metaServerInfo] == nil {
		t.Fatalf("discover: %d %s", status, body)
	}
	if r.Capabilities == nil || r.Capabilities["logging"] != nil {
		t.Errorf("discover %s: want capabilities, without logging", body)
	}
	// The upstream counts a session once initialized, which it may not
	// yet have heard of.
	if n := sessions.Load(); n > 1 {
		t.Errorf("discover opened %d upstream sessions, want the shared one", n)
	}
}

// postStateless POSTs body as a stateless client of 2026-07-28 and
// returns the status and body.
func postStateless(t *testing.T, ctx context.Context, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// blockServerEnv makes the test binary a stdio MCP server (TestMain)
// whose tool "block" writes "started" to its stderr, waits for its
// context to end, and writes "cancelled"; "hello" answers hello and its
// process id; "wait" writes "started", then answers what it reads from
// the FIFO fifoEnv names, once its writer closes it.
const (
	blockServerEnv = "MCPRUN_TEST_BLOCK_SERVER"
	fifoEnv        = "MCPRUN_TEST_FIFO"
)

func TestMain(m *testing.M) {
	if os.Getenv(blockServerEnv) == "1" {
		server := mcp.NewServer(&mcp.Implementation{Name: "block", Version: "1"}, nil)
		object := json.RawMessage(`{"type":"object"}`)
		server.AddTool(&mcp.Tool{Name: "block", InputSchema: object}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Stderr.WriteString("started\n")
			<-ctx.Done()
			os.Stderr.WriteString("cancelled\n")
			return nil, ctx.Err()
		})
		server.AddTool(&mcp.Tool{Name: "wait", InputSchema: object}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Stderr.WriteString("started\n")
			data, err := os.ReadFile(os.Getenv(fifoEnv))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited for " + string(data)}}}, err
		})
		server.AddTool(&mcp.Tool{Name: "hello", InputSchema: object}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + strconv.Itoa(os.Getpid())}}}, nil
		})
		server.Run(context.Background(), &mcp.StdioTransport{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStatelessClientLeavingCancelsItsCall: a stateless client that
// leaves while its call runs has the server told (the tool's context
// ends), and the shared upstream serves the next request, under the
// same ID the client used before.
func TestStatelessClientLeavingCancelsItsCall(t *testing.T) {
	_, url, next, _ := serveBlockServer(t)
	ctx, leave := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		postStateless(t, ctx, url, call("block"))
	}()
	next("started")
	leave()
	<-done
	next("cancelled")
	if status, body := postStateless(t, t.Context(), url, call("hello")); status != 200 || !strings.Contains(body, `"id":7`) || !strings.Contains(body, "hello") {
		t.Errorf("the next call: %d %s", status, body)
	}
}

// serveBlockServer serves the block server (blockServerEnv) behind a
// front, and returns the front, its URL, a check of the next line the
// server writes to its stderr, and its FIFO.
func serveBlockServer(t *testing.T) (*endpoint, string, func(want string), string) {
	stderr, w := io.Pipe()
	t.Cleanup(func() { stderr.Close() })
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), blockServerEnv+"=1", fifoEnv+"="+fifo)
	cmd.Stderr = w
	f, url := serveFrontTo(t, frontdoor.Options{}, func() reboundmcp.Upstream { return reboundmcp.Command(cmd) }, 4)
	lines := bufio.NewScanner(stderr)
	return f, url, func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("the server wrote %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}, fifo
}

// call is a stateless tools/call of tool, id 7.
func call(tool string) string {
	return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":{},` + statelessMeta("2026-07-28") + `}}`
}

// TestStatelessUpstreamRenewedAtSIGHUPFinishesItsCalls: after a SIGHUP
// (renewStateless) the next stateless request starts a new server, which
// holds the rules of now; a call the one before has in flight is not
// cut: it runs on, and is answered.
func TestStatelessUpstreamRenewedAtSIGHUPFinishesItsCalls(t *testing.T) {
	f, url, next, fifo := serveBlockServer(t)
	pid := regexp.MustCompile(`hello ([0-9]+)`)
	hello := func() string {
		t.Helper()
		status, body := postStateless(t, t.Context(), url, call("hello"))
		m := pid.FindStringSubmatch(body)
		if status != 200 || m == nil {
			t.Fatalf("hello: %d %s", status, body)
		}
		return m[1]
	}
	before := hello()
	var status int
	var body string
	done := make(chan struct{})
	go func() {
		defer close(done)
		status, body = postStateless(t, t.Context(), url, call("wait"))
	}()
	next("started")
	f.renewStateless()
	if after := hello(); after == before {
		t.Errorf("after the renewal, hello was answered by the server before it, %s", after)
	}
	if err := os.WriteFile(fifo, []byte("the go"), 0o600); err != nil {
		t.Fatal(err)
	}
	<-done
	if status != 200 || !strings.Contains(body, "waited for the go") {
		t.Errorf("the call in flight at the renewal: %d %s", status, body)
	}
}

// TestSessionPOSTIsReadByReboundsReader: in a session whose caller may
// use every tool, a body that is not JSON is answered -32700, and JSON
// that is no one message (a member given twice, a batch) -32600, before
// the SDK's transport, which would read them otherwise, sees them.
func TestSessionPOSTIsReadByReboundsReader(t *testing.T) {
	upURL, _ := sdkUpstream(t)
	_, url := serveFront(t, upURL, 4)
	status, id, _ := send(t, "POST", url, initialize)
	if status != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", status, id)
	}
	for _, c := range []struct {
		body string
		code int
	}{
		{`not json`, -32700},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","id":3}`, -32600},
		{`[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, -32600},
	} {
		if status, _, code := send(t, "POST", url, c.body, "Mcp-Session-Id", id); status != 400 || code != c.code {
			t.Errorf("%s: %d, JSON-RPC code %d; want 400, %d", c.body, status, code, c.code)
		}
	}
}

// TestDiscoverResultOffersNoListChanges: a server/discover's answer has
// the server's capabilities but the list changes and subscriptions a
// stateless client would hear of on a stream rebound does not serve, and
// the log messages it is never sent; its instructions; its name.
func TestDiscoverResultOffersNoListChanges(t *testing.T) {
	got := discoverResult(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"logging":{},"tools":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"completions":{}},"serverInfo":{"name":"s","version":"2"},"instructions":"be kind"}`))
	want := `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"2"}},"capabilities":{"completions":{},"resources":{},"tools":{}},"instructions":"be kind","supportedVersions":["2026-07-28","2025-11-25","2025-06-18","2025-03-26","2024-11-05"]}`
	if string(got) != want {
		t.Errorf("discover result\n%s\nwant\n%s", got, want)
	}
}
