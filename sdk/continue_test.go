package sdk_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// TestSDKStreamsContinued cuts 100 streamed answers of each SDK after
// content, at seeded random places and in each of the three ways (an
// aborted connection, a clean end without the end marker, an in-band
// error event), over loopback against the chaos server's text mode. With
// Transport.Continuations every SDK reads the whole answer, equal to the
// uncut one; without, every one gets an *IncompleteStreamError, never a
// silent success with half an answer.
func TestSDKStreamsContinued(t *testing.T) {
	const streams, seed = 100, 3
	answer := chaos.AnswerText(seed, "hi")
	for _, s := range streamers {
		t.Run(s.name, func(t *testing.T) {
			srv, err := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: seed, Profile: s.profile})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 0))
			hows := []string{"abort", "close", "error"}
			for i := range streams {
				at, how := 1+rng.IntN(len(answer)-1), hows[i%3]
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r.Header.Set(chaos.HeaderCutAt, strconv.Itoa(at))
					r.Header.Set(chaos.HeaderCutHow, how)
					srv.ServeHTTP(w, r)
				}))
				for _, continued := range []bool{true, false} {
					tr := &rebound.Transport{Policy: rebound.Policy{BaseDelay: time.Millisecond}}
					if continued {
						tr.Continuations = 2
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					text, err := s.stream(ctx, ts.URL, &http.Client{Transport: tr})
					cancel()
					var ie *rebound.IncompleteStreamError
					switch {
					case continued && (err != nil || text != answer):
						t.Fatalf("stream %d, cut %s at byte %d, continued: %v; got %q, want %q", i, how, at, err, text, answer)
					case !continued && !errors.As(err, &ie):
						t.Fatalf("stream %d, cut %s at byte %d, not continued: %v after %q; want an *IncompleteStreamError", i, how, at, err, text)
					}
				}
				ts.Close()
			}
			t.Logf("%d streams cut after content: %d continued, each to the whole answer of %d bytes", streams, srv.Stats().Continuations, len(answer))
		})
	}
}
