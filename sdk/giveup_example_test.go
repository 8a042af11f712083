package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cost"
)

type reasonKey struct{}

// giveUpReason tells each call's caller why rebound gave up on it, in the
// slot the caller put in the call's context.
type giveUpReason struct{}

func (giveUpReason) Observe(rebound.Event) {}

func (giveUpReason) ObserveCall(ctx context.Context) rebound.Observer {
	slot, _ := ctx.Value(reasonKey{}).(*rebound.StopReason)
	return rebound.ObserverFunc(func(e rebound.Event) {
		if e.Type == rebound.EventGiveUp && slot != nil {
			*slot = e.Reason
		}
	})
}

// Why rebound gave up, under an SDK. A failed response is handed back to
// the SDK, which reports it as its own error: rebound's reason comes from
// the call's observer. With no response to hand back (a spend cap, an
// open breaker, the network), the SDK's error wraps rebound's
// *GiveUpError.
func Example_whyItGaveUp() {
	srv, _ := chaos.New(chaos.Config{Profile: chaos.ProfileOpenAI, Mode: chaos.ModeQuota})
	server := httptest.NewServer(srv)
	defer server.Close()

	client := openai.NewClient(
		option.WithBaseURL(server.URL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &rebound.Transport{
			Policy: rebound.Policy{Observer: giveUpReason{}},
		}}),
	)
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello?")},
	}

	var reason rebound.StopReason
	_, err := client.Chat.Completions.New(context.WithValue(context.Background(), reasonKey{}, &reason), params)
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, reason)
	}

	ctx := cost.WithCaps(context.Background(), cost.Table{"gpt-test": {InputPerMillion: 1000}}, &cost.Limit{USD: 0.000001})
	_, err = client.Chat.Completions.New(ctx, params)
	var giveUp *rebound.GiveUpError
	if errors.As(err, &giveUp) {
		fmt.Println(giveUp.Reason)
	}
	// Output:
	// 429 not retryable
	// refused by the guard
}
