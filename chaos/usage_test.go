package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/internal/provider"
)

// A billing is what a client read of an answer: its text, the usage it
// reported (-1 where none) and its finish reason ("" for none).
type billing struct {
	text    string
	in, out int
	finish  string
}

// A personality is one provider dialect a success can be answered in, with
// a request body carrying promptText (23 bytes, 6 tokens) and a reader of
// its answer.
type personality struct {
	name, profile, path string
	body                string // without the output cap and "stream"
	stream              bool
	read                func(t *testing.T, rec *httptest.ResponseRecorder) billing
}

// promptText is the text of every personality's request: "Be brief." as the
// system's and "Héllo, river?" as the user's, 9 + 14 bytes.
const promptText = "Be brief.Héllo, river?"

var personalities = []personality{
	{
		name: "openai chat", profile: ProfileOpenAI, path: "/v1/chat/completions",
		body: `{"model":"gpt-x","messages":[{"role":"system","content":"Be brief."},` +
			`{"role":"user","content":[{"type":"text","text":"Héllo, river?"},{"type":"image_url","image_url":{"url":"data:,x"}}]}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			var c chat
			decode(t, rec.Body.Bytes(), &c)
			if c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
				t.Errorf("chat usage %+v does not add up", c.Usage)
			}
			return billing{c.Choices[0].Message.Content, c.Usage.PromptTokens, c.Usage.CompletionTokens, *c.Choices[0].FinishReason}
		},
	},
	{
		name: "openai chat stream", profile: ProfileOpenAI, path: "/v1/chat/completions", stream: true,
		body: `{"model":"gpt-x","stream_options":{"include_usage":true},"messages":[{"role":"system","content":"Be brief."},` +
			`{"role":"user","content":"Héllo, river?"}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			b := billing{in: -1, out: -1}
			for _, e := range readStream(t, rec) {
				if e.data == "[DONE]" {
					continue
				}
				var c chat
				decode(t, []byte(e.data), &c)
				for _, ch := range c.Choices {
					b.text += derefOr(ch.Delta.Content)
					if ch.FinishReason != nil {
						b.finish = *ch.FinishReason
					}
				}
				if c.Usage != nil {
					b.in, b.out = c.Usage.PromptTokens, c.Usage.CompletionTokens
				}
			}
			return b
		},
	},
	{
		name: "openai responses", profile: ProfileOpenAI, path: "/v1/responses",
		body: `{"model":"gpt-y","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Héllo, river?"}]}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			return responseBilling(t, rec.Body.Bytes())
		},
	},
	{
		name: "openai responses stream", profile: ProfileOpenAI, path: "/v1/responses", stream: true,
		body: `{"model":"gpt-y","instructions":"Be brief.","input":"Héllo, river?"}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			var b billing
			var deltas strings.Builder
			for _, e := range readStream(t, rec) {
				var ev struct{ Delta string }
				decode(t, []byte(e.data), &ev)
				deltas.WriteString(ev.Delta)
				if e.name == "response.completed" || e.name == "response.incomplete" {
					var end struct{ Response json.RawMessage }
					decode(t, []byte(e.data), &end)
					b = responseBilling(t, end.Response)
					if e.name != "response."+strings.Fields(b.finish)[0] {
						t.Errorf("responses stream ends with %s, response %s", e.name, b.finish)
					}
				}
			}
			if deltas.String() != b.text {
				t.Errorf("responses stream: deltas %q, response %q", deltas.String(), b.text)
			}
			return b
		},
	},
	{
		name: "anthropic", profile: ProfileAnthropic, path: "/v1/messages",
		body: `{"model":"claude-x","system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Héllo, river?"}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			var m message
			decode(t, rec.Body.Bytes(), &m)
			return billing{m.Content[0].Text, m.Usage.InputTokens, m.Usage.OutputTokens, derefOr(m.StopReason)}
		},
	},
	{
		name: "anthropic stream", profile: ProfileAnthropic, path: "/v1/messages", stream: true,
		body: `{"model":"claude-x","system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Héllo, river?"}]}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			b := billing{in: -1, out: -1}
			for _, e := range readStream(t, rec) {
				var ev struct {
					Message *message
					Delta   struct {
						Text       string
						StopReason string `json:"stop_reason"`
					}
					Usage *struct {
						OutputTokens int `json:"output_tokens"`
					}
				}
				decode(t, []byte(e.data), &ev)
				switch e.name {
				case "message_start":
					b.in = ev.Message.Usage.InputTokens
				case "content_block_delta":
					b.text += ev.Delta.Text
				case "message_delta":
					b.out, b.finish = ev.Usage.OutputTokens, ev.Delta.StopReason
				}
			}
			return b
		},
	},
	{
		name: "gemini", profile: ProfileGemini, path: "/v1beta/models/gemini-x:generateContent",
		body: `{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"role":"user","parts":[{"text":"Héllo, river?"}]}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			return geminiBilling(t, []event{{"", rec.Body.String()}})
		},
	},
	{
		name: "gemini stream", profile: ProfileGemini, path: "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
		body: `{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"parts":[{"text":"Héllo, river?"}]}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			return geminiBilling(t, readStream(t, rec))
		},
	},
	{
		name: "bedrock", profile: ProfileBedrock, path: "/model/x/converse",
		body: `{"model":"anthropic.x","system":"Be brief.","messages":[{"role":"user","content":"Héllo, river?"}]}`,
		read: func(t *testing.T, rec *httptest.ResponseRecorder) billing {
			var b struct {
				Output struct {
					Message struct{ Content []struct{ Text string } }
				}
				StopReason string
				Usage      struct{ InputTokens, OutputTokens, TotalTokens int }
			}
			decode(t, rec.Body.Bytes(), &b)
			return billing{b.Output.Message.Content[0].Text, b.Usage.InputTokens, b.Usage.OutputTokens, b.StopReason}
		},
	},
}

