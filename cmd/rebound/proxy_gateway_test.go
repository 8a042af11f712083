package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/npmserver"
)

// gatewayStep is a line the gateway client's script printed: the step,
// and what came of it.
type gatewayStep struct {
	Step, Tenant, Server, Tool string
	Tools                      []string
	Text, Content, Error       string
	Code, Status               any // a JSON-RPC code, or the HTTP status the SDK put there
	Tokens, Progress           int
	N, Samplings               int
	Connected, Answered        bool
}

// The gateway scenario's bounds: the long read-only call runs for
// gatewayLongSeconds, one step a second, which leaves the test seconds
// to kill the server after its first progress; a call the kill leaves
// with no answer fails after gatewayCallTimeout, and the script is
// killed after gatewayScriptTimeout.
const (
	gatewayLongSeconds   = 10
	gatewayCallTimeout   = 2 * time.Minute
	gatewayScriptTimeout = 4 * time.Minute
)

// everythingOf returns the pids of the everything servers that are the
// proxy's children: those of its MCP sessions. A killed one, not yet
// waited for, has no command line and is not among them.
func everythingOf(t *testing.T, proxy int) []int {
	t.Helper()
	var pids []int
	for _, pid := range children(t, proxy) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "server-everything") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestProxyGatewayServesOpenAIAndMCPSDKsAtOneAddress: one rebound proxy
// process, with the chaos server for model calls and two MCP servers (the
// everything server over stdio, the proxy's child, as "everything", and
// over streamable HTTP as "web"), serves the official OpenAI Node SDK and
// the official TypeScript MCP client at one address, for two tenants:
// each one's model call is answered; each lists only the tools it was
// given, calls one, is refused another with an error naming it, and finds
// no server it was not given. The stdio server killed during a read-only
// call, the call is sent again and answered; killed during a
// side-effecting one, the call is not sent again (the server asked for
// the one sampling of its one run) and the caller is told it may have
// taken effect; the session goes on. The access log has a line of one
// schema for each model call and each MCP request.
func TestProxyGatewayServesOpenAIAndMCPSDKsAtOneAddress(t *testing.T) {
	proc := startGatewayProxy(t)
	steps, killed := runGatewayClient(t, proc)
	checkGatewayTenants(t, steps)

	// The server killed mid-call.
	if len(killed) != 2 {
		t.Errorf("killed %v: want the server of a read-only call and of a side-effecting one", killed)
	}
	if ro := steps["read-only"]; len(ro) != 1 || ro[0].Error != "" || !strings.Contains(ro[0].Text, "Long running operation completed") {
		t.Errorf("the read-only call the kill cut short: %+v, want it answered", ro)
	}
	want := `MCP server everything died while tool "trigger-sampling-request" ran: the call may have taken effect, and was not sent again`
	if se := steps["side-effects"]; len(se) != 1 || !strings.Contains(se[0].Error, want) || se[0].Code != float64(-32603) {
		t.Errorf("the side-effecting call the kill cut short: %+v, want JSON-RPC error -32603 with %q", se, want)
	}
	if n := len(steps["sampling"]); n != 1 {
		t.Errorf("the side-effecting tool asked for %d samplings: it ran %d times, want once", n, n)
	}
	if after := steps["after"]; len(after) != 1 || !strings.Contains(after[0].Text, "still here") || after[0].Samplings != 1 {
		t.Errorf("the session after both kills: %+v, want echo answered and still one sampling", after)
	}

	checkGatewayLog(t, proc.lines())
	if t.Failed() {
		t.Logf("the proxy's log:\n%s", strings.Join(proc.lines(), "\n"))
	}
}

// The tools of the gateway scenario's tenants: a's of the stdio server
// "everything", b's of the streamable HTTP one, "web". Each is refused a
// tool of its server it was not given (a get-env, b echo).
var gatewayTools = map[string][]string{
	"a": {"echo", "trigger-long-running-operation", "trigger-sampling-request"},
	"b": {"get-sum"},
}

