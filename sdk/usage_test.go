package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/rebound-go/rebound/chaos"
)

// The official SDKs read the chaos server's token usage and its finish
// reason for an answer cut short by the output cap: the prompt "Hello
// there, chaos." (19 bytes) is 5 tokens; a cap of 2 tokens leaves "Hello
// fr". The server's own tally agrees.
func TestSDKsReadUsage(t *testing.T) {
	ctx := context.Background()
	const prompt, text = "Hello there, chaos.", "Hello fr"
	for _, c := range []struct {
		name, profile string
		call          func(hc *http.Client) (got string, in, out int64, finish string, err error)
		finish        string
	}{
		{"OpenAI", chaos.ProfileOpenAI, func(hc *http.Client) (string, int64, int64, string, error) {
			client := openai.NewClient(openaioption.WithBaseURL(baseURL+"/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc))
			r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-test", MaxCompletionTokens: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			})
			if err != nil {
				return "", 0, 0, "", err
			}
			return r.Choices[0].Message.Content, r.Usage.PromptTokens, r.Usage.CompletionTokens, string(r.Choices[0].FinishReason), nil
		}, "length"},
		{"Anthropic", chaos.ProfileAnthropic, func(hc *http.Client) (string, int64, int64, string, error) {
			client := anthropic.NewClient(anthropicoption.WithBaseURL(baseURL), anthropicoption.WithAPIKey("sk-ant-test"), anthropicoption.WithHTTPClient(hc))
			m, err := client.Messages.New(ctx, anthropic.MessageNewParams{
				Model: "claude-test", MaxTokens: 2, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
			})
			if err != nil {
				return "", 0, 0, "", err
			}
			return m.Content[0].Text, m.Usage.InputTokens, m.Usage.OutputTokens, string(m.StopReason), nil
		}, "max_tokens"},
		{"Gemini", chaos.ProfileGemini, func(hc *http.Client) (string, int64, int64, string, error) {
			client, err := genai.NewClient(ctx, &genai.ClientConfig{
				APIKey: "test", Backend: genai.BackendGeminiAPI, HTTPClient: hc,
				HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
			})
			if err != nil {
				return "", 0, 0, "", err
			}
			r, err := client.Models.GenerateContent(ctx, "gemini-test", genai.Text(prompt), &genai.GenerateContentConfig{MaxOutputTokens: 2})
			if err != nil {
				return "", 0, 0, "", err
			}
			u := r.UsageMetadata
			return r.Text(), int64(u.PromptTokenCount), int64(u.CandidatesTokenCount), string(r.Candidates[0].FinishReason), nil
		}, "MAX_TOKENS"},
	} {
		srv, err := chaos.New(chaos.Config{Mode: chaos.ModeOK, Profile: c.profile})
		if err != nil {
			t.Fatal(err)
		}
		got, in, out, finish, err := c.call(&http.Client{Transport: memoryTransport{srv}})
		if err != nil || got != text || in != 5 || out != 2 || finish != c.finish {
			t.Errorf("%s: %q, %d in, %d out, finish %q, err %v; want %q, 5, 2, %q", c.name, got, in, out, finish, err, text, c.finish)
		}
		if st := srv.Stats(); st.InputTokens != 5 || st.OutputTokens != 2 {
			t.Errorf("%s: the server billed %d in, %d out", c.name, st.InputTokens, st.OutputTokens)
		}
	}
}

// The official SDKs read the chaos server's prompt cache counts where the
// providers put them: a prompt of 1600 tokens (a system prompt of 1500 and
// a message of 100) sent twice through one key is written into the cache,
// then read from it; Anthropic reports the write, the others bill it as
// input. The server's tally agrees.
func TestSDKsReadPromptCacheCounts(t *testing.T) {
	ctx := context.Background()
	system, user := strings.Repeat("s", 6000), strings.Repeat("u", 400)
	type counts struct{ in, read, written int64 }
	for _, c := range []struct {
		name, profile string
		call          func(hc *http.Client) (counts, error)
		first, second counts
	}{
		{"OpenAI chat", chaos.ProfileOpenAI, func(hc *http.Client) (counts, error) {
			client := openai.NewClient(openaioption.WithBaseURL(baseURL+"/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc))
			r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
			})
			if err != nil {
				return counts{}, err
			}
			return counts{r.Usage.PromptTokens, r.Usage.PromptTokensDetails.CachedTokens, 0}, nil
		}, counts{1600, 0, 0}, counts{1600, 1600, 0}},
		{"OpenAI Responses", chaos.ProfileOpenAI, func(hc *http.Client) (counts, error) {
			client := openai.NewClient(openaioption.WithBaseURL(baseURL+"/v1/"), openaioption.WithAPIKey("sk-test"), openaioption.WithHTTPClient(hc))
			r, err := client.Responses.New(ctx, responses.ResponseNewParams{
				Model: "gpt-test", Instructions: openai.String(system), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(user)},
			})
			if err != nil {
				return counts{}, err
			}
			return counts{r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens, 0}, nil
		}, counts{1600, 0, 0}, counts{1600, 1600, 0}},
		{"Anthropic stream", chaos.ProfileAnthropic, func(hc *http.Client) (counts, error) {
			client := anthropic.NewClient(anthropicoption.WithBaseURL(baseURL), anthropicoption.WithAPIKey("sk-ant-test"), anthropicoption.WithHTTPClient(hc))
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: "claude-test", MaxTokens: 10, System: []anthropic.TextBlockParam{{Text: system}},
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(user))},
			})
			var m anthropic.Message
			for stream.Next() {
				if err := m.Accumulate(stream.Current()); err != nil {
					return counts{}, err
				}
			}
			if m.Usage.CacheCreation.Ephemeral5mInputTokens != m.Usage.CacheCreationInputTokens {
				return counts{}, fmt.Errorf("usage %s: the five-minute writes are not all the writes", m.Usage.RawJSON())
			}
			return counts{m.Usage.InputTokens, m.Usage.CacheReadInputTokens, m.Usage.CacheCreationInputTokens}, stream.Err()
		}, counts{0, 0, 1600}, counts{0, 1600, 0}},
		{"Gemini", chaos.ProfileGemini, func(hc *http.Client) (counts, error) {
			client, err := genai.NewClient(ctx, &genai.ClientConfig{
				APIKey: "test", Backend: genai.BackendGeminiAPI, HTTPClient: hc,
				HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
			})
			if err != nil {
				return counts{}, err
			}
			r, err := client.Models.GenerateContent(ctx, "gemini-test", genai.Text(user),
				&genai.GenerateContentConfig{SystemInstruction: genai.NewContentFromText(system, genai.RoleUser)})
			if err != nil {
				return counts{}, err
			}
			u := r.UsageMetadata
			return counts{int64(u.PromptTokenCount), int64(u.CachedContentTokenCount), 0}, nil
		}, counts{1600, 0, 0}, counts{1600, 1600, 0}},
	} {
		srv, err := chaos.New(chaos.Config{Mode: chaos.ModeOK, Profile: c.profile, PromptCache: true})
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: memoryTransport{srv}}
		first, err1 := c.call(hc)
		second, err2 := c.call(hc)
		if err1 != nil || err2 != nil || first != c.first || second != c.second {
			t.Errorf("%s: %+v then %+v (%v, %v); want %+v then %+v", c.name, first, second, err1, err2, c.first, c.second)
		}
		st := srv.Stats()
		if st.CacheReadTokens != 1600 || st.CacheWriteTokens != int(c.first.written) || st.InputTokens+st.CacheReadTokens+st.CacheWriteTokens != 3200 {
			t.Errorf("%s: the server billed %d in, %d read, %d written", c.name, st.InputTokens, st.CacheReadTokens, st.CacheWriteTokens)
		}
	}
}
