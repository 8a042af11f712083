package cost_test

// An adversarial review of spend caps, kept as regression tests. Each
// test states the promise it holds the code to.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/tool"
)

// holdOf is what Transport reserves for body at maxOut output tokens on "big".
func holdOf(body string, maxOut int) float64 {
	return float64((len(body)+3)/4)*3e-6 + float64(maxOut)*15e-6
}

func post(t *testing.T, ctx context.Context, tr http.RoundTripper, path, body string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test"+path, strings.NewReader(body))
	return tr.RoundTrip(req)
}

// 1. The estimate is not a bound: a single admitted attempt spends past the
// cap. Promise: "an attempt that would pass the cap is refused before
// anything is spent"; "never spend more than the cap".
func TestReviewCapsEstimateIsNotABound(t *testing.T) {
	cases := []struct {
		name, path, body string
		in, out          int // what the provider bills
	}{
		// OpenAI n: n completions, each up to max_tokens.
		{"n choices", "/v1/chat/completions", `{"model":"big","n":8,"max_tokens":500,"messages":[{"role":"user","content":"write"}]}`, 10, 8 * 500},
		// No output cap: OpenAI's default is the model's maximum (16384 for
		// gpt-4o, 100000 for o-series), not 4096.
		{"no max_tokens", "/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"write a long essay"}]}`, 10, 16384},
		// Responses API: the input is the whole earlier conversation.
		{"previous_response_id", "/v1/responses", `{"model":"big","previous_response_id":"resp_abc","input":"and now?","max_output_tokens":100}`, 60000, 100},
		// Images and files by reference: a URL or file id of a few bytes
		// is hundreds to thousands of input tokens each.
		{"image urls", "/v1/chat/completions", `{"model":"big","max_tokens":100,"messages":[{"role":"user","content":[` +
			strings.Repeat(`{"type":"image_url","image_url":{"url":"https://x.test/p.png","detail":"high"}},`, 20) +
			`{"type":"text","text":"compare"}]}]}`, 20 * 1105, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return jsonResponse(req, 200, answer(c.in, c.out)), nil
			})}
			run := &cost.Limit{USD: 0.10}
			ctx := cost.WithCaps(context.Background(), prices, run)
			for range 20 {
				resp, err := post(t, ctx, tr, c.path, c.body)
				if err != nil {
					break
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if run.Spent() > run.USD {
				t.Errorf("spent $%.4f under a $%.2f cap (the provider billed %d in, %d out a call)", run.Spent(), run.USD, c.in, c.out)
			}
		})
	}
}

// 2. Anthropic's usage leaves cache tokens out of input_tokens: prompt
// caching (the usual agent set-up) settles far below the bill. The
// reservation covered them (the body's bytes); the settlement forgets them.
func TestReviewCapsAnthropicCacheTokensUncounted(t *testing.T) {
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

// 3. An attempt sent and then cut by AttemptTimeout (the provider did the
// work: the prompt at least was processed) settles at nothing. A slow
// provider makes every attempt free for the cap.
func TestReviewCapsTimedOutAttemptsAreFree(t *testing.T) {
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

// 3b. The same through Do with WithEstimate: a failure that reports
// nothing settles at nothing, whatever it was.
func TestReviewCapsDoTimedOutAttemptsAreFree(t *testing.T) {
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

const anthropicHead = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"big\",\"content\":[],\"usage\":{\"input_tokens\":1000,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"

func anthropicDelta(s string) string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + s + "\"}}\n\n"
}

// 4. Docs: "a stream cut before its usage event keeps what it reserved".
// An Anthropic stream cut after content settles at message_start's
// counts (its input and 1 output token), not its hold: the output it
// streamed is never counted.
func TestReviewCapsAnthropicCutStreamSettlesAtMessageStart(t *testing.T) {
	stream := anthropicHead + strings.Repeat(anthropicDelta("word "), 2000) // cut: no message_delta, no message_stop
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(stream)), Request: req}, nil
	})}
	run := &cost.Limit{USD: 1}
	ctx := cost.WithCaps(context.Background(), prices, run)
	body := `{"model":"big","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := post(t, ctx, tr, "/v1/messages", body)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body) // ends with an *IncompleteStreamError
	resp.Body.Close()
	if hold := holdOf(body, 4000); run.Spent() < 2000*15e-6 {
		t.Errorf("a cut stream that streamed 2000 tokens settled at $%.6f; its hold is $%.6f", run.Spent(), hold)
	}
}

// 5. A 200 stream that fails in the lookahead with an in-band error
// (Anthropic's overloaded_error: not billed) settles at its whole hold.
// Retries of it exhaust the cap; and when the cap refuses the retry, the
// caller gets the failed stream's 200 back with a nil error: no *CapError
// to act on.
func TestReviewCapsOverloadedStreamChargesHoldAndHidesRefusal(t *testing.T) {
	const overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	sent := 0
	tr := &rebound.Transport{DisableRetryBudget: true, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay},
		Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent++
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(strings.NewReader(overloaded)), Request: req}, nil
		})}
	body := `{"model":"big","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	run := &cost.Limit{USD: holdOf(body, 1000) * 1.5}
	ctx := cost.WithCaps(context.Background(), prices, run)
	resp, err := post(t, ctx, tr, "/v1/messages", body)
	if resp != nil {
		resp.Body.Close()
	}
	var ce *cost.CapError
	if run.Spent() != 0 && !errors.As(err, &ce) {
		t.Errorf("after %d overloaded streams (unbilled): Spent $%.6f of $%.6f; RoundTrip = %v, %v; want nothing spent, or else a *CapError",
			sent, run.Spent(), run.USD, resp != nil, err)
	}
}

