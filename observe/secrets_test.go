package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// A provider's error type of 60 KB of terminal escapes reaches a record as
// at most 64 printable bytes.
func TestSlogBoundsProviderTypeAndCode(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hostile := "\x1b]0;owned\x07\x1b[2J" + strings.Repeat("x", 60<<10)
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": hostile, "code": hostile}})
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: observe.Slog(logger)}
	_ = rebound.Run(context.Background(), p, func(context.Context) error {
		return &rebound.HTTPError{StatusCode: 503, Body: body}
	})
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"error_type", "error_code"} {
			if v, _ := rec[key].(string); len(v) > 64 || strings.ContainsAny(v, "\x1b\x07") {
				t.Errorf("%s of %d bytes: %q", key, len(v), v[:min(len(v), 40)])
			}
		}
		if len(line) > 4<<10 {
			t.Errorf("a record of %d bytes", len(line))
		}
	}
}
