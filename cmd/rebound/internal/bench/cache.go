package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/proxy"
)

// The cache scenario ("rebound bench --scenario cache"): agents'
// conversations, many turns each over a long system prompt, sent through
// a pool of API keys to the chaos server with its prompt cache on, which
// keeps each key's cache apart as providers do and fails a share of
// requests. A naive client takes the keys in turn and retries a failure
// on the next key; rebound proxy keeps each conversation on one key. Each
// arm is billed as the provider would bill it, at Claude Sonnet's prices.

// The cache scenario's workload.
const (
	cacheConversations = 32 // not a multiple of the keys: keys in turn do not keep a conversation on one by chance
	cacheTurns         = 8
	cacheKeys          = 3
	cacheFailRate      = 0.05
	cacheMaxAttempts   = 3
	// cacheSystemBytes is the shared system prompt: about 6 000 tokens
	// of the chaos server's (a token every 4 bytes).
	cacheSystemBytes = 24000
	// cacheUserBytes is each user message (a tool's output, say): about
	// 1 500 tokens.
	cacheUserBytes = 6000
	cacheMaxTokens = 200
	// cacheKeyRPM and cacheKeyTPM are each key's limits a minute.
	cacheKeyRPM = 100_000
	cacheKeyTPM = 1_000_000_000
)

// CachePrice is what the scenario bills at: Claude Sonnet's prices, in US
// dollars per million tokens.
var CachePrice = cost.Price{InputPerMillion: 3, OutputPerMillion: 15, CacheReadPerMillion: 0.3, CacheWritePerMillion: 3.75, CacheWrite1hPerMillion: 6}

// CacheReport is the JSON object "rebound bench --scenario cache --json"
// prints.
type CacheReport struct {
	Seed          uint64     `json:"seed"`
	Conversations int        `json:"conversations"`
	Turns         int        `json:"turns"`
	Keys          int        `json:"keys"`
	FailRate      float64    `json:"fail_rate"`
	Price         cost.Price `json:"price"`
	Rows          []CacheRow `json:"rows"`
}

// CacheRow is one client's run: what the provider served and billed.
type CacheRow struct {
	Client string `json:"client"`
	// Turns answered, of Conversations × Turns.
	Succeeded int `json:"succeeded"`
	// Requests the provider got, retries included; BusiestKeyShare the
	// share of them the busiest key took.
	Requests        int     `json:"requests"`
	BusiestKeyShare float64 `json:"busiest_key_share"`
	// The provider's tokens: input read afresh, read from its cache,
	// written into it, and output.
	InputTokens      int `json:"input_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens"`
	CacheWriteTokens int `json:"cache_write_tokens"`
	OutputTokens     int `json:"output_tokens"`
	// CachedShare is the share of input read from the cache.
	CachedShare float64 `json:"cached_share"`
	// SpentUSD is the provider's bill; CostPerSuccessUSD that over the
	// turns answered.
	SpentUSD          float64 `json:"spent_usd"`
	CostPerSuccessUSD float64 `json:"cost_per_success_usd"`
}

