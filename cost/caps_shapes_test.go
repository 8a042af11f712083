package cost_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cost"
)

// TestCapsHoldConcurrentCallsOfEveryShape sends 16 concurrent calls of one
// request shape at a time through Transport, under a $1 cost.Limit, to
// the chaos server, which bills each as the most generous server would
// read it: the largest output cap it names in any spelling, every answer
// it asks for, a Gemini thinking budget beyond the output cap, the
// context the provider keeps. Every call is admitted or refused before
// any is answered, as when a burst of calls arrives at once, so that what
// the caps hold is all that stands between the burst and the bill. A
// shape is priced so that one call costs about $0.25: the server's own
// count of what it billed must stay within the cap, and at least one call
// must have been answered.
func TestCapsHoldConcurrentCallsOfEveryShape(t *testing.T) {
	const (
		seed   = 1
		prompt = "Tell me of rivers."
		calls  = 16
		kept   = 100000 // the tokens of the context the provider keeps
		capUSD = 1.0
	)
	t.Logf("chaos seed %d", seed)
	answer := (len(chaos.AnswerText(seed, prompt)) + 3) / 4 // the tokens of the whole answer
	chat := func(fields string) string {
		return `{"model":"gpt-x",` + fields + `,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	}
	gemini := func(fields string) string {
		return `{` + fields + `,"contents":[{"role":"user","parts":[{"text":"` + prompt + `"}]}]}`
	}
	const (
		chatPath      = "/v1/chat/completions"
		responsesPath = "/v1/responses"
		geminiPath    = "/v1beta/models/gem:generateContent"
	)
	a := fmt.Sprint(answer)
	shapes := []struct {
		name, profile, path, body string
	}{
		{"max_tokens and a larger max_completion_tokens", "openai", chatPath, chat(`"max_tokens":1,"max_completion_tokens":` + a)},
		{"max_tokens named twice", "openai", chatPath, chat(`"max_tokens":` + a + `,"max_tokens":1`)},
		{"MAX_TOKENS before max_tokens", "openai", chatPath, chat(`"MAX_TOKENS":` + a + `,"max_tokens":1`)},
		{"candidate_count", "gemini", geminiPath, gemini(`"generationConfig":{"maxOutputTokens":` + a + `,"candidate_count":8}`)},
		{"generation_config's max_output_tokens", "gemini", geminiPath, gemini(`"generationConfig":{"maxOutputTokens":1},"generation_config":{"max_output_tokens":` + a + `}`)},
		{"thinkingBudget", "gemini", geminiPath, gemini(`"generationConfig":{"maxOutputTokens":` + a + `,"thinkingConfig":{"thinkingBudget":` + fmt.Sprint(8*answer) + `}}`)},
		{"thinking_budget", "gemini", geminiPath, gemini(`"generation_config":{"max_output_tokens":` + a + `,"thinking_config":{"thinking_budget":` + fmt.Sprint(8*answer) + `}}`)},
		{"cachedContent", "gemini", geminiPath, gemini(`"cachedContent":"cachedContents/c1","generationConfig":{"maxOutputTokens":` + a + `}`)},
		{"cached_content", "gemini", geminiPath, gemini(`"cached_content":"cachedContents/c1","generationConfig":{"maxOutputTokens":` + a + `}`)},
		{"a stored prompt", "openai", responsesPath, `{"model":"gpt-x","prompt":{"id":"pmpt_1"},"max_output_tokens":` + a + `,"input":"` + prompt + `"}`},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			srv, err := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: seed, Profile: sh.profile})
			if err != nil {
				t.Fatal(err)
			}
			send := func(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
				req.Header.Set(chaos.HeaderContextTokens, fmt.Sprint(kept))
				return rt.RoundTrip(req)
			}
			// One call, uncapped, prices the shape: what it was billed is
			// what each call will be.
			direct := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				return rec.Result(), nil
			})
			req, _ := http.NewRequest("POST", "http://chaos.test"+sh.path, strings.NewReader(sh.body))
			if _, err := send(direct, req); err != nil {
				t.Fatal(err)
			}
			st := srv.Stats()
			perToken := 0.25 / float64(st.InputTokens+st.OutputTokens) // dollars: a call costs $0.25
			price := cost.Price{InputPerMillion: perToken * 1e6, OutputPerMillion: perToken * 1e6,
				MaxOutputTokens: int64(answer), MaxInputTokens: kept}
			srv.Reset()

			// Every call is admitted or refused before any is answered.
			var decided sync.WaitGroup
			decided.Add(calls)
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				decided.Done()
				decided.Wait()
				return direct(req)
			})
			tr := &rebound.Transport{Base: base, DisableRetryBudget: true}
			run := &cost.Limit{USD: capUSD}
			ctx := cost.WithCaps(t.Context(), cost.Table{"gpt-x": price, "gem": price}, run)
			var wg sync.WaitGroup
			var mu sync.Mutex
			answered, refused := 0, 0
			for range calls {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, "POST", "http://chaos.test"+sh.path, strings.NewReader(sh.body))
					resp, err := send(tr, req)
					var ce *cost.CapError
					switch {
					case errors.As(err, &ce):
						mu.Lock()
						refused++
						mu.Unlock()
						decided.Done()
						return
					case err != nil:
						t.Error(err)
						decided.Done()
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					answered++
					mu.Unlock()
				})
			}
			wg.Wait()
			st = srv.Stats()
			billed := price.Of(cost.Usage{InputTokens: int64(st.InputTokens), OutputTokens: int64(st.OutputTokens)})
			t.Logf("%d answered, %d refused: billed $%.4f (%.1f times the cap), the cap counted $%.4f", answered, refused, billed, billed/capUSD, run.Spent())
			if billed > capUSD+1e-9 {
				t.Errorf("the server billed $%.4f under a $%.2f cap", billed, capUSD)
			}
			if answered == 0 {
				t.Errorf("no call answered: the caps refuse what they could hold")
			}
		})
	}
}

// TestCapsReadEncodedBodies: a body encoded as HTTP allows (gzip, x-gzip,
// deflate, several in turn) is read for what it asks, here eight answers
// of 1000 tokens, $0.12, past a $0.05 cap.
func TestCapsReadEncodedBodies(t *testing.T) {
	const body = `{"model":"big","max_tokens":1000,"n":8,"messages":[{"role":"user","content":"Hi"}]}`
	zip := func(data []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		return buf.Bytes()
	}
	deflate := func(data []byte) []byte {
		var buf bytes.Buffer
		zw := zlib.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		return buf.Bytes()
	}
	table := cost.Table{"big": {InputPerMillion: 3, OutputPerMillion: 15, MaxOutputTokens: 100}}
	for _, c := range []struct {
		encoding string
		data     []byte
	}{
		{"gzip", zip([]byte(body))},
		{"x-gzip", zip([]byte(body))},
		{"deflate", deflate([]byte(body))},
		{"gzip, deflate", deflate(zip([]byte(body)))},
		{"identity, GZIP", zip([]byte(body))},
	} {
		sent := 0
		tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent++
			return jsonResponse(req, 200, answer(1, 1)), nil
		})}
		ctx := cost.WithCaps(t.Context(), table, &cost.Limit{USD: 0.05})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", bytes.NewReader(c.data))
		req.Header.Set("Content-Encoding", c.encoding)
		_, err := tr.RoundTrip(req)
		var ce *cost.CapError
		if !errors.As(err, &ce) || sent != 0 || !near(ce.Need, 8000*15e-6+float64((len(body)+3)/4)*3e-6) {
			t.Errorf("%s: %v after %d sent; want a *CapError for eight answers and nothing sent", c.encoding, err, sent)
		}
	}
}

// TestCapsRefuseBodiesTheyCannotRead: a body the caps cannot read (sent
// once, unbuffered; encoded in a way they do not decode; broken in its
// encoding) may ask for anything, so its attempt is refused with
// ErrUnreadBody and nothing is sent.
func TestCapsRefuseBodiesTheyCannotRead(t *testing.T) {
	const body = `{"model":"big","max_tokens":1000,"n":128,"messages":[{"role":"user","content":"Hi"}]}`
	for _, c := range []struct {
		name     string
		encoding string
		data     []byte
		reader   func([]byte) io.Reader
	}{
		{"sent once", "", []byte(body), func(b []byte) io.Reader { return io.MultiReader(bytes.NewReader(b)) }},
		{"brotli", "br", []byte(body), nil},
		{"an unknown coding after gzip", "gzip, zstd", []byte(body), nil},
		{"not gzip", "gzip", []byte(body), nil},
	} {
		sent := 0
		tr := &rebound.Transport{MaxBufferedBody: -1, Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent++
			return jsonResponse(req, 200, answer(1, 1)), nil
		})}
		ctx := cost.WithCaps(t.Context(), prices, &cost.Limit{USD: 100})
		var r io.Reader = bytes.NewReader(c.data)
		if c.reader != nil {
			r = c.reader(c.data)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", r)
		if c.encoding != "" {
			req.Header.Set("Content-Encoding", c.encoding)
		}
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, cost.ErrUnreadBody) || sent != 0 {
			t.Errorf("%s: %v after %d sent; want ErrUnreadBody and nothing sent", c.name, err, sent)
		}
	}
}

// TestCapsHoldTheDearestModelNamed: a body that names its model in keys a
// server might each take for "model" is priced as the dearest of them,
// and refused if one has no price.
func TestCapsHoldTheDearestModelNamed(t *testing.T) {
	const hold = 1000 * 15e-6 // "big"'s output; the input is a few tokens more
	for _, c := range []struct {
		body    string
		noPrice bool
	}{
		{`{"Model":"big","model":"small","max_tokens":1000}`, false},
		{`{"model":"big","model":"small","max_tokens":1000}`, false},
		{`{"model":"small","MODEL":"unpriced","max_tokens":1000}`, true},
	} {
		tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return jsonResponse(req, 200, answer(1, 1)), nil
		})}
		ctx := cost.WithCaps(t.Context(), prices, &cost.Limit{USD: hold})
		_, err := post(t, ctx, tr, "/v1/chat/completions", c.body)
		var ce *cost.CapError
		switch {
		case c.noPrice && !errors.Is(err, cost.ErrNoPrice):
			t.Errorf("%s: %v, want ErrNoPrice", c.body, err)
		case !c.noPrice && (!errors.As(err, &ce) || ce.Need <= hold):
			t.Errorf("%s: %v, want a *CapError for big's price", c.body, err)
		}
	}
}

// TestCapsPriceTheModelThePathNames: Gemini serves the model its path
// names, and Azure OpenAI its deployment's, whatever the body's "model"
// says: a request is priced as the dearest of the path's model and the
// body's.
func TestCapsPriceTheModelThePathNames(t *testing.T) {
	const hold = 1000 * 15e-6 // "big"'s output; the input is a few tokens more
	for _, c := range []struct{ path, body string }{
		{"/v1beta/models/big:generateContent", `{"model":"small","generationConfig":{"maxOutputTokens":1000,"thinkingConfig":{"thinkingBudget":0}}}`},
		{"/openai/deployments/big/chat/completions", `{"model":"small","max_tokens":1000}`},
	} {
		tr := &rebound.Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return jsonResponse(req, 200, answer(1, 1)), nil
		})}
		ctx := cost.WithCaps(t.Context(), prices, &cost.Limit{USD: hold})
		_, err := post(t, ctx, tr, c.path, c.body)
		if ce := (*cost.CapError)(nil); !errors.As(err, &ce) || ce.Need <= hold {
			t.Errorf("%s %s: %v, want a *CapError for big's price", c.path, c.body, err)
		}
	}
}

// TestCapsHoldWhatTheBodyUnderstates: a request whose bill its body
// understates (n answers, no output cap, context kept by the provider,
// images by reference) is held at what it may cost, so that calls admitted
// one after another never spend past the cap.
func TestCapsHoldWhatTheBodyUnderstates(t *testing.T) {
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

// TestCapsLetRequestsWithoutACompletionThrough: a request that asks for no
// completion (GET /v1/models) goes through under caps: a client whose
// context carries caps can still list models.
func TestCapsLetRequestsWithoutACompletionThrough(t *testing.T) {
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

// TestCapsAdmitAGzipBodyOfAPricedModel: a gzip-encoded request body (an
// SDK that compresses uploads) is read for its model, and a priced model
// is admitted.
func TestCapsAdmitAGzipBodyOfAPricedModel(t *testing.T) {
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
