package rebound

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/sse"
)

// Found in review, and fixed: A continuation whose server never answers holds Read for ever; StreamStall
// does not bound it and Close does not end it.
type reviewHangTransport struct {
	mu    sync.Mutex
	calls int
	first string
}

func (h *reviewHangTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	if n > 1 {
		<-req.Context().Done() // a server that accepted and never answers
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(h.first)), Request: req}, nil
}

func TestTransportBoundsAContinuationThatNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := &reviewHangTransport{first: anthropicStart + reviewAnth("Hello")}
		tr := &Transport{Base: h, Continuations: 1, StreamStall: 10 * time.Second, FirstTokenTimeout: 10 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(reviewAnthBody))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(resp.Body); done <- err }()
		time.Sleep(24 * time.Hour) // virtual time: a day passes in the bubble
		resp.Body.Close()
		time.Sleep(time.Hour) // and an hour more
		select {
		case err := <-done:
			t.Logf("Read ended: %v", err)
		default:
			t.Errorf("24 h with StreamStall 10s, then Close, and an hour more: Read still blocked on the continuation's request")
			cancel()
			t.Logf("after cancelling the caller's context: %v", <-done)
		}
	})
}

// Found in review, and fixed: The caller's context cancelled mid-stream: a continuation is still begun and reported.
func TestTransportDoesNotContinueACanceledCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		st := &scriptTransport{scripts: [][]step{{{0, anthropicStart + reviewAnth("Hello")}, {}}, {{0, anthropicStart + reviewAnth(" world") + reviewAnthStop}}}}
		var cont atomic.Int32
		upstream := make(chan io.Closer, 1) // the first stream's body, as net/http holds it
		base := attemptFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := st.RoundTrip(req)
			select {
			case upstream <- resp.Body:
			default:
			}
			return resp, err
		})
		tr := &Transport{Base: base, Continuations: 1, Policy: Policy{Observer: ObserverFunc(func(e Event) {
			if e.Type == EventContinue {
				cont.Add(1)
			}
		})}}
		// the attempt's context ends the scripted stream, as net/http's would
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(reviewAnthBody))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		go func() { <-ctx.Done(); (<-upstream).Close() }() // net/http closes the body when the context ends
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(resp.Body); done <- err }()
		synctest.Wait()
		cancel()
		err = <-done
		resp.Body.Close()
		t.Logf("read: %v; EventContinue %d; provider calls %d", err, cont.Load(), st.calls)
		if cont.Load() != 0 {
			t.Errorf("the caller cancelled, yet a continuation was reported (EventContinue)")
		}
	})
}

// Found in review, and fixed: Anthropic prefill trimming end to end, LF and CRLF.
func TestTransportTrimsTheRepeatedWhitespace(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		fix := func(s string) string { return strings.ReplaceAll(s, "\n", eol) }
		cut := fix(anthropicStart + reviewAnth("Hello") + reviewAnth(" \\n"))
		cont := fix(anthropicStart + reviewAnth(" ") + reviewAnth("\\nWorld") + reviewAnthStop)
		got, err := reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/messages", reviewAnthBody)
		var tk sse.Tracker
		tk.Write([]byte(got))
		if err != io.EOF || string(tk.Text()) != "Hello \nWorld" || !tk.Ended() {
			t.Errorf("eol %q: %v, text %q, ended %v\n%q", eol, err, tk.Text(), tk.Ended(), got)
		}
	}
}

// Found in review, and fixed: Close racing the swap of the body (-race).
func TestTransportCloseRacesAContinuation(t *testing.T) {
	for i := range 300 {
		st := &sseTransport{streams: []string{anthropicStart + reviewAnth("Hello"), anthropicStart + reviewAnth(" world") + reviewAnthStop}}
		tr := &Transport{Base: st, Continuations: 1}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(reviewAnthBody))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); io.ReadAll(resp.Body) }()
		go func() {
			defer wg.Done()
			for range i % 50 {
				_ = i
			}
			resp.Body.Close()
		}()
		wg.Wait()
	}
}

// attemptFunc adapts a function to http.RoundTripper.
type attemptFunc func(*http.Request) (*http.Response, error)

func (f attemptFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
