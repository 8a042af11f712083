package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/chromium"
)

// pageMCPRow is a row of the status page's MCP servers table, as a
// person reads it, and its chart as drawn.
type pageMCPRow struct {
	Name, State, P50, P99, LastFailures  string
	Restarts, Calls, Resends, MayHaveRun int64
	ChartTitle                           string
	ChartPoints                          map[string]int // the points of each line, by its class
	ChartTicks                           int
}

// readMCPPage is the script that reads the page's MCP servers and their
// charts.
const readMCPPage = `JSON.stringify([...document.querySelectorAll("#mcp-servers tbody tr[data-mcp-server]")].map(tr => {
	const fig = document.querySelector('#mcp-charts figure[data-mcp-server="' + tr.dataset.mcpServer + '"]');
	const svg = fig && fig.querySelector("svg");
	return {
		Name: tr.dataset.mcpServer,
		State: tr.querySelector(".state").textContent,
		Restarts: +tr.querySelector(".restarts").textContent,
		Calls: +tr.querySelector(".calls").textContent,
		Resends: +tr.querySelector(".resends").textContent,
		MayHaveRun: +tr.querySelector(".mayhaverun").textContent,
		P50: tr.querySelector(".p50").textContent,
		P99: tr.querySelector(".p99").textContent,
		LastFailures: tr.querySelector(".lastfailures").textContent,
		ChartTitle: svg ? svg.querySelector("title").textContent : "",
		ChartPoints: svg ? Object.fromEntries([...svg.querySelectorAll("polyline")].map(l => [l.getAttribute("class"), l.points.length])) : {},
		ChartTicks: svg ? svg.querySelectorAll("line.tick").length : 0,
	};
}))`

