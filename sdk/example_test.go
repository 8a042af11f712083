package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// chaosServer stands in for a provider: it answers in the provider's
// dialect and fails the first request with a 503.
func chaosServer(profile string) *httptest.Server {
	srv, _ := chaos.New(chaos.Config{Profile: profile, Mode: chaos.ModeOK})
	var answered atomic.Bool
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answered.Swap(true) {
			r.Header.Set(chaos.HeaderMode, chaos.ModeDown)
		}
		srv.ServeHTTP(w, r)
	}))
}

// rebound under the OpenAI Go SDK: its own retries off, rebound's
// Transport in its http.Client.
func Example_openAI() {
	server := chaosServer(chaos.ProfileOpenAI)
	defer server.Close()

	client := openai.NewClient(
		option.WithBaseURL(server.URL+"/v1/"), // leave out to call OpenAI itself
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &rebound.Transport{}}),
	)

	reply, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello?")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reply.Choices[0].Message.Content)
	// Output: Hello from chaos.
}

// rebound under the Anthropic Go SDK, the same way.
func Example_anthropic() {
	server := chaosServer(chaos.ProfileAnthropic)
	defer server.Close()

	client := anthropic.NewClient(
		anthropicoption.WithBaseURL(server.URL), // leave out to call Anthropic itself
		anthropicoption.WithAPIKey("sk-ant-test"),
		anthropicoption.WithMaxRetries(0),
		anthropicoption.WithHTTPClient(&http.Client{Transport: &rebound.Transport{}}),
	)

	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-test",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello?"))},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Content[0].Text)
	// Output: Hello from chaos.
}
