package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestKeyPoolConfigErrorsSayWhatIsWrong(t *testing.T) {
	env := map[string]string{"K1": "sk-one", "K2": "sk-two", "SAME": "sk-one"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct{ upstreams, want string }{
		{`{"a/b":{"url":"http://x.test"}}`, `config: upstreams.a/b: the name "a/b" has a "/" or ":"`},
		{`{"a:b":{"url":"http://x.test"}}`, `config: upstreams.a:b: the name "a:b" has a "/" or ":"`},
		{`{"a":{"url":"http://x.test","key_env":"K1","keys_env":["K2"]}}`, `config: upstreams.a: key_env and keys_env both given`},
		{`{"a":{"url":"http://x.test","keys_env":[]}}`, `config: upstreams.a.keys_env: empty`},
		{`{"a":{"url":"http://x.test","keys_env":["K1","K1"]}}`, `config: upstreams.a.keys_env[1]: K1 is named twice`},
		{`{"a":{"url":"http://x.test","keys_env":["K1","UNSET"]}}`, `config: upstreams.a.keys_env[1]: environment variable UNSET is not set`},
		{`{"a":{"url":"http://x.test","keys_env":["K1","SAME"]}}`, `config: upstreams.a.keys_env[1]: SAME holds the same key as K1`},
		{`{"a":{"url":"http://x.test","keys_env":["K1","K 2"]}}`, `config: upstreams.a.keys_env[1]: "K 2" is not a variable name`},
	} {
		_, err := ParseConfig([]byte(`{"upstreams":`+c.upstreams+`}`), getenv)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line starting %q", c.upstreams, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-") {
			t.Errorf("%s: the error shows a key: %v", c.upstreams, err)
		}
	}
}

// keyedProvider answers each key as its quota says: a 200 announcing
// left of 100 requests, or a 429 for a key out of quota.
type keyedProvider struct {
	mu   sync.Mutex
	left map[string]string // key → remaining requests, "quota" for none
	hits map[string]int
}

func (k *keyedProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	k.mu.Lock()
	k.hits[key]++
	left := k.left[key]
	k.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	if left == "quota" {
		body := `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`
		return &http.Response{StatusCode: 429, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	h.Set("X-Ratelimit-Limit-Requests", "100")
	h.Set("X-Ratelimit-Remaining-Requests", left)
	h.Set("X-Ratelimit-Reset-Requests", "1m0s")
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

func poolProxy(t *testing.T, up *keyedProvider, logs io.Writer) *Proxy {
	t.Helper()
	env := map[string]string{"K1": "sk-one", "K2": "sk-two", "K3": "sk-three"}
	getenv := func(k string) string { return env[k] }
	cfg, err := ParseConfig([]byte(`{"upstreams":{"pool":{"url":"http://provider.test","keys_env":["K1","K2","K3"]}},
		"routes":[{"model":"m","upstream":"pool"}]}`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Config: cfg, Getenv: getenv, Base: up, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func chat(p *Proxy) int {
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m"}`)))
	return rec.Code
}

func TestKeyPoolSendsToTheKeyWithTheMostHeadroom(t *testing.T) {
	up := &keyedProvider{left: map[string]string{"sk-one": "5", "sk-two": "80", "sk-three": "40"}, hits: map[string]int{}}
	var logs bytes.Buffer
	p := poolProxy(t, up, &logs)
	// Unknown keys count as full, so the first three requests learn the
	// three keys, in order; then K2, with 80 left, takes the rest until
	// what it sent brings it under K3's 40.
	for range 5 {
		if code := chat(p); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if up.hits["sk-one"] != 1 || up.hits["sk-two"] != 3 || up.hits["sk-three"] != 1 {
		t.Errorf("hits K1 %d K2 %d K3 %d, want 1, 3, 1", up.hits["sk-one"], up.hits["sk-two"], up.hits["sk-three"])
	}
	rows := p.keyRows()
	if len(rows) != 3 {
		t.Fatalf("rows %+v, want 3", rows)
	}
	k2 := rows[1]
	if k2.Upstream != "pool" || k2.Key != "K2" || !k2.Known || k2.RequestsHeadroom != 0.8 || k2.Breaker != "closed" || !k2.CoolingUntil.IsZero() {
		t.Errorf("K2's row %+v, want pool, K2, known, 0.8 of its requests left, closed, not cooling", k2)
	}
	if strings.Contains(logs.String(), "sk-") || !strings.Contains(logs.String(), "pool/K2") {
		t.Errorf("the log shows a key, or not its variable: %s", logs.String())
	}
}

func TestKeyPoolSkipsAKeyOutOfQuota(t *testing.T) {
	up := &keyedProvider{left: map[string]string{"sk-one": "quota", "sk-two": "80", "sk-three": "90"}, hits: map[string]int{}}
	p := poolProxy(t, up, io.Discard)
	for range 4 {
		if code := chat(p); code != 200 {
			t.Fatalf("status %d, want 200 from another key", code)
		}
	}
	if up.hits["sk-one"] != 1 {
		t.Errorf("the key out of quota got %d requests, want 1: it cools down", up.hits["sk-one"])
	}
	rows := p.keyRows()
	if until := rows[0].CoolingUntil; time.Until(until) < 9*time.Minute {
		t.Errorf("K1 cooling until %v, want some 10 minutes from now", until)
	}
}
