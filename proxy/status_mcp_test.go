package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
	"github.com/rebound-go/rebound/proxy"
)

// mcpRow is an MCP server's row of /ui/status.
type mcpRow struct {
	Name, State          string
	Restarts, Calls      int64
	Resends              int64
	MayHaveRun           int64 `json:"may_have_run"`
	AnsweredFirst        int64 `json:"answered_first"`
	AnsweredAfterRetries int64 `json:"answered_after_retries"`
	GaveUp               int64 `json:"gave_up"`
	Attempts             int64
	P50Ms                *float64 `json:"p50_ms"`
	P99Ms                *float64 `json:"p99_ms"`
	LastFailures         []struct {
		Time                  time.Time
		Method, Tool, Outcome string
		Attempts              int
	} `json:"last_failures"`
	PerMinute []struct {
		Minute         time.Time
		Calls, Retries int64
		GaveUp         int64 `json:"gave_up"`
	} `json:"per_minute"`
}

// readMCPRows reads the MCP servers' rows of p's status, in order, and
// the raw JSON.
func readMCPRows(t *testing.T, p http.Handler) ([]mcpRow, string) {
	t.Helper()
	_, raw := readStatus(t, p)
	var s struct {
		MCPServers []mcpRow `json:"mcp_servers"`
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	return s.MCPServers, raw
}

// recorder is an Observer as reboundotel's is: it records events and
// operations, and gives each call an Observer of its own.
type recorder struct {
	mu     sync.Mutex
	events []rebound.Event
	ops    []observe.Operation
	calls  atomic.Int64
}

func (r *recorder) Observe(e rebound.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) RecordOperation(_ context.Context, op observe.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *recorder) ObserveCall(context.Context) rebound.Observer { r.calls.Add(1); return r }

// mcpProxy returns a proxy of the MCP servers of js (mcp_servers' JSON,
// without braces) with base as its Observer, and the Observer each
// server's handler was given, by name.
func mcpProxy(t *testing.T, js string, base rebound.Observer) (*proxy.Proxy, map[string]rebound.Observer) {
	t.Helper()
	given := map[string]rebound.Observer{}
	c := config(t, `{"upstreams": {"default": {"url": "http://127.0.0.1:1"}}, "mcp_servers": {`+js+`}}`, nil)
	p, err := proxy.New(proxy.Options{Config: c, Observer: base, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler),
		MCPServer: func(name string, _ proxy.MCPServerConfig, _ *slog.Logger, obs rebound.Observer) (http.Handler, error) {
			given[name] = obs
			return callerEcho{name, &atomic.Int64{}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return p, given
}

// record hands op to obs as reboundmcp does.
func record(t *testing.T, obs rebound.Observer, op observe.Operation) {
	t.Helper()
	r, ok := obs.(observe.OperationRecorder)
	if !ok {
		t.Fatalf("the Observer an MCP server's handler is given (%T) records no Operation", obs)
	}
	op.Kind = "mcp"
	r.RecordOperation(context.Background(), op)
}

// TestStatusCountsAnMCPServersCallsByHowTheyEnded: each call an MCP
// server's handler reports is counted in the server's row: resent when
// it took more than one attempt, answered at once, after retries, or
// given up (a call cut short that may have run, one the client
// cancelled); its latency; the last failures with their method, tool,
// outcome and attempts (never a cancelled call); the chart's minute.
// What the handler reports still reaches the proxy's Observer, which
// still gives each call its own. The calls leave the window after five
// minutes; the last failures stay.
func TestStatusCountsAnMCPServersCallsByHowTheyEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &recorder{}
		p, given := mcpProxy(t, `"files": {"command": ["a"]}, "web": {"url": "http://127.0.0.1:9/mcp"}`, base)
		obs := given["files"]
		ops := []observe.Operation{
			{Method: "tools/call", Tool: "read", Duration: 20 * time.Millisecond, Attempts: 1},
			{Method: "tools/call", Tool: "read", Duration: 20 * time.Millisecond, Attempts: 2},
			{Method: "tools/call", Tool: "read", Duration: 20 * time.Millisecond, Attempts: 1, ErrorType: "tool_error"},
			{Method: "tools/call", Tool: "write", Duration: 20 * time.Millisecond, Attempts: 1, ErrorType: "may_have_run"},
			{Method: "tools/list", Duration: 20 * time.Millisecond, Attempts: 3, ErrorType: "gave_up"},
			{Method: "tools/call", Tool: "read", Duration: 20 * time.Millisecond, Attempts: 1, ErrorType: "cancelled"},
			{Method: "tools/call", Tool: "other", Attempts: 0, ErrorType: "server_down"},
		}
		for _, op := range ops {
			record(t, obs, op)
		}
		rows, raw := readMCPRows(t, p)
		if len(rows) != 2 || rows[0].Name != "files" || rows[1].Name != "web" {
			t.Fatalf("rows: %s", raw)
		}
		f := rows[0]
		if f.State != "up" || f.Restarts != 0 || f.Calls != 7 || f.Resends != 2 || f.MayHaveRun != 1 || f.Attempts != 9 ||
			f.AnsweredFirst != 2 || f.AnsweredAfterRetries != 1 || f.GaveUp != 4 {
			t.Errorf("files after %d calls: %+v", len(ops), f)
		}
		// Every call that reached the server took 20 ms: the slot of
		// the histogram that holds it is within 19% above.
		if f.P50Ms == nil || *f.P50Ms < 20 || *f.P50Ms > 20*1.19 || *f.P99Ms != *f.P50Ms {
			t.Errorf("latency: p50 %v p99 %v ms, want both within 19%% above 20", f.P50Ms, f.P99Ms)
		}
		var got []string
		for _, l := range f.LastFailures {
			got = append(got, fmt.Sprintf("%s %s %s %d", l.Method, l.Tool, l.Outcome, l.Attempts))
			if l.Time.IsZero() {
				t.Errorf("failure without a time: %+v", l)
			}
		}
		want := []string{"tools/call other server_down 0", "tools/list  gave_up 3", "tools/call write may_have_run 1", "tools/call read tool_error 1"}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("last failures %q, want %q", got, want)
		}
		if n := len(f.PerMinute); n != 30 {
			t.Fatalf("%d minutes in the chart, want 30", n)
		}
		if m := f.PerMinute[29]; m.Calls != 7 || m.Retries != 3 || m.GaveUp != 4 {
			t.Errorf("the current minute: %+v, want 7 calls, 3 attempts after a first, 4 given up", m)
		}
		if w := rows[1]; w.Calls != 0 || w.State != "up" || w.P50Ms != nil || len(w.LastFailures) != 0 || len(w.PerMinute) != 30 {
			t.Errorf("web, which had no call: %+v", w)
		}
		if len(base.ops) != len(ops) || base.ops[3].ErrorType != "may_have_run" || base.ops[1].Attempts != 2 {
			t.Errorf("the proxy's Observer recorded %+v", base.ops)
		}
		co, ok := obs.(rebound.CallObserver)
		if !ok || co.ObserveCall(t.Context()) != rebound.Observer(base) {
			t.Errorf("the handler's Observer (%T) gives a call no Observer of the proxy's", obs)
		}

		time.Sleep(6 * time.Minute)
		rows, raw = readMCPRows(t, p)
		if f := rows[0]; f.Calls != 0 || f.Resends != 0 || f.P50Ms != nil || len(f.LastFailures) != 4 {
			t.Errorf("6 minutes on, the calls should have left the window and the failures stayed: %s", raw)
		}
	})
}

