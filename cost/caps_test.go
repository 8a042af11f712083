package cost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/tool"
)

// prices: $3 and $15 a million input and output tokens for "big", a
// tenth of that for "small".
var prices = cost.Table{"big": {InputPerMillion: 3, OutputPerMillion: 15}, "small": {InputPerMillion: 0.3, OutputPerMillion: 1.5}}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestLimit: holds count against the cap until they settle; what would
// pass it is refused with what it needed; concurrent holds never pass it.
func TestLimit(t *testing.T) {
	l := &cost.Limit{USD: 1}
	h1, err := l.Reserve(context.Background(), 0.6)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Reserve(context.Background(), 0.5)
	var ce *cost.CapError
	if !errors.As(err, &ce) || ce.Cap != "run" || ce.Limit != 1 || ce.Held != 0.6 || ce.Need != 0.5 {
		t.Fatalf("Reserve past the cap = %v", err)
	}
	h1.Settle(0.2)
	h1.Settle(5) // once only
	if !near(l.Spent(), 0.2) {
		t.Fatalf("spent %v; want 0.2", l.Spent())
	}
	if _, err := l.Reserve(context.Background(), 0.8); err != nil {
		t.Fatalf("0.2 spent, 0.8 more refused: %v", err)
	}
	if _, err := l.Reserve(context.Background(), 0); err == nil {
		t.Fatal("a hold of nothing at the cap was allowed")
	}
	many := &cost.Limit{USD: 10}
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0.0
	for range 64 {
		wg.Go(func() {
			for range 100 {
				if h, err := many.Reserve(context.Background(), 0.07); err == nil {
					mu.Lock()
					held += 0.07
					mu.Unlock()
					h.Settle(0.07)
				}
			}
		})
	}
	wg.Wait()
	if held > 10+1e-9 || many.Spent() > 10+1e-9 || many.Spent() < 9.9 {
		t.Fatalf("held %v, spent %v of a $10 cap", held, many.Spent())
	}
}

// TestCapsDo: a Do under caps reserves its estimate before each attempt,
// settles with what the attempt reports, and ends with a *CapError,
// nothing called, once the next attempt would pass the cap.
func TestCapsDo(t *testing.T) {
	run := &cost.Limit{USD: 0.05}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	// An attempt may cost 2000·3e-6 + 1000·15e-6 = $0.021; it reports
	// half its output.
	calls := 0
	call := func(ctx context.Context) (string, error) {
		calls++
		cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 500})
		return "ok", nil
	}
	for range 3 {
		if _, err := rebound.Do(ctx, rebound.Policy{}, call); err != nil {
			t.Fatalf("call %d: %v", calls+1, err)
		}
	}
	// $0.0405 spent: the next may cost $0.021 and is refused.
	_, err := rebound.Do(ctx, rebound.Policy{}, call)
	var ce *cost.CapError
	var gu *rebound.GiveUpError
	if !errors.As(err, &ce) || !errors.As(err, &gu) || gu.Reason != rebound.StopRefused || calls != 3 {
		t.Fatalf("4th call: %v after %d calls; want a *CapError, StopRefused, not called", err, calls)
	}
	if !near(run.Spent(), 3*0.0135) {
		t.Errorf("spent %v; want 3 × $0.0135", run.Spent())
	}
	// Without an estimate, Do is not admitted: its requests are
	// Transport's to count.
	if _, err := rebound.Do(cost.WithCaps(context.Background(), prices, run), rebound.Policy{}, call); err != nil {
		t.Errorf("a Do with no estimate: %v", err)
	}
}

