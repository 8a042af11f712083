package observe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
)

// An error the caller's own function builds, which rebound cannot know the
// request of, still has key-shaped words scrubbed from its log records,
// also where the record cuts a long message.
func TestSlogScrubsKeysFromCallersErrors(t *testing.T) {
	key := "sk-proj-CALLERSECRET0123456789abcdef"
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: observe.Slog(logger)}
	for _, msg := range []string{
		"calling the model with key " + key + " failed",
		strings.Repeat("x", 180) + " key " + key, // cut inside the key
	} {
		_ = rebound.Run(context.Background(), p, func(context.Context) error { return errors.New(msg) })
		_ = rebound.Run(context.Background(), p, func(context.Context) error {
			return fmt.Errorf("wrapped: %w", &rebound.HTTPError{StatusCode: 401, Body: []byte(msg)})
		})
	}
	if strings.Contains(logs.String(), key[:12]) || !strings.Contains(logs.String(), "[redacted]") {
		t.Errorf("logs:\n%s", logs.String())
	}
}