// TestStatusShowsAnMCPServerRestartingAndStopped: an MCP server's state
// follows its handler's events: restarting after a restart until a call
// is answered, or for 10 s after the start was due; stopped while its
// respawn breaker is open, restarting once the cool-down is over, up
// once the breaker closes. Its restarts add up since the proxy started,
// and the events reach the proxy's Observer too.
func TestStatusShowsAnMCPServerRestartingAndStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &recorder{}
		p, given := mcpProxy(t, `"files": {"command": ["a"]}`, base)
		obs := given["files"]
		state := func(want string, restarts int64) {
			t.Helper()
			rows, raw := readMCPRows(t, p)
			if rows[0].State != want || rows[0].Restarts != restarts {
				t.Errorf("state %q, %d restarts, want %q and %d: %s", rows[0].State, rows[0].Restarts, want, restarts, raw)
			}
		}
		state("up", 0)
		obs.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:files", Attempt: 2, Wait: 0})
		state("restarting", 1)
		record(t, obs, observe.Operation{Method: "tools/call", Tool: "read", Attempts: 2})
		state("up", 1)

		obs.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:files", Attempt: 3, Wait: time.Second})
		time.Sleep(10 * time.Second)
		state("restarting", 2) // 9 s after the start was due
		record(t, obs, observe.Operation{Method: "tools/call", Tool: "read", Attempts: 1, ErrorType: "may_have_run"})
		state("restarting", 2) // no answer: nothing says it is up
		time.Sleep(time.Second)
		state("up", 2)

		obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:files", State: "open", Wait: 30 * time.Second})
		state("stopped", 2)
		record(t, obs, observe.Operation{Method: "tools/call", Tool: "read", Attempts: 1}) // answered before it opened
		time.Sleep(29 * time.Second)
		state("stopped", 2)
		time.Sleep(time.Second)
		state("restarting", 2)
		obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:files", State: "half-open"})
		state("restarting", 2)
		obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:files", State: "closed"})
		state("up", 2)
		if len(base.events) != 5 || base.events[0].Type != rebound.EventRestart || base.events[4].State != "closed" {
			t.Errorf("the proxy's Observer saw %+v", base.events)
		}
	})
}

