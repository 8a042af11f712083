package chaos

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var allProfiles = []string{ProfilePlain, ProfileOpenAI, ProfileAnthropic, ProfileGemini}

// send sends one in-memory request to s with the given body and headers,
// given as name, value pairs, and returns the recorded response.
func send(s *Server, method, target, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// strictDecode decodes data into v, refusing fields v does not have.
func strictDecode(t *testing.T, data string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %q into %T: %v", data, v, err)
	}
}

// decode decodes data into v.
func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decoding %q into %T: %v", data, v, err)
	}
}

// rawString returns the string a JSON value holds, or "null".
func rawString(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if string(raw) == "null" {
		return "null"
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s is neither a string nor null", raw)
	}
	return s
}

// A failure is an error response as a client of its profile sees it.
type failure struct {
	status  int
	typ     string // error type; gemini's status
	code    string // openai's code, anthropic's details.error_code, gemini's quota id; "null" or "" for none
	param   string // openai only
	message string
	hint    string // wait hint: plain and anthropic Retry-After, openai "Retry-After/retry-after-ms", gemini retryDelay
}

// readFailure decodes rec, an error response in the named profile, checking
// the provider's body shape on the way.
func readFailure(t *testing.T, profile string, rec *httptest.ResponseRecorder) failure {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	h := rec.Header()
	f := failure{status: rec.Code, hint: h.Get("Retry-After")}
	body := rec.Body.String()
	switch profile {
	case ProfilePlain:
		var b struct{ Error errorDetail }
		strictDecode(t, body, &b)
		f.typ, f.code, f.message = b.Error.Type, b.Error.Code, b.Error.Message
	case ProfileOpenAI:
		var b struct {
			Error struct {
				Message     string
				Type        string
				Param, Code json.RawMessage
			}
		}
		strictDecode(t, body, &b)
		f.typ, f.message = b.Error.Type, b.Error.Message
		f.code, f.param = rawString(t, b.Error.Code), rawString(t, b.Error.Param)
		if ms := h.Get("retry-after-ms"); f.hint != "" || ms != "" {
			f.hint += "/" + ms
		}
	case ProfileAnthropic:
		var b struct {
			Type  string
			Error struct {
				Type    string
				Message string
				Details *struct {
					ErrorCode string `json:"error_code"`
				}
			}
			RequestID string `json:"request_id"`
		}
		strictDecode(t, body, &b)
		if b.Type != "error" || !strings.HasPrefix(b.RequestID, "req_chaos_") || h.Get("request-id") != b.RequestID {
			t.Errorf("anthropic error type %q request_id %q, header %q", b.Type, b.RequestID, h.Get("request-id"))
		}
		f.typ, f.message = b.Error.Type, b.Error.Message
		if b.Error.Details != nil {
			f.code = b.Error.Details.ErrorCode
		}
	case ProfileGemini:
		var b struct {
			Error struct {
				Code    int
				Message string
				Status  string
				Details []json.RawMessage
			}
		}
		strictDecode(t, body, &b)
		if b.Error.Code != rec.Code {
			t.Errorf("gemini error code %d, status %d", b.Error.Code, rec.Code)
		}
		if f.hint != "" {
			t.Errorf("gemini sent Retry-After %q", f.hint)
		}
		f.typ, f.message = b.Error.Status, b.Error.Message
		for _, d := range b.Error.Details {
			var detail struct {
				Type       string `json:"@type"`
				RetryDelay string
				Violations []struct{ QuotaMetric, QuotaID string }
			}
			strictDecode(t, string(d), &detail)
			switch detail.Type {
			case "type.googleapis.com/google.rpc.RetryInfo":
				f.hint = detail.RetryDelay
			case "type.googleapis.com/google.rpc.QuotaFailure":
				v := detail.Violations
				if len(v) != 1 || v[0].QuotaMetric != "generativelanguage.googleapis.com/generate_content_requests" {
					t.Errorf("gemini QuotaFailure %s", d)
				}
				f.code = v[0].QuotaID
			default:
				t.Errorf("gemini detail %s", d)
			}
		}
	}
	return f
}

