package rebound_test

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/sse"
)

// TestTransportContinuesACutAnswer cuts the chaos server's text answer
// at every few bytes, by ending the stream without its end marker or
// with an error event, in the OpenAI and Anthropic dialects: with
// continuations the caller reads the whole answer, once, as one stream;
// without, the part delivered and an *IncompleteStreamError.
func TestTransportContinuesACutAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 7})
		answer := chaos.AnswerText(7, "hi")
		for _, d := range []struct{ profile, path, body string }{
			{chaos.ProfileOpenAI, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
			{chaos.ProfileAnthropic, "/v1/messages", `{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			for _, how := range []string{"close", "error"} {
				for at := 1; at < len(answer); at += 17 {
					var continued []rebound.Event
					tr := &rebound.Transport{
						Base:          &handlerTransport{h: srv},
						Continuations: 2,
						Policy: rebound.Policy{Observer: rebound.ObserverFunc(func(e rebound.Event) {
							if e.Type == rebound.EventContinue {
								continued = append(continued, e)
							}
						})},
					}
					for _, on := range []bool{true, false} {
						if !on {
							tr.Continuations = 0
						}
						req, _ := http.NewRequest(http.MethodPost, "http://chaos.test"+d.path, strings.NewReader(d.body))
						req.Header.Set(chaos.HeaderProfile, d.profile)
						req.Header.Set(chaos.HeaderCutAt, strconv.Itoa(at))
						req.Header.Set(chaos.HeaderCutHow, how)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							t.Fatal(err)
						}
						var text sse.Tracker
						_, err = io.Copy(&text, resp.Body)
						resp.Body.Close()
						var ie *rebound.IncompleteStreamError
						switch {
						case on && (err != nil || string(text.Text()) != answer || !text.Ended() || len(continued) != 1):
							t.Fatalf("%s, cut %s at %d, continued: %v, %d continuations; got %q, want %q", d.profile, how, at, err, len(continued), text.Text(), answer)
						case !on && (!errors.As(err, &ie) || !strings.HasPrefix(answer, string(text.Text())) || len(text.Text()) < at):
							t.Fatalf("%s, cut %s at %d, not continued: %v after %q", d.profile, how, at, err, text.Text())
						}
					}
				}
			}
		}
	})
}

// TestTransportContinuationClosedMidway closes a stream from another
// goroutine while its reader continues it: no race, no continuation left
// open, and the reader stops.
func TestTransportContinuationClosedMidway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 7, Profile: chaos.ProfileAnthropic})
		for at := 5; at < 200; at += 37 {
			tr := &rebound.Transport{Base: &handlerTransport{h: srv}, Continuations: 3}
			req, _ := http.NewRequest(http.MethodPost, "http://chaos.test/v1/messages", strings.NewReader(`{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set(chaos.HeaderCutAt, strconv.Itoa(at))
			req.Header.Set(chaos.HeaderCutHow, "close")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error)
			go func() {
				_, err := io.Copy(io.Discard, resp.Body)
				done <- err
			}()
			resp.Body.Close()
			<-done // whatever it read, it ends
		}
	})
}

// TestTransportContinuationOfAWholeAnswerKeepsTheProvidersEnd cuts the
// chaos server's answer after its last piece of text, before the events
// that end it: the continuation adds no text, only its opening and its
// end. The caller reads the whole answer, with no error, ended by the
// provider's own events (the finish reason, usage and [DONE]; the block's
// stop, the stop reason and message_stop), after one continuation request.
func TestTransportContinuationOfAWholeAnswerKeepsTheProvidersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := chaos.AnswerText(7, "hi")
		for _, d := range []struct {
			profile, path, body string
			once                []string // each of these comes exactly once in the caller's stream
		}{
			{chaos.ProfileOpenAI, "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
				[]string{`"finish_reason":"stop"`, `"usage":{`, "[DONE]"}},
			{chaos.ProfileAnthropic, "/v1/messages", `{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				[]string{"event: message_start", "event: content_block_start", "event: content_block_stop", `"stop_reason":"end_turn"`, "event: message_stop"}},
		} {
			for _, how := range []string{"close", "error"} {
				srv, _ := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 7})
				continued := 0
				tr := &rebound.Transport{
					Base:          &handlerTransport{h: srv},
					Continuations: 3,
					Policy: rebound.Policy{Observer: rebound.ObserverFunc(func(e rebound.Event) {
						if e.Type == rebound.EventContinue {
							continued++
						}
					})},
				}
				req, _ := http.NewRequest(http.MethodPost, "http://chaos.test"+d.path, strings.NewReader(d.body))
				req.Header.Set(chaos.HeaderProfile, d.profile)
				req.Header.Set(chaos.HeaderCutAt, strconv.Itoa(len(answer)))
				req.Header.Set(chaos.HeaderCutHow, how)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				var text sse.Tracker
				raw, err := io.ReadAll(io.TeeReader(resp.Body, &text))
				resp.Body.Close()
				if err != nil || string(text.Text()) != answer || !text.Ended() {
					t.Errorf("%s, cut %s after the last text: %v, ended %v, text %q", d.profile, how, err, text.Ended(), text.Text())
				}
				for _, s := range d.once {
					if n := strings.Count(string(raw), s); n != 1 {
						t.Errorf("%s, cut %s after the last text: %s came %d times in\n%s", d.profile, how, s, n, raw)
					}
				}
				if st := srv.Stats(); st.Requests != 2 || st.Continuations != 1 || continued != 1 {
					t.Errorf("%s, cut %s after the last text: %d requests, %d of them continuations, %d EventContinue; want 2, 1, 1", d.profile, how, st.Requests, st.Continuations, continued)
				}
			}
		}
	})
}
