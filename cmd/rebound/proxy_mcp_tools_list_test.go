package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestProxyTenantNeverSeesAToolNotGivenInAList: a tenant given echo alone
// never sees another tool in a tools/list answer, even when it sends a
// ping under the same request ID beside its tools/list: the proxy keeps
// the tools to cut a list to by request ID, and the ping's answer, first,
// takes them.
func TestProxyTenantNeverSeesAToolNotGivenInAList(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	v := fmt.Sprintf("TEST_PROXY_MCP_%d_", tenantsConfigs.Add(1))
	t.Setenv(v+"A", "tok-a")
	url, _, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, fmt.Sprintf(`"a": {"tokens_env": %q, "mcp": {"everything": ["echo"]}}`, v+"A")))
	endpoint := url + "/mcp/everything"
	rawPost := func(body, session string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", endpoint, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, string(data)
	}
	resp, _ := rawPost(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, "")
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	rawPost(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, session)
	const n = 200
	leaked := 0
	for k := range n {
		var wg sync.WaitGroup
		var list string
		wg.Go(func() {
			_, list = rawPost(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 100+k), session)
		})
		wg.Go(func() { rawPost(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 100+k), session) })
		wg.Wait()
		if strings.Contains(list, `"get-env"`) {
			if leaked++; leaked == 1 {
				t.Errorf("tenant a, given echo, was shown get-env: %.300s", list)
			}
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d tools/list answers showed tools not given", leaked, n)
	}
}
