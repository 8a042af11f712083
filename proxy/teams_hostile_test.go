package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// teamsConfig is a proxy of two tenants, "zero" capped at $0 and "pool"
// limited to model m, in front of url as upstream "u" with a pool of the
// keys in keysEnv.
func teamsConfig(t *testing.T, url, keysEnv string, env map[string]string) *proxy.FileConfig {
	return config(t, `{"upstreams":{"u":{"url":"`+url+`","keys_env":`+keysEnv+`}},
		"prices":{"m":{"input_per_million":1,"output_per_million":1}},
		"tenants":{"zero":{"tokens_env":"ZERO_TOKENS","spend_cap_usd":0,"models":["m"]},
			"pool":{"tokens_env":"POOL_TOKENS","models":["m"]}}}`, env)
}

// TestTenantTokenOpensNoStatusPageAndIsNoAdminToken: off this machine a
// tenant's token opens neither /ui nor /metrics, the admin token calls no
// model, and a tenant's token that is also the admin token stops the proxy at
// start, naming the tenant and not the token.
func TestTenantTokenOpensNoStatusPageAndIsNoAdminToken(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	env := map[string]string{"K1": "sk-pool-one-2f1e", "ZERO_TOKENS": "tok-zero-77a1", "POOL_TOKENS": "tok-pool-91b3"}
	const admin = "adm-teams-c0ffee"
	o := proxy.Options{Config: teamsConfig(t, up.URL, `["K1"]`, env), Getenv: func(k string) string { return env[k] },
		AdminToken: admin, Metrics: http.NotFoundHandler()}
	front, _ := serveProxy(t, o)
	for _, path := range []string{"/ui", "/ui/status", "/metrics"} {
		for _, tok := range []string{env["ZERO_TOKENS"], env["POOL_TOKENS"]} {
			resp, body := do(t, "GET", front.URL+path, "", "X-Forwarded-For", "203.0.113.9", "Authorization", "Bearer "+tok)
			if resp.StatusCode != 401 || strings.Contains(body, tok) {
				t.Errorf("%s off loopback with a tenant's token: %d %s, want 401 echoing no token", path, resp.StatusCode, body)
			}
		}
	}

	if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, "Authorization", "Bearer "+admin); resp.StatusCode != 401 || strings.Contains(body, admin) {
		t.Errorf("a model call with the admin token, in a proxy of tenants: %d %s, want 401", resp.StatusCode, body)
	}

	env["POOL_TOKENS"] = "tok-pool-91b3, " + admin
	o.Config = teamsConfig(t, up.URL, `["K1"]`, env)
	_, err := proxy.New(o)
	if err == nil || !strings.Contains(err.Error(), `admin token (--admin-token-env) is also a client token (tenant "pool"'s)`) || strings.Contains(err.Error(), admin) {
		t.Errorf("a tenant's token that is the admin token: %v", err)
	}
}

