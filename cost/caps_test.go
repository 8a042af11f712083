package cost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// holdOf is what Transport reserves for body at maxOut output tokens on "big".
func holdOf(body string, maxOut int) float64 {
	return float64((len(body)+3)/4)*3e-6 + float64(maxOut)*15e-6
}

func post(t *testing.T, ctx context.Context, tr http.RoundTripper, path, body string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test"+path, strings.NewReader(body))
	return tr.RoundTrip(req)
}

// TestCapsCountAnthropicCacheTokens: Anthropic's usage leaves cache reads
// and writes out of input_tokens; a call settles with them counted, so
// that prompt caching (the usual agent set-up) cannot spend past the cap.
func TestCapsCountAnthropicCacheTokens(t *testing.T) {
	const msg = `{"id":"m","type":"message","role":"assistant","model":"big","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":30000,"output_tokens":50}}`
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return jsonResponse(req, 200, msg), nil
	})}
	run := &cost.Limit{USD: 0.50}
	ctx := cost.WithCaps(context.Background(), prices, run)
	body := `{"model":"big","max_tokens":100,"system":[{"type":"text","text":"` + strings.Repeat("s", 120000) + `","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	calls := 0
	for range 200 {
		resp, err := post(t, ctx, tr, "/v1/messages", body)
		if err != nil {
			break
		}
		calls++
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	// Cache reads bill at a tenth of input: 30000·0.3e-6 = $0.009 a call
	// not counted, on top of 20 in and 50 out.
	billed := float64(calls) * (20*3e-6 + 30000*0.3e-6 + 50*15e-6)
	if billed > run.USD {
		t.Errorf("%d calls admitted, billed ≈ $%.4f under a $%.2f cap; Spent says $%.4f", calls, billed, run.USD, run.Spent())
	}
}

// TestCapsChargeTimedOutTransportAttempts: an attempt sent and then cut
// by AttemptTimeout is charged (the provider processed the prompt at
// least), so that a slow provider cannot make attempts free for the cap.
func TestCapsChargeTimedOutTransportAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := 0
		tr := &rebound.Transport{DisableRetryBudget: true, Policy: rebound.Policy{MaxAttempts: 3, AttemptTimeout: time.Second},
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				sent++ // received, prefilled, generating: billed
				<-req.Context().Done()
				return nil, req.Context().Err()
			})}
		run := &cost.Limit{USD: 0.05}
		ctx := cost.WithCaps(t.Context(), prices, run)
		body := `{"model":"big","max_tokens":400,"messages":[{"role":"user","content":"` + strings.Repeat("x", 3900) + `"}]}`
		for range 30 {
			if _, err := post(t, ctx, tr, "/v1/chat/completions", body); err != nil {
				var ce *cost.CapError
				if errors.As(err, &ce) {
					break
				}
			}
		}
		// Each attempt's input alone is ~$0.003.
		input := float64(sent) * float64((len(body)+3)/4) * 3e-6
		if input > run.USD {
			t.Errorf("%d attempts sent under a $%.2f cap, their input alone $%.4f; Spent $%.4f", sent, run.USD, input, run.Spent())
		}
	})
}

// TestCapsChargeTimedOutDoAttempts: the same through Do with
// WithEstimate: an attempt that timed out without reporting its usage is
// charged as the estimate held it.
func TestCapsChargeTimedOutDoAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := &cost.Limit{USD: 0.05}
		ctx := cost.WithEstimate(cost.WithCaps(t.Context(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
		calls := 0
		fn := func(ctx context.Context) (string, error) {
			calls++ // the SDK sent it; the provider bills it; the SDK reports nothing on a timeout
			<-ctx.Done()
			return "", ctx.Err()
		}
		for range 10 {
			rebound.Do(ctx, rebound.Policy{MaxAttempts: 3, AttemptTimeout: time.Second, Budget: nil}, fn)
		}
		if bound := float64(calls) * 2000 * 3e-6; bound > run.USD {
			t.Errorf("%d attempts made under a $%.2f cap, their input alone $%.4f; Spent $%.4f", calls, run.USD, bound, run.Spent())
		}
	})
}

// TestCapsRefusedRetrySaysSo: a retry the cap refuses after a failed
// attempt ends in an error that wraps the *CapError and says a spend cap
// refused, not only the last attempt's error.
func TestCapsRefusedRetrySaysSo(t *testing.T) {
	run := &cost.Limit{USD: 0.03}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	_, err := rebound.Do(ctx, rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}, func(ctx context.Context) (string, error) {
		cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 1000}) // billed, then failed
		return "", &rebound.HTTPError{StatusCode: 500}
	})
	var ce *cost.CapError
	if !errors.As(err, &ce) {
		t.Fatalf("no *CapError in %v", err)
	}
	if !strings.Contains(err.Error(), "spend cap") {
		t.Errorf("message does not say a cap refused: %q", err)
	}
}

// TestCapsCountARedirectedCallOnce: the body of a 307 redirect, which
// http.Client closes unread, settles at nothing: a call through a
// redirect is counted once, at its bill.
func TestCapsCountARedirectedCallOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old/v1/chat/completions" {
			http.Redirect(w, r, "/v1/chat/completions", http.StatusTemporaryRedirect)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer(100, 10))
	}))
	defer srv.Close()
	client := &http.Client{Transport: &rebound.Transport{}}
	defer client.CloseIdleConnections()
	run := &cost.Limit{USD: 1}
	ctx := cost.WithCaps(context.Background(), prices, run)
	body := `{"model":"big","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/old/v1/chat/completions", strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := 100*3e-6 + 10*15e-6; !near(run.Spent(), want) {
		t.Errorf("Spent $%.6f after one billed call through a redirect; billed $%.6f", run.Spent(), want)
	}
}