func responseBilling(t *testing.T, data []byte) billing {
	t.Helper()
	var r response
	decode(t, data, &r)
	var details struct {
		IncompleteDetails *struct{ Reason string } `json:"incomplete_details"`
	}
	decode(t, data, &details)
	b := billing{text: r.text(), in: r.Usage.InputTokens, out: r.Usage.OutputTokens, finish: r.Status}
	if details.IncompleteDetails != nil {
		b.finish += " " + details.IncompleteDetails.Reason
	}
	if r.Output[0].Status != r.Status {
		t.Errorf("responses: output item %s in a response %s", r.Output[0].Status, r.Status)
	}
	return b
}

func geminiBilling(t *testing.T, events []event) billing {
	t.Helper()
	var b billing
	for i, e := range events {
		var g generated
		decode(t, []byte(e.data), &g)
		b.text += g.Candidates[0].Content.Parts[0].Text
		if last := i == len(events)-1; (g.UsageMetadata != nil) != last {
			t.Fatalf("gemini response %d of %d: %s", i, len(events), e.data)
		}
		if u := g.UsageMetadata; u != nil {
			b.in, b.out, b.finish = u.PromptTokenCount, u.CandidatesTokenCount, g.Candidates[0].FinishReason
			if u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount {
				t.Errorf("gemini usage %+v does not add up", u)
			}
		}
	}
	return b
}

// model returns the model p's requests name: the body's, or for gemini the
// path's.
func (p personality) model(t *testing.T) string {
	if p.profile == ProfileGemini {
		return "gemini-x"
	}
	var m struct{ Model string }
	decode(t, []byte(p.body), &m)
	return m.Model
}

// request returns p's body with the given fields added (as "key":value
// pairs, value in JSON), and "stream" if p streams.
func (p personality) request(fields ...string) string {
	if p.stream && p.profile != ProfileGemini {
		fields = append(fields, `"stream":true`)
	}
	if len(fields) == 0 {
		return p.body
	}
	return "{" + strings.Join(fields, ",") + "," + p.body[1:]
}