// TestStatusKeepsAtMostTenFailuresOfAnMCPServer: a server's last
// failures are the latest ten, newest first, each tool by the label the
// handler gave it.
func TestStatusKeepsAtMostTenFailuresOfAnMCPServer(t *testing.T) {
	p, given := mcpProxy(t, `"files": {"command": ["a"]}`, nil)
	for i := range 25 {
		record(t, given["files"], observe.Operation{Method: "tools/call", Tool: fmt.Sprintf("t%d", i), Attempts: 1, ErrorType: "gave_up"})
	}
	rows, raw := readMCPRows(t, p)
	if f := rows[0].LastFailures; len(f) != 10 || f[0].Tool != "t24" || f[9].Tool != "t15" {
		t.Errorf("last failures: %s", raw)
	}
}

// TestReloadKeepsAnMCPServersFiguresAndDropsARemovedOnes: a reload that
// keeps a server unchanged keeps its row's counts; a changed server
// starts again from none, and a removed one's row goes.
func TestReloadKeepsAnMCPServersFiguresAndDropsARemovedOnes(t *testing.T) {
	p, given := mcpProxy(t, `"keep": {"command": ["a"]}, "change": {"command": ["a"]}, "drop": {"command": ["a"]}`, nil)
	for _, name := range []string{"keep", "change", "drop"} {
		record(t, given[name], observe.Operation{Method: "tools/call", Tool: "x", Attempts: 1})
		given[name].Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:" + name, Attempt: 2})
	}
	q, err := p.Reload(config(t, `{"upstreams": {"default": {"url": "http://127.0.0.1:1"}}, "mcp_servers": {
		"keep": {"command": ["a"]}, "change": {"command": ["b"]}, "add": {"command": ["a"]}}}`, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rows, raw := readMCPRows(t, q)
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Name] = r.Calls*10 + r.Restarts
	}
	if len(rows) != 3 || got["keep"] != 11 || got["change"] != 0 || got["add"] != 0 {
		t.Errorf("after the reload: %s", raw)
	}
}

// TestTenantRowCountsToolCallsItPassedOn: a tenant's row counts the
// tools/calls the proxy passed on to an MCP server, beside its model
// calls: not a tools/list, nor a call its rate limit refused.
func TestTenantRowCountsToolCallsItPassedOn(t *testing.T) {
	env := map[string]string{"A_TOKENS": "tok-a", "B_TOKENS": "tok-b"}
	c := config(t, `{
		"upstreams": {"default": {"url": "http://127.0.0.1:1"}},
		"mcp_servers": {"m": {"command": ["node"]}},
		"tenants": {
			"a": {"tokens_env": "A_TOKENS", "mcp": {"m": ["*"]}},
			"b": {"tokens_env": "B_TOKENS", "requests_per_minute": 1, "mcp": {"m": ["*"]}}}}`, env)
	p, err := proxy.New(proxy.Options{Config: c, Getenv: mapEnv(env), AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler),
		MCPServer: func(name string, _ proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
			return callerEcho{name, &atomic.Int64{}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, r := range []struct{ token, body string }{{"tok-a", call}, {"tok-a", call}, {"tok-a", list}, {"tok-b", call}, {"tok-b", call}} {
		do(t, "POST", front.URL+"/mcp/m", r.body, "Authorization", "Bearer "+r.token)
	}
	_, raw := readStatus(t, p)
	var s struct {
		Tenants []struct {
			Name      string
			Requests  int64
			ToolCalls int64 `json:"tool_calls"`
		}
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, tn := range s.Tenants {
		got[tn.Name] = tn.ToolCalls
		if tn.Requests != 0 {
			t.Errorf("tenant %s: %d model requests, want none", tn.Name, tn.Requests)
		}
	}
	if got["a"] != 2 || got["b"] != 1 {
		t.Errorf("tool calls %v, want a 2 and b 1 (its second refused): %s", got, raw)
	}
}
