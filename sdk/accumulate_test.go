package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// cutServer is a chaos server in text mode and profile whose streams are
// cut, the connection aborted, once at bytes of the answer are sent.
func cutServer(t *testing.T, profile string, at int) *httptest.Server {
	srv, err := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 3, Profile: profile})
	if err != nil {
		t.Fatal(err)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(chaos.HeaderCutAt, strconv.Itoa(at))
		r.Header.Set(chaos.HeaderCutHow, "abort")
		srv.ServeHTTP(w, r)
	}))
}

// The SDKs' own accumulators over a continued stream.
func TestSDKAccumulatorsOverAContinuation(t *testing.T) {
	answer := chaos.AnswerText(3, "hi")
	at := len(answer) / 2
	hc := &http.Client{Transport: &rebound.Transport{Continuations: 2, Policy: rebound.Policy{BaseDelay: time.Millisecond}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ts := cutServer(t, chaos.ProfileOpenAI, at)
	defer ts.Close()
	oc := openai.NewClient(openaioption.WithBaseURL(ts.URL+"/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc), openaioption.WithMaxRetries(0))
	s := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	acc := openai.ChatCompletionAccumulator{}
	rejected := 0
	for s.Next() {
		if !acc.AddChunk(s.Current()) {
			rejected++
		}
	}
	s.Close()
	got := ""
	if len(acc.Choices) > 0 {
		got = acc.Choices[0].Message.Content
	}
	t.Logf("openai: err %v, %d chunks rejected by the accumulator, finish_reason %q, content %d of %d bytes", s.Err(), rejected, finish(acc), len(got), len(answer))
	if got != answer {
		t.Errorf("openai-go ChatCompletionAccumulator over a continued stream: %d of %d bytes", len(got), len(answer))
	}

	ta := cutServer(t, chaos.ProfileAnthropic, at)
	defer ta.Close()
	ac := anthropic.NewClient(anthropicoption.WithBaseURL(ta.URL), anthropicoption.WithAPIKey("sk-ant-test"), anthropicoption.WithHTTPClient(hc), anthropicoption.WithMaxRetries(0))
	as := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	msg := anthropic.Message{}
	var accErr error
	for as.Next() {
		if err := msg.Accumulate(as.Current()); err != nil && accErr == nil {
			accErr = err
		}
	}
	as.Close()
	text := ""
	if len(msg.Content) > 0 {
		text = msg.Content[0].Text
	}
	t.Logf("anthropic: err %v, accumulate %v, stop_reason %q, output_tokens %d, text %d of %d bytes", as.Err(), accErr, msg.StopReason, msg.Usage.OutputTokens, len(text), len(answer))
	if text != answer || msg.StopReason == "" {
		t.Errorf("anthropic Message.Accumulate over a continued stream: stop_reason %q, text ok %v", msg.StopReason, text == answer)
	}
}

func finish(acc openai.ChatCompletionAccumulator) string {
	if len(acc.Choices) == 0 {
		return ""
	}
	return string(acc.Choices[0].FinishReason)
}

// TestSDKAccumulatorsOverACutAfterTheLastText cuts each SDK's stream after
// its last text, before the events that end it, in each of the three
// ways: with continuations, the SDK's accumulator holds the whole answer
// and the provider's finish reason ("stop", "end_turn"), no error, after
// one continuation request.
func TestSDKAccumulatorsOverACutAfterTheLastText(t *testing.T) {
	answer := chaos.AnswerText(3, "hi")
	for _, how := range []string{"abort", "close", "error"} {
		for _, profile := range []string{chaos.ProfileOpenAI, chaos.ProfileAnthropic} {
			srv, err := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 3, Profile: profile})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Header.Set(chaos.HeaderCutAt, strconv.Itoa(len(answer)))
				r.Header.Set(chaos.HeaderCutHow, how)
				srv.ServeHTTP(w, r)
			}))
			hc := &http.Client{Transport: &rebound.Transport{Continuations: 2, Policy: rebound.Policy{BaseDelay: time.Millisecond}}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var text, end string
			var streamErr, accErr error
			if profile == chaos.ProfileOpenAI {
				oc := openai.NewClient(openaioption.WithBaseURL(ts.URL+"/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc), openaioption.WithMaxRetries(0))
				s := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
				acc := openai.ChatCompletionAccumulator{}
				for s.Next() {
					if !acc.AddChunk(s.Current()) && accErr == nil {
						accErr = errors.New("a chunk the accumulator refused")
					}
				}
				streamErr = s.Err()
				s.Close()
				if len(acc.Choices) > 0 {
					text = acc.Choices[0].Message.Content
				}
				end = finish(acc)
			} else {
				ac := anthropic.NewClient(anthropicoption.WithBaseURL(ts.URL), anthropicoption.WithAPIKey("sk-ant-test"), anthropicoption.WithHTTPClient(hc), anthropicoption.WithMaxRetries(0))
				s := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
				msg := anthropic.Message{}
				for s.Next() {
					if err := msg.Accumulate(s.Current()); err != nil && accErr == nil {
						accErr = err
					}
				}
				streamErr = s.Err()
				s.Close()
				for _, b := range msg.Content {
					text += b.Text
				}
				end = string(msg.StopReason)
			}
			cancel()
			ts.Close()
			want := map[string]string{chaos.ProfileOpenAI: "stop", chaos.ProfileAnthropic: "end_turn"}[profile]
			if st := srv.Stats(); streamErr != nil || accErr != nil || text != answer || end != want || st.Requests != 2 {
				t.Errorf("%s, cut %s after the last text: %d requests, stream %v, accumulator %v, finish %q (want %q), text whole %v",
					profile, how, st.Requests, streamErr, accErr, end, want, text == answer)
			}
		}
	}
}