// capField returns the field that caps p's output at n tokens.
func (p personality) capField(n int) string {
	switch {
	case p.profile == ProfileGemini:
		return fmt.Sprintf(`"generationConfig":{"maxOutputTokens":%d}`, n)
	case strings.HasSuffix(p.path, "/responses"):
		return fmt.Sprintf(`"max_output_tokens":%d`, n)
	}
	return fmt.Sprintf(`"max_tokens":%d`, n)
}

// finishes are the finish reasons of p's profile for an answer that
// stopped and one its output cap cut short.
func (p personality) finishes() (stopped, capped string) {
	switch {
	case p.profile == ProfileGemini:
		return "STOP", "MAX_TOKENS"
	case strings.HasSuffix(p.path, "/responses"):
		return "completed", "incomplete max_output_tokens"
	case p.profile == ProfileOpenAI:
		return "stop", "length"
	}
	return "end_turn", "max_tokens"
}

// checkTally checks the one tally of s against want, and that the totals
// are its tokens.
func checkTally(t *testing.T, s *Server, key, model string, want Tally) {
	t.Helper()
	st := s.Stats()
	got := map[string]map[string]Tally{key: {model: want}}
	if !maps.EqualFunc(st.Tallies, got, maps.Equal) || st.InputTokens != want.InputTokens || st.OutputTokens != want.OutputTokens {
		t.Errorf("stats tokens %d in, %d out, tallies %v; want %v", st.InputTokens, st.OutputTokens, st.Tallies, got)
	}
}

func TestUsagePerPersonality(t *testing.T) {
	if n := len(promptText); n != 23 {
		t.Fatalf("prompt text of %d bytes", n)
	}
	for _, p := range personalities {
		s := newServer(t, Config{Mode: ModeOK, Profile: p.profile})
		body := p.request()
		rec := send(s, "POST", p.path, body, HeaderTally, "run-"+p.name)
		got := p.read(t, rec)
		stopped, _ := p.finishes()
		// 23 bytes of prompt text: 6 tokens; "Hello from chaos.", 17 bytes: 5.
		if want := (billing{successText, 6, 5, stopped}); got != want {
			t.Errorf("%s: %+v, want %+v", p.name, got, want)
		}
		if (len(body)+3)/4 < got.in {
			t.Errorf("%s: %d input tokens, more than a quarter of the body's %d bytes", p.name, got.in, len(body))
		}
		checkTally(t, s, "run-"+p.name, p.model(t), Tally{Requests: 1, InputTokens: 6, OutputTokens: 5})
	}
}

func TestUsageTextMode(t *testing.T) {
	// The plain profile reports no usage, but is billed like the others.
	s := newServer(t, Config{Mode: ModeText, Seed: 2})
	full := AnswerText(2, "Tell me.")
	for _, stream := range []bool{false, true} {
		s.Reset()
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"Tell me."}]}`, stream)
		send(s, "POST", "/", body)
		checkTally(t, s, "", "m", Tally{Requests: 1, InputTokens: 2, OutputTokens: (len(full) + 3) / 4})
	}
}

func TestInputTokensNeverAboveBody(t *testing.T) {
	// Escapes decode to fewer bytes than they take; an invalid byte decodes
	// to three.
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"messages":[{"role":"user","content":"é"}]}`, 1},
		{`{"messages":[{"role":"user","content":"\u00e9\n\ud83d\ude00"}]}`, 2},
		// 40 bytes of text that decode to 120: a quarter of the body's 83.
		{`{"messages":[{"role":"user","content":"` + strings.Repeat("\xff", 40) + `"}]}`, 21},
		{`{"messages":[{"role":"user","content":""}]}`, 0},
		{`{"messages":[{"role":"user","content":"x"}]`, 0}, // unparsable
		{``, 0},
	} {
		s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI})
		var cc chat
		decode(t, send(s, "POST", "/v1/chat/completions", c.body).Body.Bytes(), &cc)
		if cc.Usage.PromptTokens != c.want || cc.Usage.PromptTokens > (len(c.body)+3)/4 {
			t.Errorf("%q: %d input tokens, want %d", c.body, cc.Usage.PromptTokens, c.want)
		}
	}

	// Seeded random prompts of random runes in every personality.
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 200 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteRune(rune(rng.IntN(0x1F000)))
		}
		text, _ := json.Marshal(b.String())
		p := personalities[rng.IntN(len(personalities))]
		body := strings.ReplaceAll(p.request(), `"Héllo, river?"`, string(text))
		s := newServer(t, Config{Mode: ModeOK, Profile: p.profile})
		got := p.read(t, send(s, "POST", p.path, body))
		if bytes := len("Be brief.") + b.Len(); got.in != (bytes+3)/4 || got.in > (len(body)+3)/4 {
			t.Fatalf("%s %s: %d input tokens for %d bytes of text in a body of %d", p.name, text, got.in, bytes, len(body))
		}
	}
}

