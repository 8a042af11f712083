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
