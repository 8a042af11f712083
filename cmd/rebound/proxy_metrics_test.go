package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxyMetricsBoundedUnderMadeUpModels: a client naming thousands of
// models the upstream does not serve leaves /metrics small, labels every
// one of them "other", and the real model's series keeps its name rather
// than falling into OpenTelemetry's overflow series.
func TestProxyMetricsBoundedUnderMadeUpModels(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(b), `"gpt-x"`) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"model not found","type":"invalid_request_error","code":"model_not_found"}}`)
			return
		}
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	url, logs, stop := startProxy(t, "--upstream", up.URL)

	// More made-up names than the OpenTelemetry SDK keeps series of one
	// instrument (2000), sent by a few clients at once.
	const madeUp, clients = 2100, 4
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < madeUp; i += clients {
				if resp, _ := post(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":"made-up-%d"}`, i)); resp.StatusCode != http.StatusNotFound {
					t.Errorf("made-up-%d: status %d, want the upstream's 404", i, resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	for range 3 {
		if resp, body := post(t, url+"/v1/chat/completions", chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("gpt-x: %d %q", resp.StatusCode, body)
		}
	}

	resp, metrics := get(t, url+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	t.Logf("/metrics after %d made-up models: %d bytes", madeUp, len(metrics))
	var targets []string
	for _, m := range regexp.MustCompile(`rebound_target="([^"]*)"`).FindAllStringSubmatch(metrics, -1) {
		if !slices.Contains(targets, m[1]) {
			targets = append(targets, m[1])
		}
	}
	slices.Sort(targets)
	if want := []string{"upstream:gpt-x", "upstream:other"}; !slices.Equal(targets, want) {
		t.Errorf("%d rebound_target values (%q...), want %q", len(targets), targets[:min(len(targets), 3)], want)
	}
	if !regexp.MustCompile(`(?m)^rebound_attempts_total\{[^}]*rebound_outcome="success"[^}]*rebound_target="upstream:gpt-x"[^}]*\} [1-9]`).MatchString(metrics) {
		t.Errorf("no successful attempt counted under gpt-x's own label")
	}
	for _, m := range regexp.MustCompile(`gen_ai_request_model="([^"]*)"`).FindAllStringSubmatch(metrics, -1) {
		if m[1] != "gpt-x" && m[1] != "other" {
			t.Fatalf("a series under the made-up model %q", m[1])
		}
	}
	if strings.Contains(metrics, "otel_metric_overflow") {
		t.Errorf("/metrics has overflow series")
	}
	// Two targets, a dozen instruments, each with a few outcomes and
	// kinds, and histograms of 15 buckets: some 10 KiB. The made-up names
	// took megabytes.
	if len(metrics) > 64<<10 {
		t.Errorf("/metrics is %d bytes, want at most 64 KiB", len(metrics))
	}
	stop() // an answer leaves before its access line: the lines are all written once the server has shut down
	if !strings.Contains(logs.String(), `"model":"made-up-2099"`) {
		t.Errorf("the access log lost the made-up model's own name")
	}
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestProxyMetricsCountTokensByType: /metrics counts the tokens each
// answer reported in rebound_tokens_total, by gen_ai_token_type: input
// (all of it), output, and of the input cache_read and cache_write, as
// the access line counts them.
func TestProxyMetricsCountTokensByType(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],
			"usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":90000,"output_tokens":200}}`)
	}))
	t.Cleanup(up.Close)
	url, logs, stop := startProxy(t, "--upstream", up.URL)
	for range 2 {
		if resp, body := post(t, url+"/v1/messages", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	// An answer leaves before its tokens are counted, with its access
	// line: /metrics is read again until it has them all, or for 10 s.
	want := map[string]float64{"input": 2 * 92010, "output": 2 * 200, "cache_read": 2 * 90000, "cache_write": 2 * 2000}
	var (
		got     map[string]float64
		metrics string
	)
	for deadline := time.Now().Add(10 * time.Second); !maps.Equal(got, want) && time.Now().Before(deadline); {
		_, metrics = get(t, url+"/metrics")
		got = map[string]float64{}
		for _, m := range regexp.MustCompile(`(?m)^rebound_tokens_total\{([^}]*)\} (\S+)$`).FindAllStringSubmatch(metrics, -1) {
			typ := regexp.MustCompile(`gen_ai_token_type="([^"]*)"`).FindStringSubmatch(m[1])
			if typ == nil || !strings.Contains(m[1], `rebound_target="upstream:`) {
				t.Fatalf("a series of tokens without its type or target: %s", m[0])
			}
			var v float64
			fmt.Sscan(m[2], &v)
			got[typ[1]] += v
		}
	}
	// And under the GenAI conventions' names, a request an operation,
	// recorded just after its tokens.
	chat := `gen_ai_operation_name="chat",gen_ai_provider_name="anthropic",gen_ai_request_model="claude-x"`
	operations := func() float64 {
		if !strings.Contains(metrics, "gen_ai_client_operation_duration_seconds_count{") {
			return 0
		}
		return metricLine(t, metrics, "gen_ai_client_operation_duration_seconds_count{"+chat+"}")
	}
	for deadline := time.Now().Add(10 * time.Second); operations() != 2 && time.Now().Before(deadline); {
		_, metrics = get(t, url+"/metrics")
	}
	stop()
	if !maps.Equal(got, want) {
		t.Errorf("rebound_tokens_total by type %v, want %v\n%s\n%s", got, want, metrics, logs)
	}
	if n := operations(); n != 2 {
		t.Errorf("gen_ai_client_operation_duration_seconds_count %v, want 2", n)
	}
	for typ, n := range map[string]float64{"input": 2 * 92010, "output": 2 * 200} {
		if got := metricLine(t, metrics, "gen_ai_client_token_usage_sum{"+chat+`,gen_ai_token_type="`+typ+`"}`); got != n {
			t.Errorf("gen_ai_client_token_usage_sum of %s tokens %v, want %v", typ, got, n)
		}
	}
}