// startGatewayProxy starts the gateway scenario's proxy, a process of its
// own, and its servers: the chaos server for models, and the everything
// server over stdio (the proxy's child) and over streamable HTTP.
func startGatewayProxy(t *testing.T) *loggedProxy {
	t.Helper()
	web := npmserver.EverythingHTTP(t)
	stdio := npmserver.EverythingStdio(t)
	command, _ := json.Marshal(append([]string{stdio.Path}, stdio.Args[1:]...))
	upstream, _ := startChaos(t, "--profile", "openai", "--mode", "ok")
	v := fmt.Sprintf("TEST_PROXY_GATEWAY_%d_", tenantsConfigs.Add(1))
	t.Setenv(v+"A", "tok-gateway-a")
	t.Setenv(v+"B", "tok-gateway-b")
	a, _ := json.Marshal(gatewayTools["a"])
	b, _ := json.Marshal(gatewayTools["b"])
	file := filepath.Join(t.TempDir(), "config.json")
	config := fmt.Sprintf(`{
	"upstreams": {"default": {"url": %q}},
	"mcp_servers": {
		"everything": {"command": %s, "tools": {"echo": "read-only",
			"trigger-long-running-operation": "read-only", "trigger-sampling-request": "side-effects"}},
		"web": {"url": %q}},
	"tenants": {
		"a": {"tokens_env": %q, "mcp": {"everything": %s}},
		"b": {"tokens_env": %q, "mcp": {"web": %s}}}}`,
		upstream, command, web.URL, v+"A", a, v+"B", b)
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return startLoggedProxy(t, "--config", file)
}

// runGatewayClient runs the gateway client's script against proc and
// returns its steps by name, having killed the stdio server at each call
// the script says is in flight; killed are the pids it killed.
func runGatewayClient(t *testing.T, proc *loggedProxy) (steps map[string][]gatewayStep, killed []int) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "gateway_client.js"))
	if err != nil {
		t.Fatal(err)
	}
	node := npmserver.NodeScriptWith(t, []npmserver.Package{npmserver.OpenAI, npmserver.MCPSDK}, script,
		"BASE_URL="+proc.url, "TOKEN_A=tok-gateway-a", "TOKEN_B=tok-gateway-b",
		fmt.Sprint("LONG_SECONDS=", gatewayLongSeconds), fmt.Sprint("CALL_TIMEOUT_MS=", gatewayCallTimeout.Milliseconds()))
	var nodeErr lockedBuffer
	node.Stderr = &nodeErr
	stdout, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(gatewayScriptTimeout, func() { node.Process.Kill() })
	t.Cleanup(func() { watchdog.Stop(); node.Process.Kill(); node.Wait() }) // if the test stops early

	kill := func(why string) {
		t.Helper()
		pids := everythingOf(t, proc.cmd.Process.Pid)
		if len(pids) != 1 || slices.Contains(killed, pids[0]) {
			t.Errorf("%s: everything servers %v (killed before: %v), want one new one, the session's", why, pids, killed)
			return
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Errorf("%s: %v", why, err)
		}
		killed = append(killed, pids[0])
	}
	steps = map[string][]gatewayStep{}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		var s gatewayStep
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil {
			t.Errorf("the script printed %q: %v", lines.Text(), err)
			continue
		}
		t.Logf("script: %s", lines.Text())
		steps[s.Step] = append(steps[s.Step], s)
		switch {
		case s.Step == "progress":
			kill("a read-only call in flight")
		case s.Step == "sampling" && s.N == 1:
			kill("a side-effecting call in flight")
		}
	}
	if err := node.Wait(); err != nil {
		t.Fatalf("the script: %v (stderr %s; proxy log %s)", err, nodeErr.String(), strings.Join(proc.lines(), "\n"))
	}
	return steps, killed
}

