package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
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

// cachingProvider is a test double of a provider's prompt cache, kept per
// key as providers keep it per organization: each key remembers the
// prefixes of the messages it was sent (at message granularity, from
// minCached tokens, a token being 4 bytes of a message's JSON, with no
// time to live: the runs below are short), and reads from its cache the
// longest prefix of a request it has seen. It answers as OpenAI does,
// the cached tokens in usage.prompt_tokens_details, and announces each
// key's requests left in the current minute, so that the pool knows its
// headroom. It stands in for the chaos server's --prompt-cache.
type cachingProvider struct {
	mu       sync.Mutex
	prefixes map[string]map[uint64]bool // by key: the hashes of the prefixes seen
	window   map[string][]time.Time     // by key: the requests of the last minute
	tally    map[string]*cacheTally
}

// cacheTally is what a key was sent, and read from its cache.
type cacheTally struct{ requests, input, cached int }

const (
	minCached    = 1024 // tokens: a shorter prefix is not cached
	keyPerMinute = 1000
)

func newCachingProvider() *cachingProvider {
	return &cachingProvider{prefixes: map[string]map[uint64]bool{}, window: map[string][]time.Time{}, tally: map[string]*cacheTally{}}
}

func (c *cachingProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	var body struct{ Messages []json.RawMessage }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return nil, err
	}
	r.Body.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.prefixes[key]
	if seen == nil {
		seen = map[uint64]bool{}
		c.prefixes[key] = seen
	}
	h, tokens, cached := fnv.New64a(), 0, 0
	for _, m := range body.Messages {
		h.Write(m)
		tokens += len(m) / 4
		if tokens >= minCached {
			if seen[h.Sum64()] {
				cached = tokens
			}
			seen[h.Sum64()] = true
		}
	}
	t := c.tally[key]
	if t == nil {
		t = &cacheTally{}
		c.tally[key] = t
	}
	t.requests, t.input, t.cached = t.requests+1, t.input+tokens, t.cached+cached
	now := time.Now()
	recent := c.window[key][:0]
	for _, at := range c.window[key] {
		if now.Sub(at) < time.Minute {
			recent = append(recent, at)
		}
	}
	c.window[key] = append(recent, now)
	hdr := http.Header{"Content-Type": {"application/json"},
		"X-Ratelimit-Limit-Requests":     {strconv.Itoa(keyPerMinute)},
		"X-Ratelimit-Remaining-Requests": {strconv.Itoa(max(keyPerMinute-len(c.window[key]), 0))},
		"X-Ratelimit-Reset-Requests":     {time.Minute.String()}}
	answer := fmt.Sprintf(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`, tokens, tokens+1, cached)
	return &http.Response{StatusCode: 200, Header: hdr, Body: io.NopCloser(strings.NewReader(answer)), Request: r}, nil
}

// cachedShare returns the share of the input read from the cache, over
// every key, and the most requests one key took.
func (c *cachingProvider) cachedShare() (share float64, most, requests int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	input, cached := 0, 0
	for _, t := range c.tally {
		input, cached, requests = input+t.input, cached+t.cached, requests+t.requests
		most = max(most, t.requests)
	}
	return float64(cached) / float64(input), most, requests
}

// agentsWork sends, through p, the turns of conversations agents'
// chats, interleaved as seed orders them, one every 100 ms: a system
// prompt of some 2 000 tokens that every chat shares, a first message of
// its own, and each turn the agent's answer and the next message.
func agentsWork(t *testing.T, p *Proxy, seed uint64, conversations, turns int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	system := `{"role":"system","content":` + strconv.Quote(strings.Repeat("You are a careful coding agent; read before you write. ", 150)) + `}`
	next := make([]int, conversations) // the turn each chat is at
	left := conversations * turns
	for left > 0 {
		c := r.IntN(conversations)
		if next[c] == turns {
			continue
		}
		next[c]++
		left--
		msgs := []string{system, `{"role":"user","content":` + strconv.Quote(fmt.Sprintf("Task %d: %s", c, strings.Repeat("fix the tests. ", 50))) + `}`}
		for i := 1; i < next[c]; i++ {
			msgs = append(msgs, `{"role":"assistant","content":`+strconv.Quote(fmt.Sprintf("Step %d of task %d: %s", i, c, strings.Repeat("edited a file. ", 80)))+`}`,
				`{"role":"user","content":`+strconv.Quote(strings.Repeat("go on. ", 30))+`}`)
		}
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`)))
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKeyPoolOfThreeKeepsThePromptCacheNearlyAsWarmAsOneKey(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const conversations, turns = 150, 8
	run := func(keysEnv, more string) (share float64, most, requests int) {
		var result [3]int
		synctest.Test(t, func(t *testing.T) {
			up := newCachingProvider()
			p := affinityProxy(t, up, keysEnv, more, Options{})
			agentsWork(t, p, seed, conversations, turns)
			share, result[0], result[1] = up.cachedShare()
		})
		return share, result[0], result[1]
	}
	one, _, _ := run(`["K1"]`, ``)
	three, most, requests := run(`["K1","K2","K3"]`, ``)
	none, _, _ := run(`["K1","K2","K3"]`, `,"affinity":"none"`)
	t.Logf("input read from the cache: one key %.3f; three keys %.3f, the busiest taking %d of %d requests; three keys by headroom alone %.3f",
		one, three, most, requests, none)
	if three < 0.9*one {
		t.Errorf("three keys read %.3f of their input from the cache, under 90%% of one key's %.3f", three, one)
	}
	if most > requests/2 {
		t.Errorf("a key took %d of %d requests, more than half", most, requests)
	}
	if none >= 0.9*one {
		t.Errorf("by headroom alone three keys read %.3f, not under 90%% of one key's %.3f: the measure tells nothing apart", none, one)
	}
}