// answer is an OpenAI chat completion that reports its usage.
func answer(in, out int) string {
	return fmt.Sprintf(`{"id":"c","object":"chat.completion","model":"big","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func jsonResponse(req *http.Request, status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}
}

// TestCapsTransport: a request through Transport reserves its estimate
// (its body's size, its max_tokens) and settles with the usage its
// response reports; a failure settles at nothing; one that would pass
// the cap is never sent.
func TestCapsTransport(t *testing.T) {
	sent := 0
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent++
		if sent == 2 {
			return jsonResponse(req, 400, `{"error":{"type":"invalid_request_error"}}`), nil
		}
		return jsonResponse(req, 200, answer(1000, 100)), nil
	})}
	run := &cost.Limit{USD: 0.015}
	ctx := cost.WithCaps(context.Background(), prices, run)
	body := `{"model":"big","max_tokens":400,"messages":[{"role":"user","content":"` + strings.Repeat("x", 3900) + `"}]}`
	post := func() (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", strings.NewReader(body))
		return tr.RoundTrip(req)
	}
	// The estimate: ~1000 input tokens ($0.003) and 400 output ($0.006):
	// $0.009 held; the answer reports 1000 and 100: $0.0045 spent.
	resp, err := post()
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if !near(run.Spent(), 0.0045) {
		t.Fatalf("spent %v after one answer; want $0.0045", run.Spent())
	}
	if resp, err = post(); err != nil || resp.StatusCode != 400 {
		t.Fatalf("second: %v, %v", resp, err)
	}
	resp.Body.Close()
	if !near(run.Spent(), 0.0045) {
		t.Fatalf("spent %v after a 400; want no more", run.Spent())
	}
	if resp, err = post(); err != nil || resp.StatusCode != 200 { // $0.0045 + $0.009 held: within $0.015
		t.Fatalf("third: %v, %v", resp, err)
	}
	resp.Body.Close() // unread: its usage unseen, it settles at its hold
	if hold := float64((len(body)+3)/4)*3e-6 + 400*15e-6; !near(run.Spent(), 0.0045+hold) {
		t.Fatalf("spent %v; want $0.0045 and a hold of $%v", run.Spent(), hold)
	}
	_, err = post() // $0.0135 + $0.009 > $0.015
	var ce *cost.CapError
	if !errors.As(err, &ce) || sent != 3 {
		t.Fatalf("fourth: %v after %d sent; want a *CapError and nothing sent", err, sent)
	}
}

// TestCapsTransportStream: a stream settles with its usage event; one cut
// before it settles with what it held.
func TestCapsTransportStream(t *testing.T) {
	events := `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}` + "\n\n" + "data: [DONE]\n\n"
	cut := false
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		body := events
		if cut {
			body = events[:strings.Index(events, "data: {\"choices\":[],")]
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	})}
	run := &cost.Limit{USD: 1}
	ctx := cost.WithCaps(context.Background(), prices, run)
	body := `{"model":"big","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	read := func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	read()
	if want := 100*3e-6 + 20*15e-6; !near(run.Spent(), want) {
		t.Fatalf("spent %v; want the usage event's $%v", run.Spent(), want)
	}
	cut = true
	before := run.Spent()
	read()
	held := float64((len(body)+3)/4)*3e-6 + 100*15e-6
	if !near(run.Spent()-before, held) {
		t.Fatalf("a stream without usage settled at %v; want its hold, %v", run.Spent()-before, held)
	}
}

// TestCapsStream: Stream's attempts are admitted like Do's.
func TestCapsStream(t *testing.T) {
	run := &cost.Limit{USD: 0.03}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	opened := 0
	open := func(ctx context.Context) iter.Seq2[string, error] {
		opened++
		return func(yield func(string, error) bool) {
			cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 1000})
			yield("token", nil)
		}
	}
	var errs []error
	for range 2 {
		for _, err := range rebound.Stream(ctx, rebound.Policy{}, open, nil) {
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	var ce *cost.CapError
	if opened != 1 || len(errs) != 1 || !errors.As(errs[0], &ce) || !near(run.Spent(), 0.021) {
		t.Fatalf("opened %d, errors %v, spent %v; want one stream at $0.021 and the second refused", opened, errs, run.Spent())
	}
}

// TestCapsFallback: a target whose attempt would pass the cap is skipped,
// and a cheaper one answers.
func TestCapsFallback(t *testing.T) {
	run := &cost.Limit{USD: 0.01}
	ctx := cost.WithCaps(context.Background(), prices, run)
	called := map[string]int{}
	target := func(name string) fallback.Target[string, string] {
		return fallback.Target[string, string]{Name: name, Policy: rebound.Policy{MaxAttempts: 1},
			Estimate: func(string) cost.Usage { return cost.Usage{InputTokens: 2000, OutputTokens: 1000} },
			Call: func(ctx context.Context, q string) (string, error) {
				called[name]++
				cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 500}) // under its estimate
				return name + " answered", nil
			}}
	}
	chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{target("big"), target("small")}}
	res, err := chain.Do(ctx, "q") // big may cost $0.021: past $0.01
	if err != nil || res.Target != "small" || called["big"] != 0 {
		t.Fatalf("Do = %+v, %v; big called %d times; want small's answer", res, err, called["big"])
	}
	if res.Trail[0].Skipped != "spend cap" || !near(run.Spent(), 0.00135) || res.Trail[1].Usage.OutputTokens != 500 {
		t.Errorf("trail %+v, spent %v; want big skipped for the cap, $0.00135 spent as small reported", res.Trail, run.Spent())
	}
}

// TestCapsHedge: a hedge reserves like any attempt, and the loser's
// reservation settles at what it reported.
func TestCapsHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := &cost.Limit{USD: 1}
		ctx := cost.WithEstimate(cost.WithCaps(t.Context(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
		var mu sync.Mutex
		n := 0
		fn := func(ctx context.Context) (string, error) {
			mu.Lock()
			n++
			first := n == 1
			mu.Unlock()
			if first {
				<-ctx.Done()
				cost.Report(ctx, cost.Usage{InputTokens: 2000}) // billed its input
				return "", ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
			cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 500})
			return "hedge", nil
		}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}
		if out, err := rebound.Do(ctx, p, fn); err != nil || out != "hedge" {
			t.Fatalf("Do = %q, %v", out, err)
		}
		if want := 0.006 + 0.0135; !near(run.Spent(), want) {
			t.Errorf("spent %v; want the loser's input and the hedge's answer, %v", run.Spent(), want)
		}
	})
}

// TestCapsTool: a tool call that reports its cost is held to the run's
// cap, and the model reads a refusal it can act on.
func TestCapsTool(t *testing.T) {
	var r tool.Registry
	calls := 0
	r.Register("summarise", tool.Spec{Kind: tool.ReadOnly}, func(ctx context.Context, c tool.Call) (string, error) {
		calls++
		cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 1000}) // it calls a model itself
		return "summary", nil
	})
	run := &cost.Limit{USD: 0.05}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	var last tool.Result
	for range 5 {
		if last = r.Execute(ctx, tool.Call{Name: "summarise"}); last.Failure != nil {
			break
		}
	}
	var ce *cost.CapError
	if calls != 2 || last.Failure == nil || last.Failure.Verdict != "refused" || !errors.As(last.Err, &ce) || !near(run.Spent(), 0.042) {
		t.Fatalf("%d calls, last %+v, spent %v; want 2 calls at $0.021 and the third refused", calls, last.Failure, run.Spent())
	}
}