func TestOutputCap(t *testing.T) {
	for _, p := range personalities {
		stopped, capped := p.finishes()
		for _, c := range []struct {
			cap    int
			text   string
			finish string
		}{
			{0, "", capped},
			{2, "Hello fr", capped},
			{4, "Hello from chaos", capped},
			{5, successText, stopped},
			{1 << 40, successText, stopped},
		} {
			s := newServer(t, Config{Mode: ModeOK, Profile: p.profile})
			got := p.read(t, send(s, "POST", p.path, p.request(p.capField(c.cap)), HeaderTally, "k"))
			out := (len(c.text) + 3) / 4
			if want := (billing{c.text, 6, out, c.finish}); got != want {
				t.Errorf("%s, cap %d: %+v, want %+v", p.name, c.cap, got, want)
			}
			checkTally(t, s, "k", p.model(t), Tally{Requests: 1, InputTokens: 6, OutputTokens: out})
		}
	}

	// The largest of several caps, of a key named twice or in another
	// case (servers honour the larger of max_tokens and
	// max_completion_tokens, and parsers differ in which duplicate they
	// keep); a negative one is none; a cap that is no number is not one.
	s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI})
	for _, c := range []struct {
		fields string
		text   string
	}{
		{`"max_tokens":4,"max_completion_tokens":2`, "Hello from chaos"},
		{`"max_completion_tokens":2,"max_tokens":4`, "Hello from chaos"},
		{`"max_tokens":4,"max_tokens":2`, "Hello from chaos"},
		{`"max_tokens":2,"MAX_TOKENS":4`, "Hello from chaos"},
		{`"max_tokens":2,"max_to\u212aens":4`, "Hello from chaos"}, // the Kelvin sign folds to k, as in Go
		{`"max_tokens":2,"max_completion_tokens":-1`, successText},
		{`"max_tokens":-1`, successText},
		{`"max_completion_tokens":1.5`, "Hell"},
		{`"max_tokens":"2"`, successText},
		{`"max_tokens":2,"stream":"no"`, "Hello fr"},
	} {
		var cc chat
		decode(t, send(s, "POST", "/v1/chat/completions", "{"+c.fields+"}").Body.Bytes(), &cc)
		if got := cc.Choices[0].Message.Content; got != c.text {
			t.Errorf("%s: %q, want %q", c.fields, got, c.text)
		}
	}
}

func TestOutputCapTextMode(t *testing.T) {
	// A cap holds the text served: a continuation's rest is capped from
	// where it starts, and a cut beyond the cap never comes.
	const prompt = "Cap me."
	full, ends := answer(4, prompt)
	for _, ts := range textStreams {
		s := newServer(t, Config{Mode: ModeText, Seed: 4, Profile: ts.profile})
		for _, c := range []struct {
			prefill string
			start   int
		}{{"", 0}, {full[:ends[2]], ends[2]}} {
			body := textBody(t, ts, prompt, c.prefill)
			field := `"max_tokens":10`
			if ts.profile == ProfileGemini {
				field = `"generationConfig":{"maxOutputTokens":10}`
			} else if strings.HasSuffix(ts.path, "/responses") {
				field = `"max_output_tokens":10`
			}
			body = "{" + field + "," + strings.Replace(body[1:], `"max_tokens":1024,`, "", 1)
			rec := send(s, "POST", ts.path, body, HeaderCutAt, strconv.Itoa(c.start+60))
			pieces, tail := splitText(t, ts, rec.Body.Bytes())
			if got, want := strings.Join(pieces, ""), full[c.start:c.start+40]; got != want {
				t.Errorf("%s from %d: %q, want %q", ts.name, c.start, got, want)
			}
			if len(tail) == 0 && ts.profile != ProfileGemini {
				t.Errorf("%s from %d: no end events", ts.name, c.start)
			}
		}
		if st := s.Stats(); st.OutputTokens != 20 {
			t.Errorf("%s: %d output tokens billed, want 2 × 10", ts.name, st.OutputTokens)
		}
	}
}