// TestTenantCappedAtZeroIsRefusedEverythingAndShownCapped: a cap of $0
// refuses every request before sending, in the dialect's quota error that
// SDKs do not retry, and the status page shows it as a cap of $0, not as
// no cap.
func TestTenantCappedAtZeroIsRefusedEverythingAndShownCapped(t *testing.T) {
	up, seen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	env := map[string]string{"K1": "sk-pool-one-2f1e", "ZERO_TOKENS": "tok-zero-77a1", "POOL_TOKENS": "tok-pool-91b3"}
	front, _ := serveProxy(t, proxy.Options{Config: teamsConfig(t, up.URL, `["K1"]`, env), Getenv: func(k string) string { return env[k] }})
	for range 3 {
		resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","max_tokens":1,"messages":[]}`, "Authorization", "Bearer tok-zero-77a1")
		if resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(body, "insufficient_quota") {
			t.Fatalf("a request of a tenant capped at $0: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}
	if n := hits(seen); n != 0 {
		t.Errorf("%d requests of a tenant capped at $0 reached the upstream", n)
	}
	_, body := do(t, "GET", front.URL+"/ui/status", "")
	var status struct {
		Tenants []struct {
			Name    string   `json:"name"`
			CapUSD  *float64 `json:"cap_usd"`
			Refused int64    `json:"refused"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatal(err)
	}
	for _, tn := range status.Tenants {
		switch {
		case tn.Name == "zero" && (tn.CapUSD == nil || *tn.CapUSD != 0 || tn.Refused != 3):
			t.Errorf("the tenant capped at $0 on the status page: cap %v, refused %d; want a cap of 0 and 3", tn.CapUSD, tn.Refused)
		case tn.Name == "pool" && tn.CapUSD != nil:
			t.Errorf("the uncapped tenant on the status page has a cap of %v", *tn.CapUSD)
		}
	}
}

// TestTenantModelsHoldOnAPooledUpstream: a tenant limited to a model that
// a pool of keys serves is sent to the pool for it, and refused any other
// model before a key is used.
func TestTenantModelsHoldOnAPooledUpstream(t *testing.T) {
	var byKey [2]atomic.Int64
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.HasSuffix(r.Header.Get("Authorization"), "one") {
			byKey[0].Add(1)
		} else {
			byKey[1].Add(1)
		}
		w.Write([]byte(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	})
	env := map[string]string{"K1": "sk-pool-one", "K2": "sk-pool-two", "ZERO_TOKENS": "tok-zero-77a1", "POOL_TOKENS": "tok-pool-91b3"}
	front, logs := serveProxy(t, proxy.Options{Config: teamsConfig(t, up.URL, `["K1","K2"]`, env), Getenv: func(k string) string { return env[k] }})
	for _, c := range []struct {
		model string
		want  int
	}{{"m", 200}, {"m", 200}, {"other", 403}} {
		resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"`+c.model+`","messages":[]}`, "Authorization", "Bearer tok-pool-91b3")
		if resp.StatusCode != c.want {
			t.Errorf("model %s: %d %s, want %d", c.model, resp.StatusCode, body, c.want)
		}
	}
	if n := byKey[0].Load() + byKey[1].Load(); n != 2 {
		t.Errorf("%d requests reached the pool's keys, want the 2 of model m", n)
	}
	for _, secret := range []string{"sk-pool-one", "sk-pool-two", "tok-pool-91b3"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a key or token in the log (%.9s…)", secret)
		}
	}
}

// TestOnlyKeyOutOfQuotaIsHeardOutOncePerRequest: a pool whose only key is
// out of quota is the chain's last resort (fallback.Chain.LastResort):
// each request is sent to it once, never retried by the proxy, and the
// client gets the provider's own quota error, scrubbed of the key; the
// key is not made to cool down, since nothing else could answer.
func TestOnlyKeyOutOfQuotaIsHeardOutOncePerRequest(t *testing.T) {
	const key = "sk-only-key-5e0a1c"
	up, seen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		w.Write([]byte(`{"error":{"message":"You exceeded your current quota on ` + key + `","type":"insufficient_quota","code":"insufficient_quota"}}`))
	})
	env := map[string]string{"K1": key, "ZERO_TOKENS": "tok-zero-77a1", "POOL_TOKENS": "tok-pool-91b3"}
	front, logs := serveProxy(t, proxy.Options{Config: teamsConfig(t, up.URL, `["K1"]`, env), Getenv: func(k string) string { return env[k] }})
	for i := range 3 {
		resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, "Authorization", "Bearer tok-pool-91b3")
		if resp.StatusCode != 429 || !strings.Contains(body, "insufficient_quota") || strings.Contains(body, key) {
			t.Errorf("request %d to a pool whose only key is out of quota: %d %s", i+1, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != "false" {
			t.Errorf("request %d: x-should-retry %q, want false: the SDKs would spend two more requests on the dead key", i+1, got)
		}
	}
	if n := hits(seen); n != 3 {
		t.Errorf("the only key, out of quota, was sent %d requests for 3, want one each", n)
	}
	_, status := do(t, "GET", front.URL+"/ui/status", "")
	if !strings.Contains(status, `"key":"K1"`) || !strings.Contains(status, `"quota_exhausted":3`) || strings.Contains(status, key) {
		t.Errorf("the status page does not show the only key's three quota failures: %s", status)
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("the key is in the log")
	}
}

// hits is how many requests s's upstream received.
func hits(s *seen) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// TestTenantModelListHoldsHoweverTheModelIsNamed: a tenant allowed only
// model m is refused every request that may run another, whichever way
// it names it: a body with a byte-order mark or in UTF-16 and no
// Content-Type (Python's json reads it), a deployment or a tuned model in
// the path (the provider serves the path's), a batch whose requests name
// another, a batch over a file or a stored prompt (any model); the
// upstream sees none of them. Requests that run no model, and the same
// unseen calls for a tenant that allows them, pass.
func TestTenantModelListHoldsHoweverTheModelIsNamed(t *testing.T) {
	up, seen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	env := map[string]string{"K": "sk-up-0b1d", "POOL_TOKENS": "tok-pool-91b3", "OPEN_TOKENS": "tok-open-42aa"}
	c := config(t, `{"upstreams":{"u":{"url":"`+up.URL+`","key_env":"K"}},
		"tenants":{"pool":{"tokens_env":"POOL_TOKENS","models":["m"]},
			"open":{"tokens_env":"OPEN_TOKENS","models":["m"],"allow_unseen_models":true}}}`, env)
	front, _ := serveProxy(t, proxy.Options{Config: c, Getenv: func(k string) string { return env[k] }})
	utf16 := func(s string) string {
		b := []byte{0xff, 0xfe}
		for _, c := range []byte(s) {
			b = append(b, c, 0)
		}
		return string(b)
	}
	refused := []struct{ path, contentType, body string }{
		{"/v1/chat/completions", "", "\xef\xbb\xbf" + `{"model":"big","messages":[]}`},
		{"/v1/chat/completions", "", utf16(`{"model":"big","messages":[]}`)},
		{"/v1/chat/completions", "", utf16(`{"model":"big","messages":[]}`)[2:]},
		{"/openai/deployments/big/chat/completions", "application/json", `{"model":"m","messages":[]}`},
		{"/v1beta/tunedModels/big-tuned:generateContent", "application/json", `{"contents":[]}`},
		{"/v1beta/models/big:generateContent", "application/json", `{"contents":[]}`},
		{"/model/big/converse", "application/json", `{"messages":[]}`},
		{"/v1/messages/batches", "application/json", `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[]}},{"custom_id":"b","params":{"model":"big","max_tokens":1,"messages":[]}}]}`},
		{"/v1/messages/batches", "application/json", `{"requests":[{"custom_id":"a","params":{"max_tokens":1,"messages":[]}}]}`},
		{"/v1/batches", "application/json", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`},
		{"/v1/responses", "application/json", `{"prompt":{"id":"pmpt_1"},"input":"hi"}`},
		{"/v1/chat/completions", "application/json", `{"model":"m","Model":"big","messages":[]}`},
	}
	for _, r := range refused {
		resp, body := do(t, "POST", front.URL+r.path, r.body, "Content-Type", r.contentType, "Authorization", "Bearer tok-pool-91b3")
		if resp.StatusCode != 400 && resp.StatusCode != 403 {
			t.Errorf("POST %s %.50q: %d %s, want a 400 or a 403", r.path, r.body, resp.StatusCode, body)
		}
	}
	seen.mu.Lock()
	n := seen.hits
	seen.mu.Unlock()
	if n != 0 {
		t.Fatalf("the upstream was sent %d requests of a model outside the list", n)
	}
	passed := []struct{ method, path, contentType, body string }{
		{"POST", "/v1/chat/completions", "application/json", `{"model":"m","messages":[]}`},
		{"POST", "/v1/messages/batches", "application/json", `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[]}}]}`},
		{"POST", "/openai/deployments/m/chat/completions", "application/json", `{"messages":[]}`},
		{"POST", "/v1/files", "multipart/form-data; boundary=b", "--b--\r\n"},
		{"GET", "/v1/models", "", ""},
		{"DELETE", "/v1/files/file-1", "", ""},
	}
	for _, r := range passed {
		if resp, body := do(t, r.method, front.URL+r.path, r.body, "Content-Type", r.contentType, "Authorization", "Bearer tok-pool-91b3"); resp.StatusCode != 200 {
			t.Errorf("%s %s %.50q: %d %s, want 200", r.method, r.path, r.body, resp.StatusCode, body)
		}
	}
	for _, r := range refused[9:11] {
		if resp, body := do(t, "POST", front.URL+r.path, r.body, "Content-Type", r.contentType, "Authorization", "Bearer tok-open-42aa"); resp.StatusCode != 200 {
			t.Errorf("POST %s for a tenant that allows unseen models: %d %s, want 200", r.path, resp.StatusCode, body)
		}
	}
}