// hint returns the wait hint of secs seconds as readFailure reports it.
func hint(profile string, secs int) string {
	n := strconv.Itoa(secs)
	switch profile {
	case ProfileOpenAI:
		return n + "/" + strconv.Itoa(secs*1000)
	case ProfileGemini:
		return n + "s"
	}
	return n
}

func TestProfileFailures(t *testing.T) {
	const (
		openAIRate    = "Rate limit reached for requests"
		anthropicRate = "This request would exceed your account's rate limit. Please try again later."
		quotaMessage  = "You exceeded your current quota, please check your plan and billing details."
	)
	tests := []struct {
		profile, mode string
		want          failure // message: a prefix
	}{
		{ProfilePlain, ModeDown, failure{503, "chaos_injected", "down", "", "chaos: injected 503 Service Unavailable", ""}},
		{ProfilePlain, ModeBadRequest, failure{400, "chaos_injected", "badreq", "", "chaos: injected 400 Bad Request", ""}},
		{ProfilePlain, ModeRetryAfter, failure{429, "chaos_injected", "retryafter", "", "chaos: injected 429 Too Many Requests", "2"}},
		{ProfilePlain, ModeOverload, failure{529, "chaos_injected", "overload", "", "chaos: injected 529", ""}},
		{ProfilePlain, ModeQuota, failure{429, "insufficient_quota", "quota", "", "chaos: injected 429", ""}},
		{ProfilePlain, ModeContext, failure{413, "request_too_large", "context", "", "chaos: injected 413", ""}},

		{ProfileOpenAI, ModeDown, failure{503, "server_error", "null", "null", "", ""}},
		{ProfileOpenAI, ModeBadRequest, failure{400, "invalid_request_error", "null", "null", "", ""}},
		{ProfileOpenAI, ModeRetryAfter, failure{429, "requests", "rate_limit_exceeded", "null", openAIRate, "2/2000"}},
		{ProfileOpenAI, ModeOverload, failure{503, "server_error", "null", "null", "The server is overloaded or not ready yet.", ""}},
		{ProfileOpenAI, ModeQuota, failure{429, "insufficient_quota", "insufficient_quota", "null", quotaMessage, ""}},
		{ProfileOpenAI, ModeContext, failure{400, "invalid_request_error", "context_length_exceeded", "messages",
			"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens.", ""}},

		{ProfileAnthropic, ModeDown, failure{503, "api_error", "", "", "Internal server error", ""}},
		{ProfileAnthropic, ModeBadRequest, failure{400, "invalid_request_error", "", "", "", ""}},
		{ProfileAnthropic, ModeRetryAfter, failure{429, "rate_limit_error", "", "", anthropicRate, "2"}},
		{ProfileAnthropic, ModeOverload, failure{529, "overloaded_error", "", "", "Overloaded", ""}},
		{ProfileAnthropic, ModeQuota, failure{429, "rate_limit_error", "enforced_spend_limit_reached", "",
			"This request would exceed your account's monthly spend limit. Please try again later.", ""}},
		{ProfileAnthropic, ModeContext, failure{400, "invalid_request_error", "", "", "prompt is too long: 210000 tokens > 200000 maximum", ""}},

		{ProfileGemini, ModeDown, failure{503, "UNAVAILABLE", "", "", "The service is currently unavailable.", ""}},
		{ProfileGemini, ModeBadRequest, failure{400, "INVALID_ARGUMENT", "", "", "", ""}},
		{ProfileGemini, ModeRetryAfter, failure{429, "RESOURCE_EXHAUSTED", "GenerateRequestsPerMinutePerProjectPerModel", "",
			"Resource has been exhausted (e.g. check quota).", "2s"}},
		{ProfileGemini, ModeOverload, failure{503, "UNAVAILABLE", "", "", "The model is overloaded. Please try again later.", ""}},
		{ProfileGemini, ModeQuota, failure{429, "RESOURCE_EXHAUSTED", "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "", quotaMessage, ""}},
		{ProfileGemini, ModeContext, failure{400, "INVALID_ARGUMENT", "", "",
			"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", ""}},
	}
	for _, tt := range tests {
		s := newServer(t, Config{Profile: tt.profile, RetryAfter: 1500 * time.Millisecond})
		rec := send(s, "POST", "/v1/chat/completions", `{"model":"m"}`, HeaderMode, tt.mode)
		got := readFailure(t, tt.profile, rec)
		if !strings.HasPrefix(got.message, tt.want.message) || got.message == "" {
			t.Errorf("%s %s: message %q, want it to start with %q", tt.profile, tt.mode, got.message, tt.want.message)
		}
		got.message, tt.want.message = "", ""
		if got != tt.want {
			t.Errorf("%s %s: %+v, want %+v", tt.profile, tt.mode, got, tt.want)
		}
		if st := s.Stats(); st.ByStatus[strconv.Itoa(tt.want.status)] != 1 {
			t.Errorf("%s %s: stats %+v, want one %d", tt.profile, tt.mode, st, tt.want.status)
		}
	}
}

func TestProfileRandomFailures(t *testing.T) {
	// Seed 1 begins 429, 500, 200, 200, 200, 503 in every profile.
	want := map[string][3]failure{
		ProfilePlain: {
			{429, "chaos_injected", "random", "", "chaos: injected 429 Too Many Requests", ""},
			{500, "chaos_injected", "random", "", "chaos: injected 500 Internal Server Error", ""},
			{503, "chaos_injected", "random", "", "chaos: injected 503 Service Unavailable", ""},
		},
		ProfileOpenAI: {
			{429, "requests", "rate_limit_exceeded", "null", "", ""},
			{500, "server_error", "null", "null", "", ""},
			{503, "server_error", "null", "null", "", ""},
		},
		ProfileAnthropic: {
			{429, "rate_limit_error", "", "", "", ""},
			{500, "api_error", "", "", "", ""},
			{503, "api_error", "", "", "", ""},
		},
		ProfileGemini: {
			{429, "RESOURCE_EXHAUSTED", "GenerateRequestsPerMinutePerProjectPerModel", "", "", ""},
			{500, "INTERNAL", "", "", "", ""},
			{503, "UNAVAILABLE", "", "", "", ""},
		},
	}
	for _, profile := range allProfiles {
		s := newServer(t, Config{Seed: 1, Profile: profile})
		var got []failure
		for range 6 {
			rec := send(s, "POST", "/v1/chat/completions", "")
			if rec.Code == 200 {
				continue
			}
			f := readFailure(t, profile, rec)
			if f.message == "" {
				t.Errorf("%s: %d without a message", profile, f.status)
			}
			if profile != ProfilePlain {
				f.message = ""
			}
			got = append(got, f)
		}
		if w := want[profile]; !slices.Equal(got, w[:]) {
			t.Errorf("%s: random failures\n%+v, want\n%+v", profile, got, w)
		}
	}
}

func TestProfileDeterminism(t *testing.T) {
	want := []int{429, 500, 200, 200, 200, 503, 500, 429, 429, 429, 503, 200}
	for _, profile := range allProfiles {
		s := newServer(t, Config{Seed: 1, Profile: profile})
		var got []int
		for range want {
			got = append(got, send(s, "POST", "/v1/messages", "").Code)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: seed 1 %v, want %v", profile, got, want)
		}
	}
}

func TestWaitHints(t *testing.T) {
	for _, profile := range allProfiles {
		// Every failure, with HintEveryFailure.
		s := newServer(t, Config{Profile: profile, HintEveryFailure: true, RetryAfter: 3 * time.Second})
		for _, mode := range []string{ModeDown, ModeBadRequest, ModeOverload, ModeQuota, ModeContext, ModeRetryAfter, ModeRandom} {
			rec := send(s, "POST", "/", "", HeaderMode, mode)
			if rec.Code == 200 {
				continue
			}
			if f := readFailure(t, profile, rec); f.hint != hint(profile, 3) {
				t.Errorf("%s %s with HintEveryFailure: hint %q, want %q", profile, mode, f.hint, hint(profile, 3))
			}
		}

		// At the request's asking, overriding the configured wait.
		s = newServer(t, Config{Profile: profile, FailRate: 1})
		for _, c := range []struct {
			mode, secs string
			want       string
		}{
			{ModeDown, "7", hint(profile, 7)},
			{ModeRandom, "0", hint(profile, 0)},
			{ModeRetryAfter, "12", hint(profile, 12)},
			{ModeRetryAfter, "", hint(profile, 1)},
			{ModeDown, "", ""},
			{ModeRandom, "", ""},
		} {
			rec := send(s, "POST", "/", "", HeaderMode, c.mode, HeaderRetryAfter, c.secs)
			if f := readFailure(t, profile, rec); f.hint != c.want {
				t.Errorf("%s %s, %s %q: hint %q, want %q", profile, c.mode, HeaderRetryAfter, c.secs, f.hint, c.want)
			}
		}

		// Never on a success.
		rec := send(s, "POST", "/", "", HeaderMode, ModeOK, HeaderRetryAfter, "5")
		if rec.Code != 200 || rec.Header().Get("Retry-After") != "" || rec.Header().Get("retry-after-ms") != "" ||
			strings.Contains(rec.Body.String(), "RetryInfo") {
			t.Errorf("%s: success with a hint: %d %v %s", profile, rec.Code, rec.Header(), rec.Body)
		}
	}
}

func TestBadRetryAfter(t *testing.T) {
	for _, profile := range allProfiles {
		s := newServer(t, Config{Profile: profile, HintEveryFailure: true})
		for _, v := range []string{"-1", "1.5", "soon", "+2", "99999999999"} {
			rec := send(s, "POST", "/", "", HeaderMode, ModeOK, HeaderRetryAfter, v)
			f := readFailure(t, profile, rec)
			if f.status != 400 || !strings.Contains(f.message, HeaderRetryAfter) || !strings.Contains(f.message, strconv.Quote(v)) {
				t.Errorf("%s %q: %+v, want 400 naming the header and value", profile, v, f)
			}
			if f.hint != "" {
				t.Errorf("%s %q: rejection carries hint %q", profile, v, f.hint)
			}
			if profile == ProfilePlain && (f.typ != "chaos_bad_retry_after" || f.code != v) {
				t.Errorf("plain %q: type %q code %q", v, f.typ, f.code)
			}
		}
	}
}

func TestUnknownProfile(t *testing.T) {
	s := newServer(t, Config{Profile: ProfileOpenAI})
	rec := send(s, "POST", "/v1/chat/completions", "", HeaderProfile, "cohere")
	f := readFailure(t, ProfilePlain, rec)
	if f.status != 400 || f.typ != "chaos_unknown_profile" || f.code != "cohere" ||
		f.message != `chaos: unknown profile "cohere" (want plain, openai, anthropic, gemini, azure, bedrock, local)` {
		t.Errorf("unknown profile: %+v", f)
	}
	if st := s.Stats(); st.Requests != 1 || st.ByStatus["400"] != 1 {
		t.Errorf("stats %+v, want one 400", st)
	}

	// An unknown mode is rejected in the words of the request's profile.
	rec = send(s, "POST", "/v1/chat/completions", "", HeaderMode, "flaky", HeaderProfile, ProfileGemini)
	if f := readFailure(t, ProfileGemini, rec); f.status != 400 || f.typ != "INVALID_ARGUMENT" || !strings.Contains(f.message, `"flaky"`) {
		t.Errorf("unknown mode in gemini: %+v", f)
	}
}

func TestRequestProfile(t *testing.T) {
	s := newServer(t, Config{Profile: ProfileAnthropic, Mode: ModeOverload})
	for _, c := range []struct {
		header string
		status int
	}{{"", 529}, {ProfileGemini, 503}, {ProfilePlain, 529}, {ProfileOpenAI, 503}} {
		rec := send(s, "POST", "/", "", HeaderProfile, c.header)
		profile := cmp.Or(c.header, ProfileAnthropic)
		if f := readFailure(t, profile, rec); f.status != c.status {
			t.Errorf("profile %q: %d, want %d", c.header, f.status, c.status)
		}
	}
}

func TestRateLimitHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// In the bubble the clock starts at 2000-01-01T00:00:00Z.
		tests := []struct {
			profile, mode string
			want          map[string]string
		}{
			{ProfileOpenAI, ModeOK, map[string]string{
				"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "1s",
				"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "29983", "x-ratelimit-reset-tokens": "1s",
				"x-request-id": "req_chaos_0",
			}},
			{ProfileOpenAI, ModeRetryAfter, map[string]string{
				"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "4s", "x-ratelimit-reset-tokens": "4s",
			}},
			{ProfileAnthropic, ModeOK, map[string]string{
				"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
				"anthropic-ratelimit-requests-reset": "2000-01-01T00:00:01Z",
				"anthropic-ratelimit-tokens-limit":   "30000", "anthropic-ratelimit-tokens-remaining": "29983",
				"anthropic-ratelimit-tokens-reset": "2000-01-01T00:00:01Z",
				"request-id":                       "req_chaos_0",
			}},
			{ProfileAnthropic, ModeRetryAfter, map[string]string{
				"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": "2000-01-01T00:00:04Z",
			}},
		}
		for _, tt := range tests {
			s := newServer(t, Config{Profile: tt.profile, RetryAfter: 4 * time.Second})
			h := send(s, "POST", "/v1/messages", "", HeaderMode, tt.mode).Header()
			for k, v := range tt.want {
				if got := h.Get(k); got != v {
					t.Errorf("%s %s: %s %q, want %q", tt.profile, tt.mode, k, got, v)
				}
			}
		}
		for _, profile := range allProfiles {
			s := newServer(t, Config{Profile: profile})
			for _, mode := range []string{ModeOK, ModeRetryAfter, ModeDown} {
				h := send(s, "POST", "/", "", HeaderMode, mode).Header()
				for k := range h {
					limits := strings.Contains(strings.ToLower(k), "ratelimit")
					if limits && (profile == ProfilePlain || profile == ProfileGemini || mode == ModeDown) {
						t.Errorf("%s %s: sends %s", profile, mode, k)
					}
				}
			}
		}
	})
}