func TestCutStreamBilled(t *testing.T) {
	// Stream-cut mode: the pieces sent before the break, however it breaks.
	for _, bs := range brokenStreams {
		for k := range len(successChunks) + 1 {
			s := newServer(t, Config{Mode: ModeStreamCut, FailRate: 1, Profile: bs.profile})
			for range 4 { // both ways of breaking, with seed 0
				trySend(s, "POST", bs.path, bs.body, HeaderCutAfter, strconv.Itoa(k), HeaderTally, "cut")
			}
			sent := len(strings.Join(successChunks[:k], ""))
			checkTally(t, s, "cut", bodyModel(bs.profile, bs.body), Tally{Requests: 4, OutputTokens: 4 * ((sent + 3) / 4)})
		}
	}

	// Text mode: the text delivered before the cut, in every way of cutting.
	const prompt = "Cut me."
	full, ends := answer(2, prompt)
	for _, ts := range textStreams {
		for _, how := range []string{"abort", "close", "error"} {
			s := newServer(t, Config{Mode: ModeText, Seed: 2, Profile: ts.profile})
			body := textBody(t, ts, prompt, "")
			trySend(s, "POST", ts.path, body, HeaderCutAt, strconv.Itoa(ends[3]-1), HeaderCutHow, how)
			var in int
			switch ts.name {
			case "plain", "openai chat":
				in = (len("Be brief.") + len(prompt) + 3) / 4
			default:
				in = (len(prompt) + 3) / 4
			}
			checkTally(t, s, "", bodyModel(ts.profile, body), Tally{Requests: 1, InputTokens: in, OutputTokens: (ends[3] + 3) / 4})
			if ends[3] >= len(full) {
				t.Fatal("the cut is past the answer")
			}
		}
	}
}

// bodyModel returns the model a request of profile with body is tallied
// under.
func bodyModel(profile, body string) string {
	if profile == ProfileGemini {
		return "gemini-x"
	}
	var m struct{ Model string }
	json.Unmarshal([]byte(body), &m)
	return m.Model
}

func TestFailuresBillNothing(t *testing.T) {
	p := personalities[0]
	s := newServer(t, Config{Mode: ModeOK, Profile: p.profile})
	failing := []string{ModeDown, ModeBadRequest, ModeRetryAfter, ModeOverload, ModeQuota, ModeContext, "flaky"}
	for _, mode := range failing {
		rec := send(s, "POST", p.path, p.request(), HeaderMode, mode, HeaderTally, "f")
		if rec.Code < 400 {
			t.Fatalf("%s: %d", mode, rec.Code)
		}
	}
	if _, aborted := trySend(s, "POST", p.path, p.request(), HeaderMode, ModeReset, HeaderTally, "f"); !aborted {
		t.Fatal("reset mode answered")
	}
	checkTally(t, s, "f", "gpt-x", Tally{Requests: len(failing) + 1})

	// A slow success whose client left before the answer: its input only.
	s.Reset()
	req := httptest.NewRequest("POST", p.path, strings.NewReader(p.request()))
	req.Header.Set(HeaderMode, ModeSlow)
	ctx, cancel := context.WithCancel(req.Context())
	cancel()
	tryServe(s, req.WithContext(ctx))
	checkTally(t, s, "", "gpt-x", Tally{Requests: 1, InputTokens: 6})
}

