package sdk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// streamer runs one streaming call with an official SDK and returns the
// text it received and the error the SDK reported.
type streamer struct {
	name    string
	profile string
	stream  func(ctx context.Context, base string, hc *http.Client) (string, error)
}

var streamers = []streamer{
	{
		name: "OpenAI", profile: chaos.ProfileOpenAI,
		stream: func(ctx context.Context, base string, hc *http.Client) (string, error) {
			client := openai.NewClient(openaioption.WithBaseURL(base+"/v1/"), openaioption.WithAPIKey("sk-test"),
				openaioption.WithHTTPClient(hc), openaioption.WithMaxRetries(0))
			s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			})
			defer s.Close()
			text := ""
			for s.Next() {
				for _, c := range s.Current().Choices {
					text += c.Delta.Content
				}
			}
			return text, s.Err()
		},
	},
	{
		name: "Anthropic", profile: chaos.ProfileAnthropic,
		stream: func(ctx context.Context, base string, hc *http.Client) (string, error) {
			client := anthropic.NewClient(anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("sk-ant-test"),
				anthropicoption.WithHTTPClient(hc), anthropicoption.WithMaxRetries(0))
			// Room for a whole text-mode answer: the chaos server holds
			// an answer to max_tokens, as Anthropic does.
			s := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: "claude-test", MaxTokens: 1024,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
			})
			defer s.Close()
			text := ""
			for s.Next() {
				if ev := s.Current(); ev.Type == "content_block_delta" {
					text += ev.Delta.Text
				}
			}
			return text, s.Err()
		},
	},
}

// cutFirst cuts the first stream after cutAfter content events (in-band
// error or aborted connection, as the seed decides); later requests get
// whole streams.
func cutFirst(srv *chaos.Server, profile string, cutAfter int) http.Handler {
	var seen atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(chaos.HeaderProfile, profile)
		r.Header.Set(chaos.HeaderMode, chaos.ModeOK)
		if seen.Add(1) == 1 {
			r.Header.Set(chaos.HeaderMode, chaos.ModeStreamCut)
			r.Header.Set(chaos.HeaderCutAfter, strconv.Itoa(cutAfter))
		}
		srv.ServeHTTP(w, r)
	})
}

const wholeText = "Hello from chaos."

// TestSDKStreamsThroughStreamCut runs each SDK's streaming API over
// loopback against chaos stream-cut, with several seeds so that both ways
// of breaking (an in-band error event, an aborted connection) occur.
func TestSDKStreamsThroughStreamCut(t *testing.T) {
	for _, s := range streamers {
		t.Run(s.name, func(t *testing.T) {
			ways := map[string]int{}
			for seed := uint64(1); seed <= 8; seed++ {
				for _, tc := range []struct {
					name     string
					cutAfter int
					rebound  bool
				}{
					{"BeforeContent/Rebound", 0, true},
					{"BeforeContent/SDKAlone", 0, false},
					{"AfterContent/Rebound", 2, true},
				} {
					srv, err := chaos.New(chaos.Config{Seed: seed, FailRate: 1, Profile: s.profile})
					if err != nil {
						t.Fatal(err)
					}
					ts := httptest.NewServer(cutFirst(srv, s.profile, tc.cutAfter))
					var rt http.RoundTripper = http.DefaultTransport
					if tc.rebound {
						rt = &rebound.Transport{Policy: rebound.Policy{BaseDelay: time.Millisecond}}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					text, err := s.stream(ctx, ts.URL, &http.Client{Transport: rt})
					cancel()
					ts.Close()
					st := srv.Stats()
					switch {
					case st.StreamsCutInBand == 1:
						ways["in-band"]++
					case st.StreamsCutAbort == 1:
						ways["abort"]++
					default:
						t.Fatalf("seed %d %s: the first stream was not cut: %+v", seed, tc.name, st)
					}
					switch tc.name {
					case "BeforeContent/Rebound":
						// Retried transparently: one clean stream.
						if err != nil || text != wholeText || st.Requests != 2 {
							t.Errorf("seed %d %s: text %q, err %v, %d requests", seed, tc.name, text, err, st.Requests)
						}
					case "BeforeContent/SDKAlone":
						// The SDK does not retry a stream that broke: the error reaches the caller.
						if err == nil || st.Requests != 1 {
							t.Errorf("seed %d %s: text %q, err %v, %d requests", seed, tc.name, text, err, st.Requests)
						}
					case "AfterContent/Rebound":
						// Content had reached the caller: surfaced once, never replayed.
						if err == nil || text == "" || text == wholeText || st.Requests != 1 {
							t.Errorf("seed %d %s: text %q, err %v, %d requests", seed, tc.name, text, err, st.Requests)
						}
					}
				}
			}
			if ways["in-band"] == 0 || ways["abort"] == 0 {
				t.Errorf("the seeds did not cover both ways of breaking: %v", ways)
			}
			t.Logf("ways the first stream broke: %v", ways)
		})
	}
}