// TestCapsCountANestedDoOnce: a tool (or a fallback target) whose
// function calls rebound.Do again with its context is counted once, at
// its one report.
func TestCapsCountANestedDoOnce(t *testing.T) {
	run := &cost.Limit{USD: 1}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	var r tool.Registry
	r.Register("summarise", tool.Spec{Kind: tool.ReadOnly}, func(ctx context.Context, c tool.Call) (string, error) {
		// The tool calls a model with its own retries.
		return rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (string, error) {
			cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 500})
			return "summary", nil
		})
	})
	if res := r.Execute(ctx, tool.Call{Name: "summarise"}); res.Failure != nil {
		t.Fatal(res.Failure)
	}
	if want := 2000*3e-6 + 500*15e-6; !near(run.Spent(), want) {
		t.Errorf("Spent $%.6f for one model call billed $%.6f", run.Spent(), want)
	}
}

// TestCapsSettleAPanickingAttemptAtItsHold: an attempt that panics
// settles at its hold (it may have been sent before it panicked), so that
// the cap is not held for ever once the caller recovers.
func TestCapsSettleAPanickingAttemptAtItsHold(t *testing.T) {
	run := &cost.Limit{USD: 0.05}
	ctx := cost.WithEstimate(cost.WithCaps(context.Background(), prices, run), "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	func() {
		defer func() { recover() }()
		rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (string, error) { panic("bug") })
	}()
	if !near(run.Spent(), 0.021) {
		t.Errorf("after a panic, spent $%v; want its hold, $0.021, settled", run.Spent())
	}
	_, err := rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (string, error) {
		cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 1000})
		return "ok", nil
	})
	if err != nil {
		t.Errorf("$0.021 spent of $0.05, nothing held, yet: %v", err)
	}
}

