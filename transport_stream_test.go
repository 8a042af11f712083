package rebound

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sseTransport answers every request with the next scripted event stream.
type sseTransport struct {
	mu      sync.Mutex // guards streams and calls
	streams []string
	calls   int
}

func (s *sseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	body := s.streams[min(s.calls, len(s.streams)-1)]
	s.calls++
	s.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

const (
	anthropicStart    = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"
	anthropicOverload = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	anthropicText     = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	openaiRole        = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	openaiText        = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\ndata: [DONE]\n\n"
)

func roundTripStream(t *testing.T, tr *Transport) (string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(`{"stream":true}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b), resp
}

func TestTransportRetriesAStreamBeforeContent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			streams []string
			calls   int
			want    string
		}{
			{"anthropic in-band overload", []string{anthropicStart + anthropicOverload, anthropicStart + anthropicText}, 2, anthropicStart + anthropicText},
			{"openai error chunk", []string{openaiRole + "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n", openaiRole + openaiText}, 2, openaiRole + openaiText},
			{"ended before content", []string{anthropicStart, "data: [DONE]\n\n", openaiRole + openaiText}, 3, openaiRole + openaiText},
			{"content first: handed over", []string{anthropicStart + anthropicText}, 1, anthropicStart + anthropicText},
			// The error event is not handed on: the caller's Read ends
			// with an *IncompleteStreamError that carries it.
			{"error after content: never retried", []string{anthropicStart + anthropicText + anthropicOverload}, 1, anthropicStart + anthropicText},
		} {
			st := &sseTransport{streams: tc.streams}
			tr := &Transport{Base: st, Policy: Policy{BaseDelay: time.Second, Jitter: JitterNone}}
			got, _ := roundTripStream(t, tr)
			if got != tc.want || st.calls != tc.calls {
				t.Errorf("%s: %d calls, body\n%q\nwant\n%q", tc.name, st.calls, got, tc.want)
			}
		}
	})
}

func TestTransportGivesBackTheLastFailedStream(t *testing.T) {
	st := &sseTransport{streams: []string{anthropicStart + anthropicOverload}}
	var last Event
	tr := &Transport{Base: st, Policy: Policy{MaxAttempts: 3, BaseDelay: NoDelay, Observer: ObserverFunc(func(e Event) { last = e })}}
	got, resp := roundTripStream(t, tr)
	var se *StreamError
	if got != anthropicStart+anthropicOverload || resp.StatusCode != 200 || st.calls != 3 || last.Type != EventGiveUp ||
		!errors.As(last.Err, &se) || last.Verdict.Kind != KindOverloaded {
		t.Fatalf("%d calls, last event %+v, body %q", st.calls, last, got)
	}
}

func TestTransportPassesOnALongPreamble(t *testing.T) {
	long := strings.Repeat(": keep-alive\n\n", 200) // comments, no content
	st := &sseTransport{streams: []string{long + anthropicOverload}}
	tr := &Transport{Base: st, StreamLookaheadBytes: 1024}
	got, _ := roundTripStream(t, tr)
	if got != long+anthropicOverload || st.calls != 1 {
		t.Fatalf("%d calls; the stream was not passed on whole", st.calls)
	}
}

// stallTransport's first stream sends its preamble and then nothing until
// closed; the second answers at once.
type stallTransport struct {
	mu    sync.Mutex // guards calls
	calls int
}

func (s *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	h := http.Header{"Content-Type": {"text/event-stream"}}
	if n > 1 {
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(openaiRole + openaiText)), Request: req}, nil
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(openaiRole))
		// Nothing more: the reader's Close ends the write below.
		pw.Write([]byte("never"))
	}()
	return &http.Response{StatusCode: 200, Header: h, Body: pr, Request: req}, nil
}

func TestTransportRetriesAStalledStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stallTransport{}
		tr := &Transport{Base: st, StreamLookahead: 30 * time.Second, Policy: Policy{BaseDelay: NoDelay}}
		start := time.Now()
		got, _ := roundTripStream(t, tr)
		if got != openaiRole+openaiText || st.calls != 2 || time.Since(start) != 30*time.Second {
			t.Fatalf("%d calls after %v: %q", st.calls, time.Since(start), got)
		}
	})
}

type countingBreaker struct {
	mu       sync.Mutex // guards outcomes
	outcomes []Outcome
}

func (b *countingBreaker) Allow() (Permit, error) { return 0, nil }
func (b *countingBreaker) Done(_ Permit, o Outcome) {
	b.mu.Lock()
	b.outcomes = append(b.outcomes, o)
	b.mu.Unlock()
}

func TestTransportTellsTheBreakerWhenTheStreamEnds(t *testing.T) {
	b := &countingBreaker{}
	st := &sseTransport{streams: []string{anthropicStart + anthropicText}}
	tr := &Transport{Base: st, Policy: Policy{Breaker: b}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.outcomes) != 0 {
		t.Fatalf("outcome %v before the stream was read", b.outcomes)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b.outcomes) != 1 || b.outcomes[0] != OutcomeSuccess {
		t.Fatalf("outcomes %v", b.outcomes)
	}
}

func TestTransportGivesUpOnStalledStreamsWithAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stallTransport{}
		tr := &Transport{Base: st, StreamLookahead: time.Second, Policy: Policy{MaxAttempts: 1}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", strings.NewReader("{}"))
		resp, err := tr.RoundTrip(req)
		if resp != nil || !errors.Is(err, ErrStreamStalled) {
			t.Fatalf("resp %v, err %v: want the stall as an error, not a dead 200", resp, err)
		}
	})
}

// closeCounter counts Close calls on a request body.
type closeCounter struct {
	io.Reader
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

type refusingBreaker struct{}

func (refusingBreaker) Allow() (Permit, error) { return 0, errors.New("open") }
func (refusingBreaker) Done(Permit, Outcome)   {}

func TestTransportClosesTheBodyOfARefusedRequest(t *testing.T) {
	for _, limit := range []int64{0, -1} { // buffered; sent as it is
		body := &closeCounter{Reader: strings.NewReader("{}")}
		tr := &Transport{Base: &sseTransport{streams: []string{""}}, MaxBufferedBody: limit, Policy: Policy{Breaker: refusingBreaker{}}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", body)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("a refused request went through")
		}
		if body.closes != 1 {
			t.Fatalf("MaxBufferedBody %d: body closed %d times, want once", limit, body.closes)
		}
	}
}

// watchedBody is an event stream's body that counts what Transport tells
// it of the stream's first content.
type watchedBody struct {
	io.Reader
	arrived int
}

func (b *watchedBody) ContentArrived() { b.arrived++ }
func (b *watchedBody) Close() error    { return nil }

// watchedBase answers with a watchedBody.
type watchedBase struct {
	ctype string
	body  *watchedBody
}

func (w *watchedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {w.ctype}}, Body: w.body, Request: req}, nil
}

// bodyGuard is a Guard that replaces every response's body with one of
// its own, as cost.WithCaps does to read the usage.
type bodyGuard struct{}

func (bodyGuard) Admit(ctx context.Context, _ *http.Request) (context.Context, func(*http.Response, error), error) {
	return ctx, func(resp *http.Response, _ error) {
		if resp != nil {
			resp.Body = struct{ io.ReadCloser }{resp.Body}
		}
	}, nil
}

// TestTransportTellsTheBodyWhenContentArrives: the body Base gave is told
// once that its event stream's first content came, before the stream is
// handed over (a Guard's own body in front of it or not); never for a
// stream that failed before any content, nor for a response that is not an
// event stream.
func TestTransportTellsTheBodyWhenContentArrives(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctype  string
		stream string
		guard  bool
		want   int
	}{
		{"content after preamble", "text/event-stream", anthropicStart + anthropicText, false, 1},
		{"behind a guard's body", "text/event-stream", openaiRole + openaiText, true, 1},
		{"error before content", "text/event-stream", anthropicStart + anthropicOverload, false, 0},
		{"ended before content", "text/event-stream", anthropicStart, false, 0},
		{"not an event stream", "application/json", `{"choices":[]}`, false, 0},
	} {
		body := &watchedBody{Reader: strings.NewReader(tc.stream)}
		base := &watchedBase{ctype: tc.ctype, body: body}
		ctx := context.Background()
		if tc.guard {
			ctx = WithGuard(ctx, bodyGuard{})
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(`{"stream":true}`))
		tr := &Transport{Base: base, Policy: Policy{MaxAttempts: 1}}
		resp, err := tr.RoundTrip(req)
		if body.arrived != tc.want {
			t.Errorf("%s: told %d times by the hand-over, want %d", tc.name, body.arrived, tc.want)
		}
		if err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if body.arrived != tc.want {
			t.Errorf("%s: told %d times in all, want %d", tc.name, body.arrived, tc.want)
		}
	}
}
