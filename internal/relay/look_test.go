package relay

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// A look ahead's one timer keeps both of its bounds: a stream that keeps
// sending is never silent, however long it takes to its content, unless
// it passes the first-token bound; one that sends nothing is silent at
// the silence bound.
func TestLookAheadKeepsItsSilenceAndFirstTokenBoundsWithOneTimer(t *testing.T) {
	const silence = 10 * time.Second
	content := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	for _, c := range []struct {
		name       string
		firstToken time.Duration
		every      time.Duration // a keep-alive this often; zero: none
		contentAt  time.Duration
		want       error
		at         time.Duration // when the look ahead ends
	}{
		{"keeps sending, content late", 0, silence / 2, 5 * silence, nil, 5 * silence},
		{"keeps sending, content within the first-token bound", 4 * silence, silence / 2, 3 * silence, nil, 3 * silence},
		{"keeps sending past the first-token bound", 2 * silence, silence / 2, 5 * silence, ErrLate, 2 * silence},
		{"sends nothing", 0, 0, 5 * silence, ErrSilent, silence},
		{"sends nothing, first-token bound later", 3 * silence, 0, 5 * silence, ErrSilent, silence},
		{"sends nothing, first-token bound sooner", silence / 2, 0, 5 * silence, ErrLate, silence / 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				go func() {
					start := time.Now()
					for c.every > 0 && time.Since(start)+c.every < c.contentAt {
						time.Sleep(c.every)
						if _, err := io.WriteString(pw, ": keep-alive\n\n"); err != nil {
							return
						}
					}
					time.Sleep(c.contentAt - time.Since(start))
					io.WriteString(pw, content)
					pw.Close()
				}()
				resp := &http.Response{Body: pr, Uncompressed: true}
				start := time.Now()
				_, err := Look{Bytes: 1 << 20, Silence: silence, FirstToken: c.firstToken, MaxEvent: 1 << 10}.Head(resp)
				if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
					t.Fatalf("err %v, want %v", err, c.want)
				}
				if took := time.Since(start); took != c.at {
					t.Fatalf("ended after %v, want %v", took, c.at)
				}
				pr.Close()
				time.Sleep(c.contentAt) // the writer's next write fails, and it ends
			})
		})
	}
}
