package cost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

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

const anthropicHead = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"big\",\"content\":[],\"usage\":{\"input_tokens\":1000,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"

func anthropicDelta(s string) string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + s + "\"}}\n\n"
}

// TestCapsCountTheOutputOfACutAnthropicStream: an Anthropic stream cut
// after content, before its message_delta, settles at no less than the
// output it streamed, not at message_start's count of 1 output token.
func TestCapsCountTheOutputOfACutAnthropicStream(t *testing.T) {
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

// TestCapsOverloadedStreamSpendsNothingUnsaid: a 200 stream that fails in
// the look-ahead with an in-band error (Anthropic's overloaded_error, not
// billed) spends nothing; if the cap is spent all the same, its refusal
// of a retry reaches the caller as a *CapError, not as the failed
// stream's 200 with a nil error.
func TestCapsOverloadedStreamSpendsNothingUnsaid(t *testing.T) {
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

// rwc is the body of a 101 Switching Protocols: readable and writable.
type rwc struct {
	io.Reader
	io.Writer
}

func (rwc) Close() error { return nil }

// TestCapsKeepAnUpgradesBodyWritable: a 101's body under caps is still an
// io.ReadWriteCloser, so that the upgraded connection can be used.
func TestCapsKeepAnUpgradesBodyWritable(t *testing.T) {
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

// TestCapsSettleOnceWhenCloseRacesRead: a body closed while another
// goroutine reads it settles once, race-free, and holds nothing after.
func TestCapsSettleOnceWhenCloseRacesRead(t *testing.T) {
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

// TestCapsRefusedContinuationEndsTheStreamIncomplete: a continuation the
// cap refuses ends the stream with an *IncompleteStreamError, and the cut
// stream settles at its hold.
func TestCapsRefusedContinuationEndsTheStreamIncomplete(t *testing.T) {
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

// BenchmarkCapsStreamWithNullUsage: the cost of caps on a long stream
// whose every chunk carries "usage":null (OpenAI with
// stream_options.include_usage).
func BenchmarkCapsStreamWithNullUsage(b *testing.B) {
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