// checkGatewayTenants checks what each tenant got: its model call
// answered; its tools/list its tools alone; its call of one of them
// answered; its call of another refused with a JSON-RPC error naming it;
// a server it was not given, 404.
func checkGatewayTenants(t *testing.T, steps map[string][]gatewayStep) {
	t.Helper()
	for _, tenant := range []string{"a", "b"} {
		i := slices.IndexFunc(steps["model"], func(s gatewayStep) bool { return s.Tenant == tenant })
		if i < 0 || steps["model"][i].Content == "" || steps["model"][i].Error != "" {
			t.Errorf("tenant %s's model call: %+v, want an answer", tenant, steps["model"])
		}
	}
	for _, l := range steps["list"] {
		if !slices.Equal(l.Tools, gatewayTools[l.Tenant]) {
			t.Errorf("tenant %s's tools/list of %s: %v, want %v", l.Tenant, l.Server, l.Tools, gatewayTools[l.Tenant])
		}
	}
	wantCalls := map[string]string{"a": "from a", "b": "5"}
	for _, c := range steps["call"] {
		if !strings.Contains(c.Text, wantCalls[c.Tenant]) {
			t.Errorf("tenant %s's call of %s answered %q, want %q in it", c.Tenant, c.Tool, c.Text, wantCalls[c.Tenant])
		}
	}
	for _, r := range steps["refused"] {
		if want := fmt.Sprintf("tool %q is not one this caller may use", r.Tool); r.Answered || !strings.Contains(r.Error, want) || r.Code != float64(-32602) {
			t.Errorf("tenant %s's call of %s, a tool not given: %+v, want JSON-RPC error -32602 with %q", r.Tenant, r.Tool, r, want)
		}
	}
	for _, e := range steps["elsewhere"] {
		if e.Connected || e.Code != float64(404) {
			t.Errorf("tenant %s at %s, a server not given: %+v, want 404", e.Tenant, e.Server, e)
		}
	}
	for _, step := range []string{"list", "call", "refused", "elsewhere"} {
		if len(steps[step]) != 2 {
			t.Errorf("%s steps %+v, want one for each tenant", step, steps[step])
		}
	}
}

// checkGatewayLog checks the proxy's log of the gateway scenario: one
// access line per model call and per MCP request, of one schema
// ("msg":"request", kind, method, attempts and latency_ms, a number), the
// model calls' naming their tenants, the read-only call cut short by a
// kill answered in a second attempt by a restarted server, the
// side-effecting one in one attempt, and the two restarts.
func checkGatewayLog(t *testing.T, log []string) {
	t.Helper()
	kinds := map[string]int{}
	var tenants []string // of the model calls
	restarts := 0
	var readOnly, sideEffects map[string]any
	for _, l := range log {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil {
			continue
		}
		if line["msg"] == "mcp.restart" {
			restarts++
		}
		if line["msg"] != "request" {
			continue
		}
		kind, _ := line["kind"].(string)
		kinds[kind]++
		for _, key := range []string{"time", "level", "method", "attempts", "latency_ms"} {
			if _, ok := line[key]; !ok {
				t.Errorf("a %s access line without %s: %s", kind, key, l)
			}
		}
		if ms, ok := line["latency_ms"].(float64); !ok || ms < 0 {
			t.Errorf("latency_ms is not a number of milliseconds: %s", l)
		}
		if _, ok := line["attempts"].(float64); !ok {
			t.Errorf("attempts is not a number: %s", l)
		}
		if kind == "llm" {
			tenants = append(tenants, fmt.Sprint(line["tenant"]))
		}
		switch line["tool"] {
		case "trigger-long-running-operation":
			readOnly = line
		case "trigger-sampling-request":
			sideEffects = line
		}
	}
	if kinds["llm"] != 2 || kinds["mcp"] == 0 || len(kinds) != 2 {
		t.Errorf("access lines by kind %v, want 2 llm (the model calls) and some mcp, no other", kinds)
	}
	if slices.Sort(tenants); !slices.Equal(tenants, []string{"a", "b"}) {
		t.Errorf("the model calls' lines name tenants %v, want a and b", tenants)
	}
	if readOnly["restarted"] != true || readOnly["outcome"] != "ok" || readOnly["attempts"] != float64(2) {
		t.Errorf("the read-only call's line %v: want restarted, ok in 2 attempts", readOnly)
	}
	if sideEffects["outcome"] != "may_have_run" || sideEffects["attempts"] != float64(1) {
		t.Errorf("the side-effecting call's line %v: want may_have_run in 1 attempt", sideEffects)
	}
	if restarts != 2 {
		t.Errorf("%d mcp.restart lines, want 2 (one for each kill)", restarts)
	}
}