// TestStatusPageShowsAnMCPServerRestartedInChromium: rebound proxy with
// the everything server (over stdio, the proxy's child) in its config,
// called by the Go SDK's client of a tenant, its process killed once
// between calls: /ui/status has the server's row, its restart counted,
// its calls by how they ended, its latency and its chart's minutes, and
// the tenant's tool calls; the page, in headless Chromium, shows the
// row and its chart of the calls, drawn as the upstreams' are, and the
// tenant's tool calls, and none of the tools' arguments or answers.
func TestStatusPageShowsAnMCPServerRestartedInChromium(t *testing.T) {
	browserPath := chromium.Need(t)
	upstream, _ := startChaos(t, "--mode", "ok")
	v := fmt.Sprintf("TEST_PROXY_MCP_%d_", tenantsConfigs.Add(1))
	t.Setenv(v+"TEAM", "tok-status-team")
	url, logs, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, fmt.Sprintf(`"team": {"tokens_env": %q, "mcp": {"everything": ["*"]}}`, v+"TEAM")))
	cs, err := connectProxyMCP(t, url+"/mcp/everything", "tok-status-team")
	if err != nil {
		t.Fatalf("connect: %v (logs %s)", err, logs)
	}
	const secret = "an argument that stays private"
	echo := func(msg string) string {
		return textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}}))
	}
	for i := range 3 {
		echo(fmt.Sprintf("%s %d", secret, i))
	}
	first := everythingChildren(t)
	if len(first) != 1 {
		t.Fatalf("everything servers %v, want 1", first)
	}
	if err := syscall.Kill(first[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := echo(secret + " after"); !strings.Contains(got, "after") {
		t.Errorf("echo after the kill answered %q", got)
	}

	// The JSON.
	_, body := get(t, url+"/ui/status")
	var s struct {
		MCPServers []struct {
			Name, State              string
			Restarts, Calls, Resends int64
			MayHaveRun               int64                            `json:"may_have_run"`
			First                    int64                            `json:"answered_first"`
			AfterRetries             int64                            `json:"answered_after_retries"`
			GaveUp                   int64                            `json:"gave_up"`
			P50Ms                    *float64                         `json:"p50_ms"`
			P99Ms                    *float64                         `json:"p99_ms"`
			LastFailures             []json.RawMessage                `json:"last_failures"`
			PerMinute                []struct{ Calls, Retries int64 } `json:"per_minute"`
		} `json:"mcp_servers"`
		Tenants []struct {
			Name      string
			ToolCalls int64 `json:"tool_calls"`
		}
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/ui/status: %v: %s", err, body)
	}
	if len(s.MCPServers) != 1 {
		t.Fatalf("/ui/status has %d MCP servers, want everything's: %s", len(s.MCPServers), body)
	}
	m := s.MCPServers[0]
	var charted int64
	for _, minute := range m.PerMinute {
		charted += minute.Calls
	}
	// The calls are every request of the session (its initialize and
	// listings too): at least the four echoes, each answered.
	if m.Name != "everything" || m.Restarts != 1 || m.Calls < 4 || m.First+m.AfterRetries+m.GaveUp != m.Calls || m.GaveUp != 0 ||
		m.MayHaveRun != 0 || m.P50Ms == nil || *m.P99Ms < *m.P50Ms || len(m.PerMinute) != 30 || charted != m.Calls {
		t.Errorf("everything's row after 4 calls and a restart: %s", body)
	}
	if m.State != "up" && m.State != "restarting" {
		t.Errorf("state %q, want up or restarting", m.State)
	}
	if len(s.Tenants) != 1 || s.Tenants[0].ToolCalls != 4 {
		t.Errorf("the tenant's row after 4 tool calls: %s", body)
	}
	if strings.Contains(body, secret) {
		t.Errorf("/ui/status carries a tool's arguments or answer: %s", body)
	}

	// The page.
	ui := openStatusPage(t, browserPath, url, 900)
	shown := `(() => {
		const tr = document.querySelector('#mcp-servers tr[data-mcp-server="everything"]');
		return !!tr && +tr.querySelector(".restarts").textContent === 1 && +tr.querySelector(".calls").textContent >= 4;
	})()`
	if _, err := chromedp.Run(ui.step(10*time.Second), chromedp.Poll[bool](shown)); err != nil {
		t.Fatalf("the page shows no row of everything with its restart: %v", err)
	}
	js, err := chromedp.Run(ui.step(5*time.Second), chromedp.Evaluate[string](readMCPPage))
	if err != nil {
		t.Fatal(err)
	}
	var rows []pageMCPRow
	if err := json.Unmarshal([]byte(js), &rows); err != nil {
		t.Fatalf("reading the page: %v: %s", err, js)
	}
	if len(rows) != 1 {
		t.Fatalf("the page's MCP rows: %s", js)
	}
	r := rows[0]
	// The call after the kill may have been sent to the server that
	// died, and sent again (echo is read-only): the page's figures are
	// the JSON's.
	if r.Name != "everything" || (r.State != "up" && r.State != "restarting") || r.Calls != m.Calls || r.Resends != m.Resends || r.Resends > 1 || r.MayHaveRun != 0 ||
		!strings.HasSuffix(r.P50, " ms") || !strings.HasSuffix(r.P99, " ms") || r.LastFailures != "none" {
		t.Errorf("the page's row of everything: %+v", r)
	}
	if r.ChartPoints["calls"] != 30 || r.ChartPoints["retries"] != 30 || r.ChartPoints["gaveup"] != 30 || r.ChartTicks != 30 ||
		!strings.HasPrefix(r.ChartTitle, fmt.Sprintf("everything over the last 30 minutes: %d calls,", r.Calls)) {
		t.Errorf("everything's chart: %+v, want three lines of 30 points, 30 minute ticks and its %d calls", r, r.Calls)
	}
	toolCalls, err := chromedp.Run(ui.step(5*time.Second), chromedp.Evaluate[string](`document.querySelector('#tenants tr[data-tenant="team"] .toolcalls').textContent`))
	if err != nil || toolCalls != "4" {
		t.Errorf("the tenant's tool calls on the page: %q, %v; want 4", toolCalls, err)
	}
	text, err := chromedp.Run(ui.step(5*time.Second), chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, secret) {
		t.Errorf("the page shows a tool's arguments or answer:\n%s", text)
	}
	for _, u := range ui.requests() {
		if u != url+"/ui" && u != url+"/ui/status" && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s: not the proxy's status", u)
		}
	}
}
