package sdk_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
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
