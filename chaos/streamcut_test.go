package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
)

// trySend is send for a request whose handler may abort: it reports whether
// the handler did, and returns what was recorded up to then.
func trySend(s *Server, method, target, body string, headers ...string) (rec *httptest.ResponseRecorder, aborted bool) {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return tryServe(s, req)
}

// tryServe serves req, reporting whether the handler aborted, and returns
// what was recorded up to then.
func tryServe(s *Server, req *http.Request) (rec *httptest.ResponseRecorder, aborted bool) {
	rec = httptest.NewRecorder()
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler {
				panic(r)
			}
			aborted = true
		}
	}()
	s.ServeHTTP(rec, req)
	return rec, false
}

// parseEvents splits body, the part of an event stream received, into its
// events. Every event must be complete.
func parseEvents(t *testing.T, body []byte) []event {
	t.Helper()
	if len(body) == 0 {
		return nil
	}
	rest, ok := bytes.CutSuffix(body, []byte("\n\n"))
	if !ok {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var events []event
	for block := range strings.SplitSeq(string(rest), "\n\n") {
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

// A brokenStream describes the stream of one profile as stream-cut mode
// breaks it.
type brokenStream struct {
	name, profile, path, body string
	// preamble has, for each event that opens the stream, a string its
	// data contains.
	preamble []string
	// piece returns the text of a content event, or false for any other.
	piece func(t *testing.T, e event) (string, bool)
	// inBand returns the in-band error event sent after k pieces.
	inBand func(k int) event
}

var brokenStreams = []brokenStream{
	{
		name: "plain", profile: ProfilePlain, path: "/v1/chat", body: `{"stream":true}`,
		piece: func(t *testing.T, e event) (string, bool) {
			var d struct{ Delta *string }
			decode(t, []byte(e.data), &d)
			return derefOr(d.Delta), e.name == "" && d.Delta != nil
		},
		inBand: func(int) event {
			return event{"", `{"error":{"message":"chaos: injected stream error","type":"chaos_injected"}}`}
		},
	},
	{
		name: "openai chat", profile: ProfileOpenAI, path: "/v1/chat/completions",
		body:     `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true}}`,
		preamble: []string{`"role":"assistant"`},
		piece: func(t *testing.T, e event) (string, bool) {
			var c chat
			decode(t, []byte(e.data), &c)
			if e.name != "" || len(c.Choices) != 1 || c.Choices[0].Delta == nil || c.Choices[0].FinishReason != nil {
				return "", false
			}
			d := c.Choices[0].Delta
			return derefOr(d.Content), d.Role == nil && d.Content != nil
		},
		inBand: func(int) event {
			return event{"", `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`}
		},
	},
	{
		name: "openai responses", profile: ProfileOpenAI, path: "/v1/responses", body: `{"model":"gpt-y","stream":true}`,
		preamble: []string{
			`"type":"response.created"`, `"type":"response.in_progress"`,
			`"type":"response.output_item.added"`, `"type":"response.content_part.added"`,
		},
		piece: func(t *testing.T, e event) (string, bool) {
			var d struct{ Delta string }
			decode(t, []byte(e.data), &d)
			return d.Delta, e.name == "response.output_text.delta"
		},
		inBand: func(k int) event {
			return event{"error", fmt.Sprintf(`{"type":"error","code":"server_error",`+
				`"message":"The server had an error while processing your request.","sequence_number":%d}`, 4+k)}
		},
	},
	{
		name: "anthropic", profile: ProfileAnthropic, path: "/v1/messages", body: `{"model":"claude-x","stream":true}`,
		preamble: []string{`"type":"message_start"`, `"type":"content_block_start"`, `"type":"ping"`},
		piece: func(t *testing.T, e event) (string, bool) {
			var d struct{ Delta struct{ Type, Text string } }
			decode(t, []byte(e.data), &d)
			return d.Delta.Text, e.name == "content_block_delta" && d.Delta.Type == "text_delta"
		},
		inBand: func(int) event {
			return event{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
		},
	},
	{
		name: "gemini", profile: ProfileGemini, path: "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
		piece: func(t *testing.T, e event) (string, bool) {
			var g generated
			decode(t, []byte(e.data), &g)
			if e.name != "" || len(g.Candidates) != 1 || len(g.Candidates[0].Content.Parts) != 1 {
				return "", false
			}
			return g.Candidates[0].Content.Parts[0].Text, true
		},
		inBand: func(int) event {
			return event{"", `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`}
		},
	},
}

func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// streamEnds are what a stream that runs to its end sends and a broken one
// must not, in any profile.
var streamEnds = []string{
	"[DONE]", "message_stop", "message_delta", "content_block_stop", "response.completed",
	"response.output_text.done", "finishReason", `"finish_reason":"stop"`, "usageMetadata",
}

// checkBroken checks that body, a stream of bs broken after k pieces of
// text, has the stream's opening events, then those k pieces, then the
// in-band error event unless the stream was aborted, and nothing else.
func checkBroken(t *testing.T, bs brokenStream, body []byte, k int, aborted bool) {
	t.Helper()
	events := parseEvents(t, body)
	want := len(bs.preamble) + k
	if !aborted {
		want++
	}
	if len(events) != want {
		t.Fatalf("%s, K %d, aborted %v: %d events, want %d: %q", bs.name, k, aborted, len(events), want, body)
	}
	for i, sub := range bs.preamble {
		if e := events[i]; !strings.Contains(e.data, sub) {
			t.Errorf("%s: opening event %d %+v lacks %s", bs.name, i, e, sub)
		}
	}
	var pieces []string
	for _, e := range events[len(bs.preamble) : len(bs.preamble)+k] {
		piece, ok := bs.piece(t, e)
		if !ok {
			t.Errorf("%s: event %+v is not a piece of text", bs.name, e)
		}
		pieces = append(pieces, piece)
	}
	if !slices.Equal(pieces, successChunks[:k]) {
		t.Errorf("%s, K %d: pieces %q, want %q", bs.name, k, pieces, successChunks[:k])
	}
	if !aborted {
		if got, want := events[len(events)-1], bs.inBand(k); got != want {
			t.Errorf("%s, K %d: last event\n%+v, want\n%+v", bs.name, k, got, want)
		}
	}
	for _, end := range streamEnds {
		if bytes.Contains(body, []byte(end)) {
			t.Errorf("%s, K %d: broken stream contains %s", bs.name, k, end)
		}
	}
}

func TestStreamCutInMemory(t *testing.T) {
	for _, bs := range brokenStreams {
		for k := range 5 {
			// The K of Config, then the one of the header.
			for _, header := range []bool{false, true} {
				cfg := Config{Mode: ModeStreamCut, FailRate: 1, Seed: 7, Profile: bs.profile, CutAfter: k}
				var headers []string
				if header {
					cfg.CutAfter = 2
					headers = []string{HeaderCutAfter, strconv.Itoa(k)}
				}
				s := newServer(t, cfg)
				sent := min(k, len(successChunks))
				kinds := map[mishap]int{}
				for n := range uint64(8) {
					rec, aborted := trySend(s, "POST", bs.path, bs.body, headers...)
					_, m := s.outcome(ModeStreamCut, n)
					kinds[m]++
					if aborted != (m == mishapAbort) || m == mishapNone {
						t.Fatalf("%s request %d: aborted %v, outcome %v", bs.name, n, aborted, m)
					}
					if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || !rec.Flushed {
						t.Fatalf("%s: %d %q flushed %v", bs.name, rec.Code, rec.Header().Get("Content-Type"), rec.Flushed)
					}
					checkBroken(t, bs, rec.Body.Bytes(), sent, aborted)
				}
				if kinds[mishapInBand] == 0 || kinds[mishapAbort] == 0 {
					t.Errorf("%s: outcomes %v, want both ways of breaking", bs.name, kinds)
				}
				st := s.Stats()
				if st.StreamsCutInBand != kinds[mishapInBand] || st.StreamsCutAbort != kinds[mishapAbort] ||
					st.StreamsCompleted != 0 || st.ByStatus["200"] != 8 {
					t.Errorf("%s: stats %+v, want %v", bs.name, st, kinds)
				}
			}
		}
	}
}

func TestStreamCutAbortOverHTTP(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, bs := range brokenStreams {
		for _, k := range []int{0, 2} {
			s := newServer(t, Config{Mode: ModeStreamCut, FailRate: 1, Seed: 3, Profile: bs.profile})
			srv := httptest.NewServer(s)
			seen := map[mishap]bool{}
			for n := range uint64(8) {
				req, err := http.NewRequest("POST", srv.URL+bs.path, strings.NewReader(bs.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(HeaderCutAfter, strconv.Itoa(k))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s request %d: %v", bs.name, n, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				_, m := s.outcome(ModeStreamCut, n)
				seen[m] = true
				switch {
				case resp.StatusCode != 200:
					t.Errorf("%s request %d: status %d", bs.name, n, resp.StatusCode)
				case m == mishapAbort && !errors.Is(err, io.ErrUnexpectedEOF):
					t.Errorf("%s request %d: aborted stream read with %v, want an unexpected EOF", bs.name, n, err)
				case m == mishapInBand && err != nil:
					t.Errorf("%s request %d: in-band stream read with %v", bs.name, n, err)
				}
				checkBroken(t, bs, body, k, m == mishapAbort)
			}
			srv.Close()
			if !seen[mishapAbort] || !seen[mishapInBand] {
				t.Errorf("%s: outcomes %v, want both ways of breaking", bs.name, seen)
			}
		}
	}
}

func TestStreamCutCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// With a failure almost never drawn, a stream in stream-cut mode is
		// the stream of ok mode, byte for byte (the bubble's clock stands
		// still).
		for _, bs := range brokenStreams {
			if bs.profile == ProfilePlain {
				continue // plain streams in no other mode
			}
			cut := newServer(t, Config{Mode: ModeStreamCut, FailRate: 1e-9, Profile: bs.profile})
			ok := newServer(t, Config{Mode: ModeOK, Profile: bs.profile})
			got := send(cut, "POST", bs.path, bs.body).Body.String()
			want := send(ok, "POST", bs.path, bs.body).Body.String()
			if got != want {
				t.Errorf("%s: stream-cut stream\n%s\nwant\n%s", bs.name, got, want)
			}
			if st := cut.Stats(); st.StreamsCompleted != 1 || st.StreamsCutInBand+st.StreamsCutAbort != 0 {
				t.Errorf("%s: stats %+v, want one completed stream", bs.name, st)
			}
		}
	})

	s := newServer(t, Config{Mode: ModeStreamCut, FailRate: 1e-9})
	events := parseEvents(t, send(s, "POST", "/", `{"stream":true}`).Body.Bytes())
	want := []event{{"", `{"delta":"Hello"}`}, {"", `{"delta":" from"}`}, {"", `{"delta":" chaos."}`}, {"", "[DONE]"}}
	if !slices.Equal(events, want) {
		t.Errorf("plain stream %+v, want %+v", events, want)
	}
}

func TestStreamCutRate(t *testing.T) {
	const n = 400
	s := newServer(t, Config{Mode: ModeStreamCut, FailRate: 0.05, Seed: 11, Profile: ProfileAnthropic})
	for range n {
		trySend(s, "POST", "/v1/messages", `{"stream":true}`)
	}
	st := s.Stats()
	broken := st.StreamsCutInBand + st.StreamsCutAbort
	if st.StreamsCompleted+broken != n || broken == 0 || broken > n/10 {
		t.Errorf("FailRate 0.05: stats %+v, want most of %d streams completed", st, n)
	}
}

// streamOutcomes returns how each of n streams of s ended.
func streamOutcomes(s *Server, n int) []string {
	out := make([]string, n)
	for i := range out {
		rec, aborted := trySend(s, "POST", "/", `{"stream":true}`)
		switch {
		case aborted:
			out[i] = "abort"
		case strings.Contains(rec.Body.String(), "[DONE]"):
			out[i] = "done"
		default:
			out[i] = "in-band"
		}
	}
	return out
}

func TestStreamCutDeterminism(t *testing.T) {
	cfg := Config{Mode: ModeStreamCut, FailRate: 0.5, Seed: 1}
	a := newServer(t, cfg)
	first := streamOutcomes(a, 64)
	a.Reset()
	if again := streamOutcomes(a, 64); !slices.Equal(first, again) {
		t.Errorf("seed 1 after Reset:\n%v, want\n%v", again, first)
	}
	if other := streamOutcomes(newServer(t, cfg), 64); !slices.Equal(first, other) {
		t.Errorf("seed 1 on another server:\n%v, want\n%v", other, first)
	}
	cfg.Seed = 2
	if other := streamOutcomes(newServer(t, cfg), 64); slices.Equal(first, other) {
		t.Error("seeds 1 and 2 gave the same outcomes")
	}
	for _, kind := range []string{"done", "in-band", "abort"} {
		if !slices.Contains(first, kind) {
			t.Errorf("seed 1: outcomes %v lack %s", first, kind)
		}
	}
}

func TestStreamCutNoStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A request that asks for no stream is answered as in ok mode.
		for _, c := range []struct{ profile, path, body string }{
			{ProfilePlain, "/", `{"stream":false}`},
			{ProfileOpenAI, "/v1/chat/completions", `{"model":"gpt-x"}`},
			{ProfileOpenAI, "/v1/responses", `{"model":"gpt-x"}`},
			{ProfileAnthropic, "/v1/messages", `{"model":"claude-x"}`},
			{ProfileGemini, "/v1beta/models/gemini-x:generateContent", ""},
		} {
			cut := newServer(t, Config{Mode: ModeStreamCut, FailRate: 1, Profile: c.profile})
			ok := newServer(t, Config{Mode: ModeOK, Profile: c.profile})
			got, want := send(cut, "POST", c.path, c.body), send(ok, "POST", c.path, c.body)
			if got.Code != 200 || got.Body.String() != want.Body.String() || !equalHeaders(got.Header(), want.Header()) {
				t.Errorf("%s %s: %d %v %s, want %v %s", c.profile, c.path, got.Code, got.Header(), got.Body, want.Header(), want.Body)
			}
			if st := cut.Stats(); st.StreamsCompleted+st.StreamsCutInBand+st.StreamsCutAbort != 0 {
				t.Errorf("%s %s: stats %+v count a stream", c.profile, c.path, st)
			}
		}
	})
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestBadCutAfter(t *testing.T) {
	for _, profile := range allProfiles {
		s := newServer(t, Config{Mode: ModeStreamCut, Profile: profile})
		for _, v := range []string{"-1", "1.5", "two", "+2", "99999999999999999999"} {
			rec := send(s, "POST", "/v1/messages", `{"stream":true}`, HeaderCutAfter, v)
			f := readFailure(t, profile, rec)
			if f.status != 400 || !strings.Contains(f.message, HeaderCutAfter) || !strings.Contains(f.message, strconv.Quote(v)) {
				t.Errorf("%s %q: %+v, want 400 naming the header and value", profile, v, f)
			}
			if profile == ProfilePlain && (f.typ != "chaos_bad_cut_after" || f.code != v) {
				t.Errorf("plain %q: type %q code %q", v, f.typ, f.code)
			}
		}
		if st := s.Stats(); st.Requests != 5 || st.ByStatus["400"] != 5 || st.StreamsCutInBand+st.StreamsCutAbort+st.StreamsCompleted != 0 {
			t.Errorf("%s: stats %+v, want five 400s", profile, st)
		}
	}

	// Other modes ignore the header.
	s := newServer(t, Config{Mode: ModeOK})
	if rec := send(s, "POST", "/", "", HeaderCutAfter, "two"); rec.Code != 200 {
		t.Errorf("ok mode with a malformed %s: %d, want 200", HeaderCutAfter, rec.Code)
	}
}

func TestNewCutAfter(t *testing.T) {
	if _, err := New(Config{CutAfter: -1}); err == nil || err.Error() != "chaos: negative cut-after -1" {
		t.Errorf("New with CutAfter -1: %v", err)
	}
	if s := newServer(t, Config{CutAfter: 2}); s.cfg.CutAfter != 2 {
		t.Errorf("CutAfter %d, want 2", s.cfg.CutAfter)
	}
}

func TestStreamStatsJSON(t *testing.T) {
	s := newServer(t, Config{Mode: ModeStreamCut, Seed: 1, FailRate: 0.5})
	streamOutcomes(s, 16)
	st := s.Stats()
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"requests":16,"by_status":{"200":16},"streams_completed":%d,"streams_cut_inband":%d,"streams_cut_abort":%d,`+
		`"input_tokens":0,"output_tokens":%d,"tallies":{"":{"":{"requests":16,"input_tokens":0,"output_tokens":%[4]d}}}}`,
		st.StreamsCompleted, st.StreamsCutInBand, st.StreamsCutAbort, st.OutputTokens)
	if string(data) != want || st.StreamsCompleted*st.StreamsCutInBand*st.StreamsCutAbort == 0 {
		t.Errorf("stats %s, want %s with no zero count", data, want)
	}
	s.Reset()
	if data, _ := json.Marshal(s.Stats()); string(data) != `{"requests":0,"by_status":{},"input_tokens":0,"output_tokens":0,"tallies":{}}` {
		t.Errorf("stats after Reset %s", data)
	}
}