func TestTallies(t *testing.T) {
	// Requests of several keys and models, in several profiles, in order:
	// each counted under its own, and together the totals.
	s := newServer(t, Config{Mode: ModeOK})
	want := map[string]map[string]Tally{}
	var in, out int
	for i, p := range personalities {
		for _, key := range []string{"", "a", "b"} {
			got := p.read(t, send(s, "POST", p.path, p.request(), HeaderProfile, p.profile, HeaderTally, key))
			models := want[key]
			if models == nil {
				models = map[string]Tally{}
				want[key] = models
			}
			tl := models[p.model(t)]
			tl.Requests++
			tl.InputTokens += got.in
			tl.OutputTokens += got.out
			models[p.model(t)] = tl
			in, out = in+got.in, out+got.out
			if i == 0 {
				send(s, "POST", p.path, p.request(), HeaderProfile, p.profile, HeaderTally, key, HeaderMode, ModeDown)
				tl.Requests++
				models[p.model(t)] = tl
			}
		}
	}
	st := s.Stats()
	if !maps.EqualFunc(st.Tallies, want, maps.Equal) || st.InputTokens != in || st.OutputTokens != out {
		t.Errorf("stats %d in, %d out, %v; want %d, %d, %v", st.InputTokens, st.OutputTokens, st.Tallies, in, out, want)
	}
	s.Reset()
	if st := s.Stats(); len(st.Tallies) != 0 || st.InputTokens+st.OutputTokens != 0 {
		t.Errorf("after Reset: %+v", st)
	}
}

func TestTallyBounds(t *testing.T) {
	s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI})
	long := strings.Repeat("k", MaxTallyKey+1)
	send(s, "POST", "/v1/chat/completions", `{"model":"m"}`, HeaderTally, long)
	send(s, "POST", "/v1/chat/completions", `{"model":"`+long+`"}`, HeaderTally, "k")
	send(s, "POST", "/v1/chat/completions", `{"model":"m"}`, HeaderTally, long[1:])
	st := s.Stats()
	if st.Tallies[TallyOverflow][""].Requests != 2 || st.Tallies[long[1:]]["m"].Requests != 1 || len(st.Tallies) != 2 {
		t.Errorf("tallies %v", st.Tallies)
	}

	// A full table: a new pair goes to the overflow, a known one to itself.
	tallies := map[tallyID]*Tally{}
	for i := range MaxTallies {
		tallyOf(tallies, tallyID{strconv.Itoa(i), "m"}).Requests++
	}
	tallyOf(tallies, tallyID{"new", "m"}).Requests++
	tallyOf(tallies, tallyID{"newer", ""}).Requests++
	tallyOf(tallies, tallyID{"7", "m"}).Requests++
	if len(tallies) != MaxTallies+1 || tallies[tallyID{TallyOverflow, ""}].Requests != 2 || tallies[tallyID{"7", "m"}].Requests != 2 {
		t.Errorf("%d tallies, overflow %+v", len(tallies), tallies[tallyID{TallyOverflow, ""}])
	}
}

