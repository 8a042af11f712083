package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode"
)

// A textStream is a brokenStream whose request carries a conversation, and
// the events that end its stream normally.
type textStream struct {
	brokenStream
	// ends has, for each event after the last piece of a stream that ends
	// normally, a string its data contains. In gemini the last piece ends
	// the stream.
	ends []string
}

var textStreams = func() []textStream {
	ends := map[string][]string{
		"plain":            {"[DONE]"},
		"openai chat":      {`"finish_reason":"stop"`, `"usage":{`, "[DONE]"},
		"openai responses": {`"response.output_text.done"`, `"response.content_part.done"`, `"response.output_item.done"`, `"response.completed"`},
		"anthropic":        {`"content_block_stop"`, `"stop_reason":"end_turn"`, `"message_stop"`},
		"gemini":           nil,
	}
	var out []textStream
	for _, bs := range brokenStreams {
		out = append(out, textStream{bs, ends[bs.name]})
	}
	return out
}()

// textBody returns the body of a request of ts whose first user message is
// prompt and, if prefill is not "", whose conversation goes on with the
// assistant's prefill, followed, as OpenAI clients continue, by a user's
// request to continue.
func textBody(t *testing.T, ts textStream, prompt, prefill string) string {
	t.Helper()
	body := map[string]any{}
	if err := json.Unmarshal([]byte(ts.body), &body); ts.body != "" && err != nil {
		t.Fatal(err)
	}
	msg := func(role string, content any) map[string]any { return map[string]any{"role": role, "content": content} }
	blocks := func(typ, text string) []any { return []any{map[string]any{"type": typ, "text": text}} }
	switch ts.name {
	case "plain", "openai chat":
		msgs := []any{msg("system", "Be brief."), msg("user", prompt)}
		if prefill != "" {
			msgs = append(msgs, msg("assistant", prefill), msg("user", "Continue exactly where you stopped."))
		}
		body["messages"] = msgs
	case "openai responses":
		if prefill == "" {
			body["input"] = prompt
		} else {
			body["input"] = []any{msg("user", blocks("input_text", prompt)), msg("assistant", blocks("output_text", prefill)), msg("user", "Continue.")}
		}
	case "anthropic":
		msgs := []any{msg("user", blocks("text", prompt))}
		if prefill != "" {
			msgs = append(msgs, msg("assistant", blocks("text", prefill)))
		}
		body["messages"], body["max_tokens"] = msgs, 1024
	case "gemini":
		turn := func(role, text string) any {
			return map[string]any{"role": role, "parts": []any{map[string]any{"text": text}}}
		}
		contents := []any{turn("user", prompt)}
		if prefill != "" {
			contents = append(contents, turn("model", prefill))
		}
		body["contents"] = contents
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// splitText checks that body, a text-mode stream of ts, opens with the
// stream's opening events, and returns the pieces of text that follow them
// and the events after those.
func splitText(t *testing.T, ts textStream, body []byte) (pieces []string, tail []event) {
	t.Helper()
	events := parseEvents(t, body)
	if len(events) < len(ts.preamble) {
		t.Fatalf("%s: %d events, fewer than the opening ones: %q", ts.name, len(events), body)
	}
	for i, sub := range ts.preamble {
		if !strings.Contains(events[i].data, sub) {
			t.Errorf("%s: opening event %d %+v lacks %s", ts.name, i, events[i], sub)
		}
	}
	i := len(ts.preamble)
	for ; i < len(events); i++ {
		piece, ok := textPiece(t, ts, events[i])
		if !ok {
			break
		}
		pieces = append(pieces, piece)
	}
	return pieces, events[i:]
}

// textPiece returns the text of e, an event of ts, if it is a piece of
// text.
func textPiece(t *testing.T, ts textStream, e event) (string, bool) {
	t.Helper()
	if e.data == "[DONE]" || strings.Contains(e.data, `"error"`) {
		return "", false
	}
	return ts.piece(t, e)
}

// checkEnded checks that a stream of ts whose pieces and tail splitText
// returned ended normally.
func checkEnded(t *testing.T, ts textStream, body []byte, tail []event) {
	t.Helper()
	if len(tail) != len(ts.ends) {
		t.Fatalf("%s: %d events after the text, want %d: %+v", ts.name, len(tail), len(ts.ends), tail)
	}
	for i, sub := range ts.ends {
		if !strings.Contains(tail[i].data, sub) {
			t.Errorf("%s: end event %d %+v lacks %s", ts.name, i, tail[i], sub)
		}
	}
	if ts.profile == ProfileGemini {
		events := parseEvents(t, body)
		for i, e := range events {
			last := i == len(events)-1
			if strings.Contains(e.data, `"finishReason":"STOP"`) != last || strings.Contains(e.data, "usageMetadata") != last {
				t.Errorf("gemini event %d of %d: %s", i, len(events), e.data)
			}
		}
	}
}

// expected returns the text a stream of the answer full, with pieces ending
// at ends, delivers from start when cut at n (-1 for no cut), and whether
// it is cut.
func expected(full string, ends []int, start, n int) (string, bool) {
	switch {
	case n < 0, start > 0 && start >= n:
		return full[start:], false
	case n == 0:
		return "", true
	}
	for _, e := range ends {
		if e >= n {
			return full[start:e], true
		}
	}
	return full[start:], false
}

func TestAnswerText(t *testing.T) {
	a := AnswerText(1, "Tell me about rivers.")
	if b := AnswerText(1, "Tell me about rivers."); a != b {
		t.Errorf("same seed and prompt, two answers:\n%q\n%q", a, b)
	}
	if b := AnswerText(1, "Tell me about bridges."); a == b {
		t.Error("two prompts, the same answer")
	}
	if b := AnswerText(2, "Tell me about rivers."); a == b {
		t.Error("two seeds, the same answer")
	}
	var doubles, newlines int
	for i := range 64 {
		prompt := fmt.Sprintf("prompt %d", i)
		text, ends := answer(3, prompt)
		if text != AnswerText(3, prompt) {
			t.Fatalf("%q: answer and AnswerText differ", prompt)
		}
		if n := len(strings.Fields(text)); n < 40 || n > 80 {
			t.Errorf("%q: %d words", prompt, n)
		}
		if strings.TrimSpace(text) != text || !strings.HasSuffix(text, ".") || !unicode.IsUpper(rune(text[0])) {
			t.Errorf("%q: answer %q", prompt, text)
		}
		for _, r := range text {
			if r > unicode.MaxASCII || r < ' ' && r != '\n' {
				t.Fatalf("%q: answer has %q", prompt, r)
			}
		}
		doubles += strings.Count(text, "  ")
		newlines += strings.Count(text, "\n")
		from := 0
		for _, end := range ends {
			piece := text[from:end]
			if n := len(strings.Fields(piece)); n < 1 || n > 3 || strings.TrimRightFunc(piece, unicode.IsSpace) != piece {
				t.Errorf("%q: piece %q", prompt, piece)
			}
			from = end
		}
		if from != len(text) {
			t.Errorf("%q: pieces end at %d of %d", prompt, from, len(text))
		}
	}
	if doubles == 0 || newlines == 0 {
		t.Errorf("64 answers with %d double spaces and %d newlines, want some of each", doubles, newlines)
	}
}

func TestTextStreams(t *testing.T) {
	const prompt = "Write about harbors."
	full, ends := answer(9, prompt)
	for _, ts := range textStreams {
		// Config.Mode, then the header; the sequence number changes the text
		// of no request.
		for _, header := range []bool{false, true} {
			cfg, headers := Config{Mode: ModeText, Seed: 9, Profile: ts.profile}, []string(nil)
			if header {
				cfg.Mode, headers = ModeOK, []string{HeaderMode, ModeText}
			}
			s := newServer(t, cfg)
			for range 2 {
				rec := send(s, "POST", ts.path, textBody(t, ts, prompt, ""), headers...)
				if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || !rec.Flushed {
					t.Fatalf("%s: %d %q flushed %v", ts.name, rec.Code, rec.Header().Get("Content-Type"), rec.Flushed)
				}
				pieces, tail := splitText(t, ts, rec.Body.Bytes())
				if got := strings.Join(pieces, ""); got != full || len(pieces) != len(ends) {
					t.Errorf("%s: %d pieces saying\n%q\nwant %d saying\n%q", ts.name, len(pieces), got, len(ends), full)
				}
				checkEnded(t, ts, rec.Body.Bytes(), tail)
			}
			if st := s.Stats(); st.Requests != 2 || st.ByStatus["200"] != 2 || st.Continuations != 0 ||
				st.StreamsCompleted+st.StreamsCutAbort+st.StreamsCutInBand != 0 {
				t.Errorf("%s: stats %+v", ts.name, st)
			}
		}
	}
}

func TestTextNoStream(t *testing.T) {
	const prompt = "Say something."
	s := newServer(t, Config{Mode: ModeText, Seed: 4})
	full := AnswerText(4, prompt)
	text := func(profile, path, body string) string {
		t.Helper()
		rec := send(s, "POST", path, body, HeaderProfile, profile, HeaderCutAt, "3", HeaderStall, "1:1h")
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %q", profile, path, rec.Code, rec.Header().Get("Content-Type"))
		}
		return rec.Body.String()
	}
	chatBody := `{"messages":[{"role":"user","content":` + strconv.Quote(prompt) + `}]}`

	var p okBody
	decode(t, []byte(text(ProfilePlain, "/", chatBody)), &p)
	var cc chat
	decode(t, []byte(text(ProfileOpenAI, "/v1/chat/completions", chatBody)), &cc)
	var r response
	decode(t, []byte(text(ProfileOpenAI, "/v1/responses", `{"input":`+strconv.Quote(prompt)+`}`)), &r)
	var m message
	decode(t, []byte(text(ProfileAnthropic, "/v1/messages", chatBody)), &m)
	var g generated
	decode(t, []byte(text(ProfileGemini, "/v1beta/models/g:generateContent", `{"contents":[{"parts":[{"text":`+strconv.Quote(prompt)+`}]}]}`)), &g)
	var b struct {
		Output struct {
			Message struct{ Content []struct{ Text string } }
		}
		Usage struct{ OutputTokens int }
	}
	decode(t, []byte(text(ProfileBedrock, "/model/x/converse", chatBody+"\n")), &b)

	out := (len(full) + 3) / 4 // a token per 4 bytes, rounded up
	for name, got := range map[string]string{
		"plain": p.Text, "openai chat": cc.Choices[0].Message.Content, "openai responses": r.text(),
		"anthropic": m.Content[0].Text, "gemini": g.Candidates[0].Content.Parts[0].Text,
		"bedrock": b.Output.Message.Content[0].Text,
	} {
		if got != full {
			t.Errorf("%s: text %q, want %q", name, got, full)
		}
	}
	if cc.Usage.CompletionTokens != out || r.Usage.OutputTokens != out || m.Usage.OutputTokens != out ||
		g.UsageMetadata.CandidatesTokenCount != out || b.Usage.OutputTokens != out {
		t.Errorf("output tokens %d %d %d %d %d, want %d", cc.Usage.CompletionTokens, r.Usage.OutputTokens,
			m.Usage.OutputTokens, g.UsageMetadata.CandidatesTokenCount, b.Usage.OutputTokens, out)
	}
}

func TestTextCut(t *testing.T) {
	const prompt = "Cut me."
	full, ends := answer(2, prompt)
	cuts := []int{0, 1, ends[0], ends[0] + 1, ends[2], len(full) - 1, len(full), len(full) + 1}
	for _, ts := range textStreams {
		s := newServer(t, Config{Mode: ModeText, Seed: 2, Profile: ts.profile})
		for _, how := range []string{"", "abort", "close", "error"} {
			for _, n := range cuts {
				headers := []string{HeaderCutAt, strconv.Itoa(n)}
				if how != "" {
					headers = append(headers, HeaderCutHow, how)
				}
				rec, aborted := trySend(s, "POST", ts.path, textBody(t, ts, prompt, ""), headers...)
				want, cut := expected(full, ends, 0, n)
				if rec.Code != 200 || aborted != (cut && (how == "" || how == "abort")) {
					t.Fatalf("%s %q at %d: %d, aborted %v", ts.name, how, n, rec.Code, aborted)
				}
				body := rec.Body.Bytes()
				pieces, tail := splitText(t, ts, body)
				if got := strings.Join(pieces, ""); got != want {
					t.Errorf("%s %q at %d: delivered\n%q\nwant\n%q", ts.name, how, n, got, want)
				}
				if !cut {
					checkEnded(t, ts, body, tail)
					continue
				}
				for _, end := range streamEnds {
					if strings.Contains(string(body), end) {
						t.Errorf("%s %q at %d: cut stream contains %s", ts.name, how, n, end)
					}
				}
				switch {
				case how == "error" && (len(tail) != 1 || tail[0] != ts.inBand(len(pieces))):
					t.Errorf("%s at %d: events after the text %+v, want %+v", ts.name, n, tail, ts.inBand(len(pieces)))
				case how != "error" && len(tail) != 0:
					t.Errorf("%s %q at %d: events after the text %+v", ts.name, how, n, tail)
				}
			}
		}
	}
}

func TestTextCutOverHTTP(t *testing.T) {
	// Aborted, the body ends unexpectedly; closed, it ends cleanly, short.
	s := newServer(t, Config{Mode: ModeText, Seed: 2, Profile: ProfileAnthropic})
	srv := httptest.NewServer(s)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ts := textStreams[3]
	full, ends := answer(2, "p")
	for _, how := range []string{"abort", "close"} {
		req, err := http.NewRequest("POST", srv.URL+ts.path, strings.NewReader(textBody(t, ts, "p", "")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(HeaderCutAt, strconv.Itoa(ends[1]))
		req.Header.Set(HeaderCutHow, how)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (how == "abort") != errors.Is(err, io.ErrUnexpectedEOF) || how == "close" && err != nil {
			t.Errorf("%s: read with %v", how, err)
		}
		if pieces, _ := splitText(t, ts, body); strings.Join(pieces, "") != full[:ends[1]] {
			t.Errorf("%s: delivered %q", how, strings.Join(pieces, ""))
		}
	}
}

func TestTextContinuation(t *testing.T) {
	const prompt = "Go on."
	full, ends := answer(6, prompt)
	for _, ts := range textStreams {
		s := newServer(t, Config{Mode: ModeText, Seed: 6, Profile: ts.profile})
		for _, c := range []struct {
			name    string
			prefill string
			start   int
		}{
			{"after a piece", full[:ends[3]], ends[3]},
			{"mid-word", full[:ends[3]-2], ends[3] - 2},
			// Trimmed, the prefill ends before the separator, and the rest
			// starts with it.
			{"trimmed", full[:ends[3]+1] + " \n", ends[3]},
			{"whole", full, len(full)},
			{"not a prefix", "Something else entirely.", 0},
			{"only whitespace", "  ", 0},
		} {
			rec := send(s, "POST", ts.path, textBody(t, ts, prompt, c.prefill))
			pieces, tail := splitText(t, ts, rec.Body.Bytes())
			if got := strings.Join(pieces, ""); got != full[c.start:] {
				t.Errorf("%s %s: rest\n%q\nwant\n%q", ts.name, c.name, got, full[c.start:])
			}
			if c.start > 0 && strings.TrimRightFunc(c.prefill, unicode.IsSpace)+strings.Join(pieces, "") != full {
				t.Errorf("%s %s: trimmed prefill and rest do not join to the answer", ts.name, c.name)
			}
			checkEnded(t, ts, rec.Body.Bytes(), tail)
		}
		if st := s.Stats(); st.Continuations != 4 {
			t.Errorf("%s: %d continuations, want 4", ts.name, st.Continuations)
		}
	}
}

func TestTextContinuationPastCut(t *testing.T) {
	const prompt = "Twice."
	full, ends := answer(8, prompt)
	n := ends[4] - 1 // within the fifth piece
	for _, ts := range textStreams {
		s := newServer(t, Config{Mode: ModeText, Seed: 8, Profile: ts.profile})
		cut := func(prefill string) (string, []event) {
			rec, aborted := trySend(s, "POST", ts.path, textBody(t, ts, prompt, prefill),
				HeaderCutAt, strconv.Itoa(n), HeaderCutHow, "close")
			if aborted {
				t.Fatalf("%s: aborted", ts.name)
			}
			pieces, tail := splitText(t, ts, rec.Body.Bytes())
			return strings.Join(pieces, ""), tail
		}
		first, tail := cut("")
		if first != full[:ends[4]] || len(tail) != 0 {
			t.Fatalf("%s: first stream %q %+v", ts.name, first, tail)
		}
		// Continued from before the cut, the stream is cut at the same place.
		if got, tail := cut(full[:ends[1]]); got != full[ends[1]:ends[4]] || len(tail) != 0 {
			t.Errorf("%s: continued from before the cut: %q %+v", ts.name, got, tail)
		}
		// From what the cut stream delivered, or beyond, it is not.
		for _, start := range []int{n, ends[4], ends[6]} {
			rec := send(s, "POST", ts.path, textBody(t, ts, prompt, full[:start]), HeaderCutAt, strconv.Itoa(n))
			pieces, tail := splitText(t, ts, rec.Body.Bytes())
			if got := strings.Join(pieces, ""); full[:start]+got != full {
				t.Errorf("%s from %d: rest %q", ts.name, start, got)
			}
			checkEnded(t, ts, rec.Body.Bytes(), tail)
		}
	}
}

// pipeTransport serves requests with a handler in memory, streaming the
// body through a pipe as the handler writes it, so that inside a synctest
// bubble a client sees each event when it is sent, in virtual time.
type pipeTransport struct {
	h  http.Handler
	wg *sync.WaitGroup // handlers running
}

func (p pipeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	p.wg.Go(func() {
		defer func() {
			err := io.ErrUnexpectedEOF
			if r := recover(); r == nil {
				err = nil
			} else if r != http.ErrAbortHandler {
				panic(r)
			}
			w.WriteHeader(http.StatusOK)
			pw.CloseWithError(err)
		}()
		p.h.ServeHTTP(w, req)
	})
	<-w.ready
	return &http.Response{StatusCode: w.code, Header: w.sent, Body: pr, Request: req}, nil
}

type pipeWriter struct {
	header, sent http.Header
	code         int
	pw           *io.PipeWriter
	ready        chan struct{} // closed by WriteHeader
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if w.sent == nil {
		w.code, w.sent = code, w.header.Clone()
		close(w.ready)
	}
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

func (w *pipeWriter) Flush() {}

// A timedEvent is an event and when, since the request, the client read it.
type timedEvent struct {
	event
	at time.Duration
}

// readTimed reads the events of body, timing each by its data line.
func readTimed(t *testing.T, body io.Reader, start time.Time) []timedEvent {
	t.Helper()
	var out []timedEvent
	name := ""
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			name = v
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, timedEvent{event{name, data}, time.Since(start)})
			name = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTextTiming(t *testing.T) {
	const prompt = "Take your time."
	full, ends := answer(5, prompt)
	for _, ts := range textStreams {
		synctest.Test(t, func(t *testing.T) {
			var wg sync.WaitGroup
			defer wg.Wait()
			s := newServer(t, Config{Mode: ModeText, Seed: 5, Profile: ts.profile})
			client := &http.Client{Transport: pipeTransport{s, &wg}}
			req, err := http.NewRequest("POST", "http://chaos"+ts.path, strings.NewReader(textBody(t, ts, prompt, "")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(HeaderFirstTokenDelay, "300ms")
			req.Header.Set(HeaderStall, strconv.Itoa(ends[3]-1)+":2s") // after the fourth piece
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			events := readTimed(t, resp.Body, start)
			var text strings.Builder
			k := 0 // pieces read
			for i, e := range events {
				want := 2300 * time.Millisecond
				switch {
				case i < len(ts.preamble):
					want = 0
				case k < 4:
					want = 300 * time.Millisecond
				}
				if piece, ok := textPiece(t, ts, e.event); ok && i >= len(ts.preamble) {
					text.WriteString(piece)
					k++
				}
				if e.at != want {
					t.Errorf("%s: event %d (piece %d) read at %v, want %v: %s", ts.name, i, k, e.at, want, e.data)
				}
			}
			if text.String() != full {
				t.Errorf("%s: text %q", ts.name, text.String())
			}
		})
	}
}

func TestTextClientGoesAway(t *testing.T) {
	// A client gone during the first-token delay or a stall ends the
	// handler at once.
	ts := textStreams[3] // anthropic
	for _, header := range []string{HeaderFirstTokenDelay, HeaderStall} {
		synctest.Test(t, func(t *testing.T) {
			var wg sync.WaitGroup
			s := newServer(t, Config{Mode: ModeText, Profile: ts.profile})
			var returned atomic.Bool
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.ServeHTTP(w, r)
				returned.Store(true)
			})
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, "POST", "http://chaos"+ts.path, strings.NewReader(textBody(t, ts, "p", "")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(header, map[string]string{HeaderFirstTokenDelay: "1h", HeaderStall: "0:1h"}[header])
			start := time.Now()
			resp, err := (&http.Client{Transport: pipeTransport{h, &wg}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			for range 3 * len(ts.preamble) { // the opening events' event, data and blank lines
				if _, err := br.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			cancel()
			resp.Body.Close()
			wg.Wait()
			if !returned.Load() || time.Since(start) != 0 {
				t.Errorf("%s: handler returned %v after %v", header, returned.Load(), time.Since(start))
			}
		})
	}
}

func TestBadTextHeaders(t *testing.T) {
	bad := map[string][]string{
		HeaderCutAt:           {"-1", "1.5", "ten", "+3", "99999999999"},
		HeaderCutHow:          {"drop", "ABORT", " close"},
		HeaderFirstTokenDelay: {"300", "-1s", "soon"},
		HeaderStall:           {"10", "10:", ":2s", "x:2s", "10:-1s", "10:2"},
	}
	for _, profile := range allProfiles {
		s := newServer(t, Config{Mode: ModeText, Profile: profile})
		count := 0
		for header, values := range bad {
			for _, v := range values {
				count++
				rec := send(s, "POST", "/v1/messages", `{"stream":true}`, header, v)
				if body := rec.Body.String(); strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
					t.Errorf("%s %s %q: body %q is not one line", profile, header, v, body)
				}
				f := readFailure(t, profile, rec)
				if f.status != 400 || !strings.Contains(f.message, header) || !strings.Contains(f.message, strconv.Quote(v)) {
					t.Errorf("%s %s %q: %+v, want 400 naming the header and value", profile, header, v, f)
				}
			}
		}
		if st := s.Stats(); st.Requests != count || st.ByStatus["400"] != count {
			t.Errorf("%s: stats %+v, want %d 400s", profile, st, count)
		}
	}

	// Good values, and other modes, which ignore the headers.
	s := newServer(t, Config{Mode: ModeText})
	good := []string{HeaderCutAt, "0", HeaderCutHow, "error", HeaderFirstTokenDelay, "0s", HeaderStall, "5:0s"}
	if rec := send(s, "POST", "/", `{"stream":true}`, good...); rec.Code != 200 {
		t.Errorf("good headers: %d %s", rec.Code, rec.Body)
	}
	if rec := send(s, "POST", "/", "", HeaderMode, ModeOK, HeaderCutAt, "ten", HeaderStall, "x"); rec.Code != 200 {
		t.Errorf("ok mode with malformed text headers: %d", rec.Code)
	}
}

func TestTextStatsJSON(t *testing.T) {
	s := newServer(t, Config{Mode: ModeText})
	full := AnswerText(0, "q")
	send(s, "POST", "/", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":`+strconv.Quote(full[:10])+`}]}`)
	data, err := json.Marshal(s.Stats())
	if err != nil {
		t.Fatal(err)
	}
	// In: "q" and the prefill, 11 bytes; out: the rest of the answer.
	out := (len(full) - 10 + 3) / 4
	want := fmt.Sprintf(`{"requests":1,"by_status":{"200":1},"continuations":1,"input_tokens":3,"output_tokens":%d,`+
		`"tallies":{"":{"":{"requests":1,"input_tokens":3,"output_tokens":%[1]d}}}}`, out)
	if string(data) != want {
		t.Errorf("stats %s, want %s", data, want)
	}
	s.Reset()
	if st := s.Stats(); st.Continuations != 0 {
		t.Errorf("continuations after Reset: %d", st.Continuations)
	}
}
