package rebound

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkClassifyResponse judges a typical rate limit, and error bodies
// built to make the reading slow: 64 KiB of the phrases the message
// readers look for.
func BenchmarkClassifyResponse(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"groq429", `{"error":{"message":"Rate limit reached for model ` + "`llama3-70b-8192`" + ` in organization ` + "`org_x`" + ` on tokens per minute (TPM): Limit 6000, Used 5000, Requested 1200. Please try again in 7.66s. Visit https://console.groq.com/docs/rate-limits for more information.","type":"tokens","code":"rate_limit_exceeded"}}`},
		{"hostileWaits", `{"error":{"message":"` + strings.Repeat("try again in 1", MaxErrorBody/16) + `"}}`},
		{"hostileLimits", `{"error":{"message":"` + strings.Repeat("limit limit 1,", MaxErrorBody/16) + `"}}`},
		{"hostileArray", "[" + strings.Repeat(`{"error":{"message":"x"}},`, MaxErrorBody/28) + `{}]`},
	} {
		body := []byte(bc.body)
		h := http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"7.66s"}}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				ClassifyResponse(429, h, body)
			}
		})
	}
}