func TestTalliesConcurrent(t *testing.T) {
	// Concurrent requests of several keys, models and outcomes: counted
	// exactly (and race-free under -race).
	const workers, each = 8, 50
	s := newServer(t, Config{Mode: ModeRandom, FailRate: 0.5, Seed: 7, Profile: ProfileAnthropic})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				body := fmt.Sprintf(`{"model":"m%d","max_tokens":%d,"messages":[{"role":"user","content":"12345678"}]}`, i%3, 1+i%2)
				send(s, "POST", "/v1/messages", body, HeaderTally, strconv.Itoa(w%4))
				if i%10 == 0 {
					s.Stats()
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	var requests, in, out int
	for _, models := range st.Tallies {
		for _, tl := range models {
			requests += tl.Requests
			in += tl.InputTokens
			out += tl.OutputTokens
		}
	}
	ok := st.ByStatus["200"]
	// Each success bills 2 input tokens and 1 or 2 output tokens, a failure
	// nothing.
	if requests != workers*each || st.Requests != requests || in != st.InputTokens || out != st.OutputTokens ||
		in != 2*ok || out < ok || out > 2*ok || ok == 0 || ok == workers*each {
		t.Errorf("stats %+v: tallies add up to %d requests, %d in, %d out; %d successes", st, requests, in, out, ok)
	}
	// Two workers a key, each sending 17 requests for m0 and m1, 16 for m2.
	want := map[string]int{"m0": 34, "m1": 34, "m2": 32}
	for key, models := range st.Tallies {
		for model, tl := range models {
			if k, err := strconv.Atoi(key); err != nil || k >= 4 || tl.Requests != want[model] {
				t.Errorf("tally %q %q: %+v", key, model, tl)
			}
		}
	}
	if len(st.Tallies) != 4 {
		t.Errorf("%d tally keys, want 4", len(st.Tallies))
	}
}

func TestSeveralAnswersAndThoughts(t *testing.T) {
	const capped = "Hello fr" // 2 tokens
	for _, c := range []struct {
		name, profile, path, body string
		answers                   int // each capped
		thoughts                  int
	}{
		{"n", ProfileOpenAI, "/v1/chat/completions", `{"model":"m","n":3,"max_tokens":2}`, 3, 0},
		{"n stream", ProfileOpenAI, "/v1/chat/completions", `{"model":"m","n":3,"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 3, 0},
		{"n twice", ProfileLocal, "/v1/chat/completions", `{"model":"m","n":2,"N":3,"max_tokens":2}`, 3, 0},
		{"n beyond the bound", ProfileOpenAI, "/v1/chat/completions", `{"model":"m","n":1e9,"max_tokens":2}`, maxAnswers, 0},
		{"n in the Responses API", ProfileOpenAI, "/v1/responses", `{"model":"m","n":3,"max_output_tokens":2}`, 1, 0},
		{"n in Anthropic", ProfileAnthropic, "/v1/messages", `{"model":"m","n":3,"max_tokens":2}`, 1, 0},
		{"candidateCount", ProfileGemini, "/v1beta/models/m:generateContent", `{"generationConfig":{"candidateCount":2,"maxOutputTokens":2}}`, 2, 0},
		{"candidate_count", ProfileGemini, "/v1beta/models/m:generateContent", `{"generation_config":{"candidate_count":2,"max_output_tokens":2}}`, 2, 0},
		{"both spellings", ProfileGemini, "/v1beta/models/m:streamGenerateContent", `{"generationConfig":{"candidateCount":2,"max_output_tokens":2},"generation_config":{"candidate_count":4}}`, 4, 0},
		{"thinkingBudget", ProfileGemini, "/v1beta/models/m:generateContent", `{"generationConfig":{"maxOutputTokens":2,"thinkingConfig":{"thinkingBudget":100}}}`, 1, 100},
		{"thinking_budget", ProfileGemini, "/v1beta/models/m:generateContent", `{"generation_config":{"max_output_tokens":2,"thinking_config":{"thinking_budget":1e9}}}`, 1, maxThoughts},
		{"dynamic thinking", ProfileGemini, "/v1beta/models/m:generateContent", `{"generationConfig":{"maxOutputTokens":2,"thinkingConfig":{"thinkingBudget":-1}}}`, 1, 0},
		{"thinking in OpenAI", ProfileOpenAI, "/v1/chat/completions", `{"model":"m","max_tokens":2,"generationConfig":{"thinkingConfig":{"thinkingBudget":100}}}`, 1, 0},
	} {
		s := newServer(t, Config{Mode: ModeOK, Profile: c.profile})
		rec := send(s, "POST", c.path, c.body, HeaderTally, "k")
		var texts []string
		var reported int
		if strings.Contains(rec.Header().Get("Content-Type"), "event-stream") {
			n := map[int]string{}
			for _, e := range readStream(t, rec) {
				if e.data == "[DONE]" {
					continue
				}
				var chunk struct {
					chat
					generated
				}
				decode(t, []byte(e.data), &chunk.chat)
				decode(t, []byte(e.data), &chunk.generated)
				for _, ch := range chunk.chat.Choices {
					if ch.Delta != nil {
						n[ch.Index] += derefOr(ch.Delta.Content)
					}
				}
				for i, g := range chunk.generated.Candidates {
					n[i] += g.Content.Parts[0].Text
				}
				if u := chunk.chat.Usage; u != nil {
					reported = u.CompletionTokens
				}
				if u := chunk.generated.UsageMetadata; u != nil {
					reported = u.CandidatesTokenCount
				}
			}
			for i := range len(n) {
				texts = append(texts, n[i])
			}
		} else {
			var body struct {
				Choices []struct {
					Index   int
					Message struct{ Content string }
				}
				Candidates []struct {
					Index   int
					Content struct{ Parts []struct{ Text string } }
				}
				Content []struct{ Text string }
				Output  []struct{ Content []struct{ Text string } }
				Usage   struct {
					CompletionTokens int `json:"completion_tokens"`
					OutputTokens     int `json:"output_tokens"`
				}
				UsageMetadata struct{ CandidatesTokenCount, ThoughtsTokenCount int }
			}
			decode(t, rec.Body.Bytes(), &body)
			for i, ch := range body.Choices {
				if ch.Index != i {
					t.Errorf("%s: choice %d has index %d", c.name, i, ch.Index)
				}
				texts = append(texts, ch.Message.Content)
			}
			for i, g := range body.Candidates {
				if g.Index != i {
					t.Errorf("%s: candidate %d has index %d", c.name, i, g.Index)
				}
				texts = append(texts, g.Content.Parts[0].Text)
			}
			for _, m := range body.Content {
				texts = append(texts, m.Text)
			}
			for _, o := range body.Output {
				texts = append(texts, o.Content[0].Text)
			}
			reported = body.Usage.CompletionTokens + body.Usage.OutputTokens + body.UsageMetadata.CandidatesTokenCount
			if body.UsageMetadata.ThoughtsTokenCount != c.thoughts {
				t.Errorf("%s: %d thought tokens reported, want %d", c.name, body.UsageMetadata.ThoughtsTokenCount, c.thoughts)
			}
			reported += body.UsageMetadata.ThoughtsTokenCount
		}
		want := slices.Repeat([]string{capped}, c.answers)
		if !slices.Equal(texts, want) {
			t.Errorf("%s: answers %q, want %d of %q", c.name, texts, c.answers, capped)
		}
		out := 2*c.answers + c.thoughts
		if reported != out {
			t.Errorf("%s: %d output tokens reported, want %d", c.name, reported, out)
		}
		checkTally(t, s, "k", cmp.Or(provider.GeminiModel(c.path), "m"), Tally{Requests: 1, OutputTokens: out})
	}
}

func TestContextTokens(t *testing.T) {
	for _, c := range []struct {
		body string
		kept bool
	}{
		{`{"model":"m","previous_response_id":"resp_1","input":"Hi"}`, true},
		{`{"model":"m","conversation":{"id":"conv_1"},"input":"Hi"}`, true},
		{`{"model":"m","prompt":{"id":"pmpt_1"},"input":"Hi"}`, true},
		{`{"model":"m","cachedContent":"cachedContents/c","input":"Hi"}`, true},
		{`{"model":"m","Cached_Content":"cachedContents/c","input":"Hi"}`, true},
		{`{"model":"m","previous_response_id":null,"input":"Hi"}`, false},
		{`{"model":"m","previous_response_id":"","conversation":false,"input":"Hi"}`, false},
		{`{"model":"m","prompt":"Hi","input":"Hi"}`, false},
		{`{"model":"m","input":"Hi"}`, false},
	} {
		s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI})
		send(s, "POST", "/v1/responses", c.body, HeaderContextTokens, "1000", HeaderTally, "k")
		in := 1 // "Hi"
		if c.kept {
			in += 1000
		}
		if got := s.Stats().InputTokens; got != in {
			t.Errorf("%s: %d input tokens billed, want %d", c.body, got, in)
		}
	}
	s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI})
	rec := send(s, "POST", "/v1/responses", `{"previous_response_id":"r"}`, HeaderContextTokens, "lots")
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), HeaderContextTokens) || s.Stats().InputTokens != 0 {
		t.Errorf("a malformed %s: %d %s, %d tokens billed", HeaderContextTokens, rec.Code, rec.Body, s.Stats().InputTokens)
	}
}