// TestCapsDistrustImpossibleUsage: a usage report that cannot be right
// (negative counts, or two fields whose sum overflows) does not replace
// the hold: the call still costs something.
func TestCapsDistrustImpossibleUsage(t *testing.T) {
	for _, usage := range []string{
		`{"prompt_tokens":-1000000,"completion_tokens":-1000000}`,
		`{"prompt_tokens":9223372036854775807,"input_tokens":9223372036854775807,"completion_tokens":0}`,
	} {
		tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return jsonResponse(req, 200, `{"id":"c","choices":[],"usage":`+usage+`}`), nil
		})}
		run := &cost.Limit{USD: 1}
		ctx := cost.WithCaps(context.Background(), prices, run)
		body := `{"model":"big","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
		resp, err := post(t, ctx, tr, "/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if run.Spent() == 0 {
			t.Errorf("usage %s settled at $0", usage)
		}
	}
}

// TestCapErrorThroughHTTPClient: errors.As reaches a *CapError through
// http.Client's *url.Error, and nothing is sent.
func TestCapErrorThroughHTTPClient(t *testing.T) {
	client := &http.Client{Transport: &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		t.Error("sent")
		return nil, errors.New("no")
	})}}
	ctx := cost.WithCaps(context.Background(), prices, &cost.Limit{USD: 0.000001})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", strings.NewReader(`{"model":"big","max_tokens":10}`))
	_, err := client.Do(req)
	var ce *cost.CapError
	var ue *url.Error
	if !errors.As(err, &ce) || !errors.As(err, &ue) {
		t.Fatalf("%v", err)
	}
	t.Log(err)
}

// TestCapsSecondRefusalReleasesTheFirstHold: when a second cap refuses,
// the first cap's hold is released.
func TestCapsSecondRefusalReleasesTheFirstHold(t *testing.T) {
	a, b := &cost.Limit{Name: "tenant", USD: 1}, &cost.Limit{USD: 0.001}
	ctx := cost.WithCaps(cost.WithCaps(context.Background(), prices, a), prices, b)
	ctx = cost.WithEstimate(ctx, "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000})
	_, err := rebound.Do(ctx, rebound.Policy{}, func(context.Context) (int, error) { return 1, nil })
	var ce *cost.CapError
	if !errors.As(err, &ce) || ce.Cap != "run" {
		t.Fatal(err)
	}
	if _, err := a.Reserve(context.Background(), 1); err != nil {
		t.Errorf("tenant still held: %v", err)
	}
}

// TestCapsRefusedHedgeLeavesTheFirstAttempt: a hedge through Transport
// that the cap refuses leaves the first attempt to answer, and every hold
// settles.
func TestCapsRefusedHedgeLeavesTheFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		tr := &rebound.Transport{Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}},
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				n++
				time.Sleep(2 * time.Second)
				return jsonResponse(req, 200, answer(100, 10)), nil
			})}
		body := `{"model":"big","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
		run := &cost.Limit{USD: holdOf(body, 1000) * 1.5}
		ctx := cost.WithCaps(t.Context(), prices, run)
		resp, err := post(t, ctx, tr, "/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if n != 1 || !near(run.Spent(), 100*3e-6+10*15e-6) {
			t.Errorf("sent %d, spent %v", n, run.Spent())
		}
		if _, err := run.Reserve(context.Background(), run.USD-run.Spent()-1e-9); err != nil {
			t.Errorf("something still held: %v", err)
		}
	})
}

// TestCapsRefusingEveryTargetIsACapError: a fallback chain whose every
// target a cap refuses ends in an error errors.As finds a *CapError in,
// and calls no target.
func TestCapsRefusingEveryTargetIsACapError(t *testing.T) {
	run := &cost.Limit{USD: 0.0001}
	ctx := cost.WithCaps(context.Background(), prices, run)
	target := func(name string) fallback.Target[string, string] {
		return fallback.Target[string, string]{Name: name,
			Estimate: func(string) cost.Usage { return cost.Usage{InputTokens: 2000, OutputTokens: 1000} },
			Call:     func(ctx context.Context, q string) (string, error) { t.Error("called"); return "", nil }}
	}
	chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{target("big"), target("small"), target("unpriced")}}
	_, err := chain.Do(ctx, "q")
	var ce *cost.CapError
	if !errors.As(err, &ce) {
		t.Fatalf("%v", err)
	}
	var che *fallback.ChainError
	if errors.As(err, &che) {
		for _, s := range che.Trail {
			t.Logf("%s: skipped %q: %v", s.Target, s.Skipped, s.Err)
		}
	}
}

// TestCapsSameLimitTwiceHoldsOnce: the same Limit given at two levels (a
// helper that adds the run's caps again) is held once per attempt, not
// twice, so that it does not refuse at half the cap.
func TestCapsSameLimitTwiceHoldsOnce(t *testing.T) {
	run := &cost.Limit{USD: 0.03}
	ctx := cost.WithCaps(cost.WithCaps(context.Background(), prices, run), prices, run)
	ctx = cost.WithEstimate(ctx, "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000}) // $0.021
	_, err := rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("one $0.021 attempt under a $0.03 cap: %v", err)
	}
}