// RunCache runs the cache scenario: each client against a chaos server of
// its own on loopback, cold, with the same seed.
func RunCache(ctx context.Context, seed uint64, progress io.Writer) (*CacheReport, error) {
	r := &CacheReport{Seed: seed, Conversations: cacheConversations, Turns: cacheTurns, Keys: cacheKeys, FailRate: cacheFailRate, Price: CachePrice}
	arms := []struct {
		name string
		run  func(ctx context.Context, url string, keys []string) (int, error)
	}{
		{"naive, keys in turn", runNaive},
		{"rebound proxy, a pool", runProxy},
		{"one key (for scale)", func(ctx context.Context, url string, keys []string) (int, error) { return runNaive(ctx, url, keys[:1]) }},
	}
	fmt.Fprintf(progress, "rebound bench: cache scenario, seed %d\n", seed)
	for i, a := range arms {
		fmt.Fprintf(progress, "rebound bench: [%d/%d] %s…", i+1, len(arms), a.name)
		start := time.Now()
		row, err := runArm(ctx, seed, a.name, a.run)
		if err != nil {
			fmt.Fprintln(progress)
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		fmt.Fprintf(progress, " %v\n", time.Since(start).Round(time.Millisecond))
		r.Rows = append(r.Rows, row)
	}
	return r, nil
}

// runArm serves a cold chaos server on loopback, runs one client against
// it, and bills what it served.
func runArm(ctx context.Context, seed uint64, name string, run func(context.Context, string, []string) (int, error)) (CacheRow, error) {
	// Each key's limits are far beyond what the run asks, and announced
	// in the provider's headers as a provider does: they leave each key
	// headroom, so that a client is judged by where it sends a turn.
	srv, err := chaos.New(chaos.Config{Seed: seed, FailRate: cacheFailRate, Profile: chaos.ProfileAnthropic, PromptCache: true,
		KeyRPM: cacheKeyRPM, KeyTPM: cacheKeyTPM})
	if err != nil {
		return CacheRow{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return CacheRow{}, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	keys := make([]string, cacheKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-bench-key-%d", i+1)
	}
	ok, err := run(ctx, "http://"+ln.Addr().String(), keys)
	if err != nil {
		return CacheRow{}, err
	}
	st := srv.Stats()
	u := cost.Usage{InputTokens: int64(st.InputTokens), CacheReadTokens: int64(st.CacheReadTokens),
		CacheWriteTokens: int64(st.CacheWriteTokens), OutputTokens: int64(st.OutputTokens)}
	row := CacheRow{Client: name, Succeeded: ok, Requests: st.Requests, InputTokens: st.InputTokens,
		CacheReadTokens: st.CacheReadTokens, CacheWriteTokens: st.CacheWriteTokens, OutputTokens: st.OutputTokens,
		SpentUSD: CachePrice.Of(u)}
	for _, k := range st.Keys {
		if st.Requests > 0 {
			row.BusiestKeyShare = max(row.BusiestKeyShare, float64(k.Requests)/float64(st.Requests))
		}
	}
	if all := u.InputAll(); all > 0 {
		row.CachedShare = float64(u.CacheReadTokens) / float64(all)
	}
	if ok > 0 {
		row.CostPerSuccessUSD = row.SpentUSD / float64(ok)
	}
	return row, nil
}

// conversations runs the workload: turn t of every conversation, then
// turn t+1, as agents that run side by side do; send makes one turn's
// request of conversation c and returns the answer's text, or false if
// the turn failed (the conversation goes on without its answer).
func conversations(ctx context.Context, send func(ctx context.Context, c int, body []byte) (string, bool, error)) (int, error) {
	system := strings.Repeat("You are a careful agent. ", cacheSystemBytes/25)
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	history := make([][]message, cacheConversations)
	ok := 0
	for t := range cacheTurns {
		for c := range cacheConversations {
			user := fmt.Sprintf("Conversation %d, turn %d: ", c, t)
			user += strings.Repeat("go on with the task. ", (cacheUserBytes-len(user))/21)
			history[c] = append(history[c], message{"user", user})
			body, err := json.Marshal(map[string]any{"model": "claude-bench", "max_tokens": cacheMaxTokens, "system": system, "messages": history[c]})
			if err != nil {
				return ok, err
			}
			text, answered, err := send(ctx, c, body)
			if err != nil {
				return ok, err
			}
			if answered {
				ok++
				history[c] = append(history[c], message{"assistant", text})
			} else {
				history[c] = history[c][:len(history[c])-1]
			}
		}
	}
	return ok, nil
}

// runNaive is the client most agents have: the keys taken in turn, a
// failure retried at once on the next key, three attempts in all.
func runNaive(ctx context.Context, url string, keys []string) (int, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	next := 0
	return conversations(ctx, func(ctx context.Context, _ int, body []byte) (string, bool, error) {
		for range cacheMaxAttempts {
			key := keys[next%len(keys)]
			next++
			text, status, err := post(ctx, client, url+"/v1/messages", key, body)
			if err != nil {
				return "", false, err
			}
			if status == http.StatusOK {
				return text, true, nil
			}
		}
		return "", false, nil
	})
}

// runProxy sends the conversations through rebound proxy, in front of the
// chaos server with the keys as a pool, its retries' waits shortened so
// that the run takes seconds.
func runProxy(ctx context.Context, url string, keys []string) (int, error) {
	env := map[string]string{}
	var names []string
	for i, k := range keys {
		name := fmt.Sprintf("BENCH_KEY_%d", i+1)
		env[name] = k
		names = append(names, `"`+name+`"`)
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"chaos":{"url":"`+url+`","dialect":"anthropic","keys_env":[`+strings.Join(names, ",")+`]}}}`), getenv)
	if err != nil {
		return 0, err
	}
	p, err := proxy.New(proxy.Options{Config: cfg, Getenv: getenv, Logger: slog.New(slog.DiscardHandler),
		Policy: &rebound.Policy{MaxAttempts: cacheMaxAttempts, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}})
	if err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	front := "http://" + ln.Addr().String() + "/v1/messages"
	return conversations(ctx, func(ctx context.Context, _ int, body []byte) (string, bool, error) {
		text, status, err := post(ctx, client, front, "", body)
		return text, status == http.StatusOK, err
	})
}

// post sends one Messages request with key (none: the proxy's own) and
// returns its answer's text and status.
func post(ctx context.Context, client *http.Client, url, key string, body []byte) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var m struct {
		Content []struct{ Text string } `json:"content"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &m); err != nil || len(m.Content) == 0 {
			return "", 0, fmt.Errorf("an answer that is not a Messages answer: %.80s", b)
		}
		return m.Content[0].Text, resp.StatusCode, nil
	}
	return "", resp.StatusCode, nil
}

// WriteTable prints the report as a table, the cost per success first.
func (r *CacheReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%d conversations of %d turns over a system prompt of about %d tokens, through %d keys of a provider that caches prompts per key and fails %.0f%% of requests (seed %d), billed at $%g/$%g per million input/output tokens, $%g a cache read, $%g a cache write:\n\n",
		r.Conversations, r.Turns, cacheSystemBytes/4, r.Keys, 100*r.FailRate, r.Seed, r.Price.InputPerMillion, r.Price.OutputPerMillion, r.Price.CacheReadPerMillion, r.Price.CacheWritePerMillion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tanswered\trequests\tbusiest key\tread from cache\twritten to cache\tspent\tper success\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%.0f%%\t%.1f%%\t%d\t$%.4f\t$%.5f\t\n", row.Client, row.Succeeded, r.Conversations*r.Turns, row.Requests,
			100*row.BusiestKeyShare, 100*row.CachedShare, row.CacheWriteTokens, row.SpentUSD, row.CostPerSuccessUSD)
	}
	tw.Flush()
}
