package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
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
		{`{"a":{"url":"http://x.test","keys_env":["K1","K2"],"affinity":"sticky"}}`, `config: upstreams.a.affinity: "sticky" is not "none"`},
		{`{"a":{"url":"http://x.test","keys_env":["K1","K2"],"affinity":"None"}}`, `config: upstreams.a.affinity: "None" is not "none"`},
		{`{"a":{"url":"http://x.test","key_env":"K1","affinity":"conversation"}}`, `config: upstreams.a.affinity: "conversation" is not "none"`},
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
// left of 100 requests (no rate-limit headers for ""), a 429 for a key out
// of quota, a 503 for one that is down.
type keyedProvider struct {
	mu   sync.Mutex
	left map[string]string // key → remaining requests, "quota" for none, "down"
	hits map[string]int
	last string // the key of the latest request
}

func (k *keyedProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	k.mu.Lock()
	k.hits[key]++
	k.last = key
	left := k.left[key]
	k.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	switch left {
	case "quota":
		body := `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`
		return &http.Response{StatusCode: 429, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	case "down":
		return &http.Response{StatusCode: 503, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	case "":
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
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

// The keys of the pools of the tests below, by variable.
var poolEnv = map[string]string{"K1": "sk-one", "K2": "sk-two", "K3": "sk-three"}

// affinityProxy returns a proxy in front of up with a pool of the keys
// named in keysEnv (by poolEnv), its upstream's config given more.
func affinityProxy(t *testing.T, up http.RoundTripper, keysEnv, more string, opts Options) *Proxy {
	t.Helper()
	getenv := func(k string) string { return poolEnv[k] }
	cfg, err := ParseConfig([]byte(`{"upstreams":{"pool":{"url":"http://provider.test","keys_env":`+keysEnv+more+`}},
		"routes":[{"model":"m","upstream":"pool"}]}`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	opts.Config, opts.Getenv, opts.Base = cfg, getenv, up
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// turn is the body of the n-th request (from 1) of a chat whose first
// message is first: the messages so far, each turn adding two.
func turn(first string, n int) string {
	msgs := []string{`{"role":"system","content":"You are a careful agent."}`, `{"role":"user","content":` + strconv.Quote(first) + `}`}
	for i := 1; i < n; i++ {
		msgs = append(msgs, `{"role":"assistant","content":"done `+strconv.Itoa(i)+`"}`, `{"role":"user","content":"go on"}`)
	}
	return `{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`
}

// send sends body through p and returns the key the provider saw last.
func send(t *testing.T, p *Proxy, up *keyedProvider, body string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions", strings.NewReader(body)))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.last
}

func TestKeyPoolKeepsEachConversationOnOneKeyAndSpreadsThem(t *testing.T) {
	// No rate-limit headers: the keys' limits leave every conversation
	// on its key (a key that announced 80 left would be held back by
	// its pace after 80 requests in a moment, and its conversations go
	// on to their next keys).
	up := &keyedProvider{left: map[string]string{}, hits: map[string]int{}}
	p := affinityProxy(t, up, `["K1","K2","K3"]`, ``, Options{})
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	const conversations, turns = 60, 4
	keyOf := map[int]string{}
	for n := 1; n <= turns; n++ {
		for _, c := range r.Perm(conversations) { // the conversations' turns come in any order
			key := send(t, p, up, turn(fmt.Sprintf("task %d", c), n))
			if k, ok := keyOf[c]; ok && k != key {
				t.Fatalf("conversation %d: turn %d went to %s, the turns before to %s", c, n, key, k)
			}
			keyOf[c] = key
		}
	}
	for key, n := range up.hits {
		if n > conversations*turns/2 {
			t.Errorf("%s took %d of %d requests (%v), want at most half", key, n, conversations*turns, up.hits)
		}
	}
}

func TestKeyPoolsOfTwoProxiesKeepAConversationOnTheSameKey(t *testing.T) {
	up := &keyedProvider{left: map[string]string{}, hits: map[string]int{}}
	// Two replicas, nothing shared, the keys listed in another order, and
	// held in other variables (as poolEnv holds them).
	a := affinityProxy(t, up, `["K1","K2","K3"]`, ``, Options{})
	poolEnv["Z1"], poolEnv["Z2"], poolEnv["Z3"] = "sk-one", "sk-two", "sk-three"
	defer func() { delete(poolEnv, "Z1"); delete(poolEnv, "Z2"); delete(poolEnv, "Z3") }()
	b := affinityProxy(t, up, `["Z3","Z1","Z2"]`, ``, Options{})
	for c := range 30 {
		for n := 1; n <= 2; n++ {
			body := turn(fmt.Sprintf("task %d", c), n)
			if x, y := send(t, a, up, body), send(t, b, up, body); x != y {
				t.Errorf("conversation %d, turn %d: %s on one proxy, %s on the other", c, n, x, y)
			}
		}
	}
}

func TestKeyPoolConversationLeavesAKeyLowOnHeadroomAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &keyedProvider{left: map[string]string{"sk-one": "90", "sk-two": "90", "sk-three": "90"}, hits: map[string]int{}}
		p := affinityProxy(t, up, `["K1","K2","K3"]`, ``, Options{})
		own := send(t, p, up, turn("task", 1))
		up.left[own] = "20" // its answer to turn 2 says so
		if key := send(t, p, up, turn("task", 2)); key != own {
			t.Fatalf("turn 2 went to %s, want %s, the conversation's key", key, own)
		}
		next := send(t, p, up, turn("task", 3))
		if next == own {
			t.Fatalf("turn 3 went to %s, whose headroom (0.2) is under half the best's (1, unknown)", own)
		}
		if key := send(t, p, up, turn("task", 4)); key != next {
			t.Errorf("turn 4 went to %s, want %s, where the conversation went on", key, next)
		}
		up.left[own] = "90"
		time.Sleep(time.Minute) // the quotas the headers announced reset
		if key := send(t, p, up, turn("task", 5)); key != own {
			t.Errorf("after the reset turn 5 went to %s, want it back on %s", key, own)
		}
	})
}

func TestKeyPoolConversationLeavesAKeyCoolingDownAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &keyedProvider{left: map[string]string{"sk-one": "90", "sk-two": "90", "sk-three": "90"}, hits: map[string]int{}}
		p := affinityProxy(t, up, `["K1","K2","K3"]`, ``, Options{})
		own := send(t, p, up, turn("task", 1))
		up.left[own] = "quota"
		next := send(t, p, up, turn("task", 2))
		if next == own {
			t.Fatalf("turn 2 answered by %s, out of quota", own)
		}
		hits := up.hits[own]
		if key := send(t, p, up, turn("task", 3)); key != next || up.hits[own] != hits {
			t.Errorf("turn 3 went to %s (%s tried %d times more), want %s alone while %s cools down", key, own, up.hits[own]-hits, next, own)
		}
		up.left[own] = "90"
		time.Sleep(DefaultQuotaCooldown)
		if key := send(t, p, up, turn("task", 4)); key != own {
			t.Errorf("after the cool-down turn 4 went to %s, want it back on %s", key, own)
		}
	})
}

func TestKeyPoolConversationLeavesAKeyWhoseBreakerIsOpenAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &keyedProvider{left: map[string]string{"sk-one": "90", "sk-two": "90", "sk-three": "90"}, hits: map[string]int{}}
		opts := Options{Breaker: func(key string) rebound.Breaker {
			return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Minute})
		}}
		var logs bytes.Buffer
		opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		p := affinityProxy(t, up, `["K1","K2","K3"]`, ``, opts)
		own := send(t, p, up, turn("task", 1))
		up.left[own] = "down" // its breaker opens on the first 503
		next := send(t, p, up, turn("task", 2))
		if next == own {
			t.Fatalf("turn 2 answered by %s, down", own)
		}
		up.left[own] = "90"
		hits := up.hits[own]
		logs.Reset()
		if key := send(t, p, up, turn("task", 3)); key != next || up.hits[own] != hits || strings.Contains(logs.String(), "upstreams_tried") {
			t.Errorf("turn 3 went to %s (%s tried %d times more), want %s alone, first, while %s's breaker is open: %s", key, own, up.hits[own]-hits, next, own, logs.String())
		}
		time.Sleep(time.Minute) // the breaker lets a probe through
		if key := send(t, p, up, turn("task", 4)); key != own {
			t.Errorf("after the breaker's cooldown turn 4 went to %s, want it back on %s", key, own)
		}
	})
}