// 6. A retry the cap refuses after a failed attempt: the GiveUpError's
// message does not say the cap refused (it names only the last error).
func TestReviewCapsRefusedRetryMessage(t *testing.T) {
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

// 7. Requests that are not completions (GET /v1/models, a Realtime
// WebSocket upgrade, Azure's deployment paths, a gzip-encoded body) are
// refused with ErrNoPrice for the target "": a client whose context
// carries caps cannot list models or open a session. And a 101 under caps
// loses its writable body.
func TestReviewCapsNonCompletionRequestsRefused(t *testing.T) {
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return jsonResponse(req, 200, `{"object":"list","data":[]}`), nil
	})}
	ctx := cost.WithCaps(context.Background(), prices, &cost.Limit{USD: 1})
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://provider.test/v1/models", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Errorf("GET /v1/models under caps: %v", err)
	} else {
		resp.Body.Close()
	}
}

type rwc struct {
	io.Reader
	io.Writer
}

func (rwc) Close() error { return nil }

func TestReviewCapsUpgradeBodyNotWritable(t *testing.T) {
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}},
			Body: rwc{strings.NewReader(""), io.Discard}, Request: req}, nil
	})}
	// Priced so that it is admitted (a Gemini Live-like path names a model).
	ctx := cost.WithCaps(context.Background(), cost.Table{"big": prices["big"]}, &cost.Limit{USD: 1})
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://provider.test/v1beta/models/big:live", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
		t.Errorf("a 101's body under caps is %T, not an io.ReadWriteCloser: the upgrade cannot be used", resp.Body)
	}
}