// A chat is an OpenAI chat completion or chunk.
type chat struct {
	ID, Object, Model string
	Created           int64
	Choices           []struct {
		Index        int
		Message      *struct{ Role, Content string }
		Delta        *struct{ Role, Content *string }
		FinishReason *string `json:"finish_reason"`
	}
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
}

// A response is an OpenAI Responses API object.
type response struct {
	ID, Object, Status, Model string
	Output                    []struct {
		Type, ID, Status, Role string
		Content                []struct{ Type, Text string }
	}
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	}
}

func (r response) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// A message is an Anthropic message.
type message struct {
	ID, Type, Role, Model string
	Content               []struct{ Type, Text string }
	StopReason            *string `json:"stop_reason"`
	Usage                 struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	}
}

// A generated is a Gemini GenerateContentResponse.
type generated struct {
	Candidates []struct {
		Content struct {
			Parts []struct{ Text string }
			Role  string
		}
		FinishReason string
	}
	UsageMetadata *struct{ PromptTokenCount, CandidatesTokenCount, TotalTokenCount int }
	ModelVersion  string
}

func TestProfileSuccess(t *testing.T) {
	const text = "Hello from chaos."
	s := newServer(t, Config{Mode: ModeOK})
	post := func(profile, path, body string) *httptest.ResponseRecorder {
		t.Helper()
		rec := send(s, "POST", path, body, HeaderProfile, profile)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %q", profile, path, rec.Code, rec.Header().Get("Content-Type"))
		}
		return rec
	}

	for _, c := range []struct{ path, body, model string }{
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[]}`, "gpt-x"},
		{"/v1/engines/x/completions", `{"stream":`, "gpt-chaos"}, // unreadable body: no stream
		{"/v1/chat/completions", `{"stream":true,"pad":"` + strings.Repeat("x", maxBody) + `"}`, "gpt-chaos"},
	} {
		var cc chat
		decode(t, post(ProfileOpenAI, c.path, c.body).Body.Bytes(), &cc)
		if cc.Object != "chat.completion" || cc.Model != c.model || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != text ||
			*cc.Choices[0].FinishReason != "stop" || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens || cc.Usage.CompletionTokens == 0 {
			t.Errorf("openai chat %s %.20q: %+v", c.path, c.body, cc)
		}
	}

	var r response
	decode(t, post(ProfileOpenAI, "/v1/responses", `{"model":"gpt-y","input":"hi"}`).Body.Bytes(), &r)
	if r.Object != "response" || r.Status != "completed" || r.Model != "gpt-y" || r.text() != text || r.Usage.OutputTokens == 0 {
		t.Errorf("openai responses: %+v", r)
	}

	var m message
	rec := post(ProfileAnthropic, "/v1/messages", `{"model":"claude-x","max_tokens":10}`)
	decode(t, rec.Body.Bytes(), &m)
	if m.Type != "message" || m.Role != "assistant" || m.Model != "claude-x" || len(m.Content) != 1 || m.Content[0].Text != text ||
		*m.StopReason != "end_turn" || m.Usage.OutputTokens == 0 {
		t.Errorf("anthropic: %+v", m)
	}

	for _, c := range []struct{ path, model string }{
		{"/v1beta/models/gemini-x:generateContent", "gemini-x"},
		{"/v1beta/generate", "gemini-chaos"},
	} {
		var g generated
		decode(t, post(ProfileGemini, c.path, "").Body.Bytes(), &g)
		if len(g.Candidates) != 1 || g.Candidates[0].Content.Parts[0].Text != text || g.Candidates[0].Content.Role != "model" ||
			g.Candidates[0].FinishReason != "STOP" || g.UsageMetadata.TotalTokenCount == 0 || g.ModelVersion != c.model {
			t.Errorf("gemini %s: %+v", c.path, g)
		}
	}
}

type event struct{ name, data string }

// readStream checks that rec is a flushed event stream and returns its
// events.
func readStream(t *testing.T, rec *httptest.ResponseRecorder) []event {
	t.Helper()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || !rec.Flushed {
		t.Fatalf("stream: %d %q flushed %v", rec.Code, rec.Header().Get("Content-Type"), rec.Flushed)
	}
	body, ok := bytes.CutSuffix(rec.Body.Bytes(), []byte("\n\n"))
	if !ok {
		t.Fatalf("stream does not end with a blank line: %q", rec.Body)
	}
	var events []event
	for block := range strings.SplitSeq(string(body), "\n\n") {
		var e event
		for line := range strings.SplitSeq(block, "\n") {
			switch k, v, _ := strings.Cut(line, ": "); k {
			case "event":
				e.name = v
			case "data":
				e.data = v
			default:
				t.Fatalf("stream line %q", line)
			}
		}
		events = append(events, e)
	}
	return events
}

func TestStreams(t *testing.T) {
	const text = "Hello from chaos."
	s := newServer(t, Config{Mode: ModeOK})

	t.Run("openai chat", func(t *testing.T) {
		for _, usage := range []bool{false, true} {
			body := `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":` + strconv.FormatBool(usage) + `}}`
			events := readStream(t, send(s, "POST", "/v1/chat/completions", body, HeaderProfile, ProfileOpenAI))
			if last := events[len(events)-1]; last != (event{"", "[DONE]"}) {
				t.Fatalf("last event %+v, want data: [DONE]", last)
			}
			var got strings.Builder
			var finishes []string
			var chunks []chat
			for _, e := range events[:len(events)-1] {
				var c chat
				decode(t, []byte(e.data), &c)
				chunks = append(chunks, c)
				if e.name != "" || c.Object != "chat.completion.chunk" || c.Model != "gpt-x" {
					t.Errorf("chunk %+v %+v", e, c)
				}
				for _, ch := range c.Choices {
					if ch.Delta.Content != nil {
						got.WriteString(*ch.Delta.Content)
					}
					if ch.FinishReason != nil {
						finishes = append(finishes, *ch.FinishReason)
					}
				}
			}
			first := chunks[0].Choices[0].Delta
			if first.Role == nil || *first.Role != "assistant" || *first.Content != "" {
				t.Errorf("first chunk %+v", chunks[0])
			}
			if got.String() != text || !slices.Equal(finishes, []string{"stop"}) || len(chunks) != len(successChunks)+2+btoi(usage) {
				t.Errorf("usage %v: text %q finishes %v, %d chunks", usage, got.String(), finishes, len(chunks))
			}
			if last := chunks[len(chunks)-1]; (last.Usage != nil) != usage || usage && (len(last.Choices) != 0 || last.Usage.TotalTokens == 0) {
				t.Errorf("usage %v: last chunk %+v", usage, last)
			}
		}
	})

	t.Run("openai responses", func(t *testing.T) {
		events := readStream(t, send(s, "POST", "/v1/responses", `{"model":"gpt-y","stream":true}`, HeaderProfile, ProfileOpenAI))
		want := []string{
			"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
		}
		var names []string
		var deltas strings.Builder
		for i, e := range events {
			names = append(names, e.name)
			var ev struct {
				Type           string
				SequenceNumber int `json:"sequence_number"`
				Delta, Text    string
				Response       *response
			}
			decode(t, []byte(e.data), &ev)
			if ev.Type != e.name || ev.SequenceNumber != i {
				t.Errorf("event %d %s: type %q sequence_number %d", i, e.name, ev.Type, ev.SequenceNumber)
			}
			deltas.WriteString(ev.Delta)
			switch e.name {
			case "response.output_text.done":
				if ev.Text != text {
					t.Errorf("output_text.done text %q", ev.Text)
				}
			case "response.completed":
				if r := ev.Response; r.Status != "completed" || r.text() != text || r.Model != "gpt-y" || r.Usage == nil {
					t.Errorf("completed response %+v", r)
				}
			}
		}
		if !slices.Equal(names, want) || deltas.String() != text {
			t.Errorf("events %v, deltas %q", names, deltas.String())
		}
	})

	t.Run("anthropic", func(t *testing.T) {
		events := readStream(t, send(s, "POST", "/v1/messages", `{"model":"claude-x","stream":true}`, HeaderProfile, ProfileAnthropic))
		want := []string{
			"message_start", "content_block_start", "ping",
			"content_block_delta", "content_block_delta", "content_block_delta",
			"content_block_stop", "message_delta", "message_stop",
		}
		var names []string
		var deltas strings.Builder
		for _, e := range events {
			names = append(names, e.name)
			var ev struct {
				Type    string
				Message *message
				Delta   struct {
					Type, Text string
					StopReason string `json:"stop_reason"`
				}
				Usage struct {
					OutputTokens int `json:"output_tokens"`
				}
			}
			decode(t, []byte(e.data), &ev)
			if ev.Type != e.name {
				t.Errorf("event %s: type %q", e.name, ev.Type)
			}
			switch e.name {
			case "message_start":
				if m := ev.Message; m.Model != "claude-x" || len(m.Content) != 0 || m.StopReason != nil {
					t.Errorf("message_start %+v", m)
				}
			case "content_block_delta":
				if ev.Delta.Type != "text_delta" {
					t.Errorf("delta %+v", ev.Delta)
				}
				deltas.WriteString(ev.Delta.Text)
			case "message_delta":
				if ev.Delta.StopReason != "end_turn" || ev.Usage.OutputTokens == 0 {
					t.Errorf("message_delta %s", e.data)
				}
			}
		}
		if !slices.Equal(names, want) || deltas.String() != text {
			t.Errorf("events %v, deltas %q", names, deltas.String())
		}
	})

	t.Run("gemini", func(t *testing.T) {
		events := readStream(t, send(s, "POST", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", "", HeaderProfile, ProfileGemini))
		var got strings.Builder
		for i, e := range events {
			var g generated
			decode(t, []byte(e.data), &g)
			last := i == len(events)-1
			c := g.Candidates[0]
			if e.name != "" || c.Content.Role != "model" || g.ModelVersion != "gemini-x" ||
				(c.FinishReason == "STOP") != last || (g.UsageMetadata != nil) != last {
				t.Errorf("chunk %d: %s", i, e.data)
			}
			got.WriteString(c.Content.Parts[0].Text)
		}
		if len(events) != 3 || got.String() != text {
			t.Errorf("%d chunks saying %q", len(events), got.String())
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
