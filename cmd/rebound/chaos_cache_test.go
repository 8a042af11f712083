package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// askAnthropic sends body to the chaos server at url with key, and
// returns the answer's usage.
func askAnthropic(t *testing.T, url, key, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ Usage map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer %d: %v", resp.StatusCode, err)
	}
	return m.Usage
}

func TestRunChaosPromptCacheReportsCachedTokens(t *testing.T) {
	// A system prompt of 5000 bytes and a message of 400: 1350 tokens.
	body := `{"model":"claude-x","max_tokens":10,"system":"` + strings.Repeat("s", 5000) +
		`","messages":[{"role":"user","content":"` + strings.Repeat("u", 400) + `"}]}`
	for _, c := range []struct {
		args          []string
		read, written float64
	}{
		{[]string{"--prompt-cache", "--cache-ttl", "1m"}, 1350, 0},
		{nil, 0, 0},
	} {
		url, stop := startChaos(t, append([]string{"--mode", "ok", "--profile", "anthropic"}, c.args...)...)
		first := askAnthropic(t, url, "sk-one", body)
		second := askAnthropic(t, url, "sk-one", body)
		if second["cache_read_input_tokens"] != c.read || second["cache_creation_input_tokens"] != c.written {
			t.Errorf("%q: the same prompt again: usage %v; want %v read, %v written", c.args, second, c.read, c.written)
		}
		if c.read > 0 && first["cache_creation_input_tokens"] != c.read {
			t.Errorf("%q: the first prompt: usage %v; want %v written", c.args, first, c.read)
		}
		resp, err := http.Get(url + "/chaos/stats")
		if err != nil {
			t.Fatal(err)
		}
		stats, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st struct {
			In    int `json:"input_tokens"`
			Read  int `json:"cache_read_tokens"`
			Write int `json:"cache_write_tokens"`
		}
		json.Unmarshal(stats, &st)
		if c.read > 0 && (st.In != 0 || st.Read != 1350 || st.Write != 1350) {
			t.Errorf("%q: stats %s", c.args, stats)
		}
		if c.read == 0 && (st.In != 2700 || strings.Contains(string(stats), "cache")) {
			t.Errorf("%q: stats %s", c.args, stats)
		}
		if code := stop(); code != 0 {
			t.Errorf("%q: exit %d", c.args, code)
		}
	}
}

func TestRunChaosPromptCacheUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompt-cache", "--cache-ttl", "0s"}, "--cache-ttl 0s is not a positive duration"},
		{[]string{"--prompt-cache", "--cache-ttl", "-5m"}, "--cache-ttl -5m0s is not a positive duration"},
		{[]string{"--prompt-cache", "--cache-ttl", "five"}, `invalid value "five" for flag -cache-ttl`},
		{[]string{"--prompt-cache", "--cache-ttl", "3000000h"}, `invalid value "3000000h" for flag -cache-ttl`},
		{[]string{"--cache-ttl", "1h"}, "--cache-ttl applies to --prompt-cache only"},
		{[]string{"--prompt-cache=false", "--cache-ttl", "1h"}, "--cache-ttl applies to --prompt-cache only"},
		{[]string{"--prompt-cache=maybe"}, `invalid boolean value "maybe" for -prompt-cache`},
		{[]string{"--mcp", "--prompt-cache"}, "--prompt-cache does not apply to --mcp"},
		{[]string{"--mcp", "--cache-ttl", "1m"}, "--cache-ttl does not apply to --mcp"},
	} {
		// A canceled context makes a server that wrongly starts stop at once.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var stdout, stderr bytes.Buffer
		code := runChaos(ctx, append([]string{"--addr", "127.0.0.1:0"}, tt.args...), &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || stdout.Len() != 0 || strings.Count(msg, "\n") != 1 ||
			!strings.HasPrefix(msg, "rebound chaos: ") || !strings.Contains(msg, tt.want) {
			t.Errorf("runChaos(%q) = %d, stdout %q, stderr %q; want 2 and one line containing %q",
				tt.args, code, stdout.String(), msg, tt.want)
		}
	}
	code, help, _ := runCmd("help", "chaos")
	for _, flag := range []string{"prompt-cache", "cache-ttl"} {
		if code != 0 || !strings.Contains(help, "\n  -"+flag) || !strings.Contains(help, "--"+flag) {
			t.Errorf("help chaos does not list or explain -%s", flag)
		}
	}
}