// 8. A 307 redirect's body (closed unread by http.Client) settles at the
// whole hold: Spent counts every hop as a full call.
func TestReviewCapsRedirectCountsTwice(t *testing.T) {
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

// 9. Nested calls under one estimate: a tool (or a fallback target) whose
// function calls rebound.Do again with its context is reserved twice, and
// its one report settles both: Spent is twice the bill.
func TestReviewCapsNestedDoCountsTwice(t *testing.T) {
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

// 10. A panicking attempt leaked its hold: the caller's recover went on,
// and the cap stayed held for ever (a shared tenant cap too). It now
// settles, at its hold: it may have been sent before it panicked.
func TestReviewCapsPanicLeaksHold(t *testing.T) {
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

// 11. A usage report that lies low (negative counts, or two fields whose
// sum overflows) settles below the hold; a report that cannot be right
// should not replace it.
func TestReviewCapsImpossibleUsage(t *testing.T) {
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

// Held: errors.As reaches a *CapError through http.Client's *url.Error.
func TestReviewCapsClientErrorShape(t *testing.T) {
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

// Held: a second cap's refusal releases the first's hold.
func TestReviewCapsSecondCapReleasesFirst(t *testing.T) {
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

// Held?: a hedge through Transport the cap refuses leaves the first
// attempt to answer, and every hold settles.
func TestReviewCapsTransportHedgeRefused(t *testing.T) {
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

// Held?: Close racing Read settles once, race-free.
func TestReviewCapsCloseRacesRead(t *testing.T) {
	for range 50 {
		pr, pw := io.Pipe()
		tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: pr, Request: req}, nil
		})}
		run := &cost.Limit{USD: 1}
		ctx := cost.WithCaps(context.Background(), prices, run)
		resp, err := post(t, ctx, tr, "/v1/chat/completions", `{"model":"big","max_tokens":10}`)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(io.Discard, resp.Body)
		}()
		go func() { pw.Write([]byte(answer(1, 1)[:20])) }()
		resp.Body.Close()
		<-done
		pw.Close()
		if _, err := run.Reserve(context.Background(), 1-run.Spent()-1e-9); err != nil {
			t.Fatalf("still held after Close: %v", err)
		}
	}
}

// Held?: a continuation the cap refuses ends the stream incomplete, holds
// settled.
func TestReviewCapsContinuationRefused(t *testing.T) {
	cut := `data: {"choices":[{"index":0,"delta":{"content":"hello "}}]}` + "\n\n"
	sent := 0
	tr := &rebound.Transport{Continuations: 2, Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(cut)), Request: req}, nil
	})}
	body := `{"model":"big","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	run := &cost.Limit{USD: holdOf(body, 1000) * 1.5}
	ctx := cost.WithCaps(context.Background(), prices, run)
	resp, err := post(t, ctx, tr, "/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	var ie *rebound.IncompleteStreamError
	if !errors.As(err, &ie) || sent != 1 || !near(run.Spent(), holdOf(body, 1000)) {
		t.Errorf("err %v, sent %d, spent %v", err, sent, run.Spent())
	}
}

// Cost of caps on a long stream whose every chunk carries "usage":null
// (OpenAI with stream_options.include_usage).
func BenchmarkReviewCapsStreamUsageNull(b *testing.B) {
	chunk := `data: {"id":"c","object":"chat.completion.chunk","model":"big","choices":[{"index":0,"delta":{"content":"word "}}],"usage":null}` + "\n\n"
	stream := strings.Repeat(chunk, 1000) + `data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1000}}` + "\n\ndata: [DONE]\n\n"
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(stream)), Request: req}, nil
	})}
	body := `{"model":"big","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, capped := range []bool{false, true} {
		b.Run(fmt.Sprint("capped=", capped), func(b *testing.B) {
			ctx := context.Background()
			if capped {
				ctx = cost.WithCaps(ctx, prices, &cost.Limit{USD: 1e9})
			}
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", strings.NewReader(body))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// Held?: a chain whose every target a cap refuses ends in an error
// errors.As finds a *CapError in.
func TestReviewCapsChainAllRefused(t *testing.T) {
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

// The same Limit given at two levels (a helper that adds the run's caps
// again) is reserved twice per attempt: refusals at half the cap.
func TestReviewCapsSameLimitTwice(t *testing.T) {
	run := &cost.Limit{USD: 0.03}
	ctx := cost.WithCaps(cost.WithCaps(context.Background(), prices, run), prices, run)
	ctx = cost.WithEstimate(ctx, "big", cost.Usage{InputTokens: 2000, OutputTokens: 1000}) // $0.021
	_, err := rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("one $0.021 attempt under a $0.03 cap: %v", err)
	}
}

// A gzip-encoded request body (an SDK that compresses uploads) is not
// read: refused as target "".
func TestReviewCapsGzipBodyRefused(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"model":"big","max_tokens":10,"messages":[]}`))
	zw.Close()
	tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return jsonResponse(req, 200, answer(1, 1)), nil
	})}
	ctx := cost.WithCaps(context.Background(), prices, &cost.Limit{USD: 1})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", bytes.NewReader(buf.Bytes()))
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Errorf("a priced model, gzip body: %v", err)
	} else {
		resp.Body.Close()
	}
}
