package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
	"google.golang.org/genai"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// memoryTransport serves requests with the chaos handler in memory: inside
// a synctest bubble the SDKs' own backoff and rebound's waits then run in
// virtual time, and loopback I/O would stall the fake clock.
type memoryTransport struct{ h http.Handler }

func (m memoryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if req.Body == nil {
		req.Body = http.NoBody
	}
	defer req.Body.Close()
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// failFirst puts the first n requests (all of them if n is 0) in a
// failure mode of the chaos server, with a wait hint if hint ≥ 0; the rest
// succeed.
type failFirst struct {
	srv     *chaos.Server
	profile string
	mode    string
	n       int
	hint    int

	mu   sync.Mutex // guards seen
	seen int
}

func (f *failFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen++
	failing := f.n == 0 || f.seen <= f.n
	f.mu.Unlock()
	r.Header.Set(chaos.HeaderProfile, f.profile)
	r.Header.Set(chaos.HeaderMode, chaos.ModeOK)
	if failing {
		r.Header.Set(chaos.HeaderMode, f.mode)
		if f.hint >= 0 {
			r.Header.Set(chaos.HeaderRetryAfter, strconv.Itoa(f.hint))
		}
	}
	f.srv.ServeHTTP(w, r)
}

// provider makes one call with an official SDK. sdkRetries leaves the
// SDK's own retries at their defaults; otherwise they are turned off and
// rebound does the retrying.
type provider struct {
	name    string
	profile string
	call    func(ctx context.Context, hc *http.Client, sdkRetries bool) error
	status  func(err error) int // the HTTP status in the SDK's error, 0 if none
}

const baseURL = "http://provider.test"

var providers = []provider{
	{
		name: "OpenAI", profile: chaos.ProfileOpenAI,
		call: func(ctx context.Context, hc *http.Client, sdkRetries bool) error {
			opts := []openaioption.RequestOption{openaioption.WithBaseURL(baseURL + "/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc)}
			if !sdkRetries {
				opts = append(opts, openaioption.WithMaxRetries(0))
			}
			client := openai.NewClient(opts...)
			c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			if err == nil && c.Choices[0].Message.Content == "" {
				return errors.New("empty answer")
			}
			return err
		},
		status: func(err error) int {
			var e *openai.Error
			if errors.As(err, &e) {
				return e.StatusCode
			}
			return 0
		},
	},
	{
		name: "Anthropic", profile: chaos.ProfileAnthropic,
		call: func(ctx context.Context, hc *http.Client, sdkRetries bool) error {
			opts := []anthropicoption.RequestOption{anthropicoption.WithBaseURL(baseURL), anthropicoption.WithAPIKey("sk-ant-test"), anthropicoption.WithHTTPClient(hc)}
			if !sdkRetries {
				opts = append(opts, anthropicoption.WithMaxRetries(0))
			}
			client := anthropic.NewClient(opts...)
			m, err := client.Messages.New(ctx, anthropic.MessageNewParams{
				Model: "claude-test", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			if err == nil && len(m.Content) == 0 {
				return errors.New("empty answer")
			}
			return err
		},
		status: func(err error) int {
			var e *anthropic.Error
			if errors.As(err, &e) {
				return e.StatusCode
			}
			return 0
		},
	},
	{
		name: "Gemini", profile: chaos.ProfileGemini,
		call: func(ctx context.Context, hc *http.Client, sdkRetries bool) error {
			// go-genai makes no retries unless asked: sdkRetries changes nothing.
			client, err := genai.NewClient(ctx, &genai.ClientConfig{
				APIKey: "test", Backend: genai.BackendGeminiAPI, HTTPClient: hc,
				HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
			})
			if err != nil {
				return err
			}
			r, err := client.Models.GenerateContent(ctx, "gemini-test", genai.Text("hi"), nil)
			if err == nil && r.Text() == "" {
				return errors.New("empty answer")
			}
			return err
		},
		status: func(err error) int {
			var e genai.APIError
			if errors.As(err, &e) {
				return e.Code
			}
			return 0
		},
	},
}

// scenario is one kind of failure: the first `fails` requests (all, if 0)
// fail in chaos mode `mode`, with a wait hint of `hint` seconds if ≥ 0.
type scenario struct {
	name  string
	kind  string // the verdict kind rebound gives it
	mode  string
	fails int
	hint  int
}

var scenarios = []scenario{
	{"Transient", "transient", chaos.ModeDown, 1, -1},
	{"RateLimitedRetryAfter2s", "rate_limited", chaos.ModeRetryAfter, 1, 2},
	{"RateLimitedRetryAfter1h", "rate_limited", chaos.ModeRetryAfter, 0, 3600},
	{"Overloaded", "overloaded", chaos.ModeOverload, 0, -1},
	{"QuotaExhausted", "quota_exhausted", chaos.ModeQuota, 0, -1},
	{"ContextOverflow", "context_overflow", chaos.ModeContext, 0, -1},
	{"Permanent", "permanent", chaos.ModeBadRequest, 0, -1},
}

// outcome is what one configuration did in one scenario.
type outcome struct {
	requests int
	status   int // the SDK's error status; 0: the call succeeded
	waited   time.Duration
}

func (o outcome) String() string {
	s := fmt.Sprintf("%d request", o.requests)
	if o.requests != 1 {
		s += "s"
	}
	if o.status == 0 {
		s += ", ok"
	} else {
		s += fmt.Sprintf(", %d", o.status)
	}
	if o.waited > 0 {
		s += ", waited " + fmtWait(o.waited)
	}
	return s
}

func fmtWait(d time.Duration) string {
	if d >= time.Hour {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%gs", d.Seconds())
}

// How a call reaches the provider.
const (
	sdkAlone     = iota // the SDK's own retries at their defaults
	viaTransport        // rebound.Transport in the SDK's client, its retries off
	viaProxy            // rebound proxy's handler in front of the provider, the SDK's retries off
)

// run makes one call in a synctest bubble, by way of via, and reports what
// happened.
func run(t *testing.T, p provider, s scenario, via int) outcome {
	var o outcome
	synctest.Test(t, func(t *testing.T) {
		srv, err := chaos.New(chaos.Config{Profile: p.profile})
		if err != nil {
			t.Fatal(err)
		}
		var rt http.RoundTripper = memoryTransport{&failFirst{srv: srv, profile: p.profile, mode: s.mode, n: s.fails, hint: s.hint}}
		switch via {
		case viaTransport:
			rt = &rebound.Transport{Base: rt, Policy: rebound.Policy{Rand: rand.New(rand.NewPCG(1, 2))}}
		case viaProxy:
			rt = memoryTransport{newProxy(t, rt)}
		}
		start := time.Now()
		err = p.call(t.Context(), &http.Client{Transport: rt}, via == sdkAlone)
		o.waited = time.Since(start)
		o.requests = srv.Stats().Requests
		if err != nil {
			if o.status = p.status(err); o.status == 0 {
				t.Fatalf("an error without a status: %v", err)
			}
		}
	})
	return o
}

// want is what each configuration must do, by provider and scenario. A
// waited of -1 means "some backoff, its length random": only waits the
// server asked for are exact.
type want struct{ rebound, sdk outcome }

var wants = map[string]map[string]want{
	"OpenAI": {
		"Transient":               {outcome{2, 0, -1}, outcome{2, 0, -1}},
		"RateLimitedRetryAfter2s": {outcome{2, 0, 2 * time.Second}, outcome{2, 0, 2 * time.Second}},
		"RateLimitedRetryAfter1h": {outcome{1, 429, 0}, outcome{1, 429, 0}},
		"Overloaded":              {outcome{2, 503, -1}, outcome{3, 503, -1}},
		"QuotaExhausted":          {outcome{1, 429, 0}, outcome{3, 429, -1}},
		"ContextOverflow":         {outcome{1, 400, 0}, outcome{1, 400, 0}},
		"Permanent":               {outcome{1, 400, 0}, outcome{1, 400, 0}},
	},
	"Anthropic": {
		"Transient":               {outcome{2, 0, -1}, outcome{2, 0, -1}},
		"RateLimitedRetryAfter2s": {outcome{2, 0, 2 * time.Second}, outcome{2, 0, 2 * time.Second}},
		"RateLimitedRetryAfter1h": {outcome{1, 429, 0}, outcome{3, 429, 2 * time.Hour}},
		"Overloaded":              {outcome{2, 529, -1}, outcome{3, 529, -1}},
		"QuotaExhausted":          {outcome{1, 429, 0}, outcome{3, 429, -1}},
		"ContextOverflow":         {outcome{1, 400, 0}, outcome{1, 400, 0}},
		"Permanent":               {outcome{1, 400, 0}, outcome{1, 400, 0}},
	},
	"Gemini": {
		"Transient":               {outcome{2, 0, -1}, outcome{1, 503, 0}},
		"RateLimitedRetryAfter2s": {outcome{2, 0, 2 * time.Second}, outcome{1, 429, 0}},
		"RateLimitedRetryAfter1h": {outcome{1, 429, 0}, outcome{1, 429, 0}},
		"Overloaded":              {outcome{2, 503, -1}, outcome{1, 503, 0}},
		"QuotaExhausted":          {outcome{1, 429, 0}, outcome{1, 429, 0}},
		"ContextOverflow":         {outcome{1, 400, 0}, outcome{1, 400, 0}},
		"Permanent":               {outcome{1, 400, 0}, outcome{1, 400, 0}},
	},
}

func matches(got, want outcome) bool {
	if got.requests != want.requests || got.status != want.status {
		return false
	}
	if want.waited < 0 {
		return got.waited > 0
	}
	return got.waited == want.waited
}

// TestSDKs drives each official SDK through each kind of failure, once
// with rebound.Transport (the SDK's retries off) and once alone (its
// retries at their defaults), and checks the table in docs/providers.md.
func TestSDKs(t *testing.T) {
	var table strings.Builder
	table.WriteString("| provider | failure | rebound kind | with rebound | SDK alone |\n|---|---|---|---|---|\n")
	for _, p := range providers {
		for _, s := range scenarios {
			w := wants[p.name][s.name]
			var withRebound, alone outcome
			t.Run(p.name+"/"+s.name+"/Rebound", func(t *testing.T) {
				withRebound = run(t, p, s, viaTransport)
				if !matches(withRebound, w.rebound) {
					t.Errorf("got %+v, want %+v", withRebound, w.rebound)
				}
			})
			t.Run(p.name+"/"+s.name+"/SDKAlone", func(t *testing.T) {
				alone = run(t, p, s, sdkAlone)
				if !matches(alone, w.sdk) {
					t.Errorf("got %+v, want %+v", alone, w.sdk)
				}
			})
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s |\n", p.name, describe(s), s.kind, cell(withRebound), cell(alone))
		}
	}
	if t.Failed() {
		return
	}
	guide, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), table.String()) {
		t.Errorf("docs/providers.md does not hold the table these tests measured; put this in it:\n%s", table.String())
	}
}

// cell shows an outcome, leaving out waits whose length is random.
func cell(o outcome) string {
	if o.waited > 0 && o.waited != 2*time.Second && o.waited < time.Hour {
		o.waited = 0
	}
	return o.String()
}

func describe(s scenario) string {
	what := map[string]string{
		chaos.ModeDown: "503", chaos.ModeRetryAfter: "429", chaos.ModeOverload: "overloaded",
		chaos.ModeQuota: "quota or billing", chaos.ModeContext: "context too long", chaos.ModeBadRequest: "400",
	}[s.mode]
	if s.hint >= 0 {
		what += ", wait hint " + fmtWait(time.Duration(s.hint)*time.Second)
	}
	if s.fails > 0 {
		what += ", once"
	} else {
		what += ", always"
	}
	return what
}