func TestKeyPoolWithAffinityNoneSendsEachRequestByHeadroom(t *testing.T) {
	// No rate-limit headers: every key's headroom is alike, and the keys
	// take turns, as they did before conversations stayed on theirs.
	up := &keyedProvider{left: map[string]string{}, hits: map[string]int{}}
	p := affinityProxy(t, up, `["K1","K2","K3"]`, `,"affinity":"none"`, Options{})
	for n := 1; n <= 3; n++ {
		send(t, p, up, turn("task", n))
	}
	if up.hits["sk-one"] != 1 || up.hits["sk-two"] != 1 || up.hits["sk-three"] != 1 {
		t.Errorf("hits %v, want one on each key", up.hits)
	}
}

func TestKeyPoolDoesNotKeepARequestThatNamesItsConversationTwice(t *testing.T) {
	up := &keyedProvider{left: map[string]string{}, hits: map[string]int{}}
	p := affinityProxy(t, up, `["K1","K2","K3"]`, ``, Options{})
	body := `{"model":"m","prompt_cache_key":"a","prompt_cache_key":"b","messages":[{"role":"user","content":"hi"}]}`
	for range 3 {
		send(t, p, up, body)
	}
	if up.hits["sk-one"] != 1 || up.hits["sk-two"] != 1 || up.hits["sk-three"] != 1 {
		t.Errorf("hits %v, want one on each key: a request whose conversation is not clear goes by headroom", up.hits)
	}
	clear(up.hits)
	for range 3 {
		send(t, p, up, `{"model":"m","prompt_cache_key":"a","messages":[{"role":"user","content":"hi"}]}`)
	}
	if len(up.hits) != 1 {
		t.Errorf("hits %v, want all on one key for a conversation named once", up.hits)
	}
}
