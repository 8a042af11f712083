package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// DefaultKeyWindow is the window of the per-key limits of a Config that
// sets none: a minute, as providers count.
const DefaultKeyWindow = time.Minute

// MaxKeys is how many API keys the server counts and limits apart; the
// requests of keys beyond them share the label OtherKeys, and its limits.
const MaxKeys = 10000

// OtherKeys is the label of the keys beyond MaxKeys.
const OtherKeys = "key-other"

// KeyLabel is the name under which [Stats.Keys] counts the requests of an
// API key: "key-" and the first 12 hex digits of the key's SHA-256, so
// that the stats, and whatever prints them, never show a key.
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "key-" + hex.EncodeToString(sum[:6])
}

// KeyStats counts one API key's requests (see Per-key limits in the
// package doc).
type KeyStats struct {
	// Requests counts every request that carried the key, Admitted those
	// the key's limits let through, RateLimited those they refused with a
	// 429, and OutOfQuota those refused because the key was out of quota
	// (Config.KeysOutOfQuota).
	Requests    int `json:"requests"`
	Admitted    int `json:"admitted"`
	RateLimited int `json:"rate_limited"`
	OutOfQuota  int `json:"out_of_quota,omitempty"`
	// Windows is the number of windows the key has had; MaxRequests and
	// MaxTokens are the most requests and tokens any one of them
	// admitted, so that a test can check that no window went past a limit
	// by the server's own counts.
	Windows     int `json:"windows"`
	MaxRequests int `json:"max_window_requests"`
	MaxTokens   int `json:"max_window_tokens"`
}

// keyWindow is what one key has used of its current window.
type keyWindow struct {
	stats            KeyStats
	start            time.Time // of the current window; zero before the first request
	requests, tokens int       // admitted in the current window
}

// apiKey returns the key r carries where a provider's client sends it,
// or "".
func apiKey(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		return v
	}
	return r.Header.Get("X-Goog-Api-Key")
}

// keyLimited reports whether the server holds keys to limits of their own.
func (s *Server) keyLimited() bool {
	return s.cfg.KeyRPM > 0 || s.cfg.KeyTPM > 0 || len(s.cfg.KeysOutOfQuota) > 0
}

// limitKey holds c, a request about to be answered at now, to its key's
// limits: it may turn c into a rate-limited failure (with a wait hint
// until the window ends) or a quota one, and sets the quotas c's answer
// announces. s.mu is held.
func (s *Server) limitKey(c *call, now time.Time) {
	if c.apiKey == "" || !s.keyLimited() {
		return
	}
	label := KeyLabel(c.apiKey)
	w := s.keyWindows[label]
	if w == nil && len(s.keyWindows) >= MaxKeys {
		label = OtherKeys
		w = s.keyWindows[label]
	}
	if w == nil {
		w = &keyWindow{}
		s.keyWindows[label] = w
	}
	w.stats.Requests++
	for _, prefix := range s.cfg.KeysOutOfQuota {
		if strings.HasPrefix(c.apiKey, prefix) {
			w.stats.OutOfQuota++
			c.fault, c.mishap = faultQuota, mishapNone
			return
		}
	}
	window := s.cfg.KeyWindow
	if w.start.IsZero() || now.Sub(w.start) >= window {
		w.start, w.requests, w.tokens = now, 0, 0
		w.stats.Windows++
	}
	reset := w.start.Add(window).Sub(now)
	if s.cfg.KeyRPM > 0 && w.requests+1 > s.cfg.KeyRPM || s.cfg.KeyTPM > 0 && w.tokens+c.input > s.cfg.KeyTPM {
		w.stats.RateLimited++
		c.fault, c.mishap = faultRateLimit, mishapNone
		c.wait = int64((reset + time.Second - 1) / time.Second)
	} else {
		w.stats.Admitted++
		w.requests++
		w.tokens += c.input
		w.stats.MaxRequests = max(w.stats.MaxRequests, w.requests)
		w.stats.MaxTokens = max(w.stats.MaxTokens, w.tokens)
	}
	c.quotas = &quotas{
		requestsLimit: int64(s.cfg.KeyRPM), requestsLeft: int64(max(s.cfg.KeyRPM-w.requests, 0)),
		tokensLimit: int64(s.cfg.KeyTPM), tokensLeft: int64(max(s.cfg.KeyTPM-w.tokens, 0)),
		reset: reset,
	}
	if s.cfg.KeyRPM == 0 { // announce only the limit that is kept
		c.quotas.requestsLimit, c.quotas.requestsLeft = c.profile.quotas.requestsLimit, c.profile.quotas.requestsLeft
	}
	if s.cfg.KeyTPM == 0 {
		c.quotas.tokensLimit, c.quotas.tokensLeft = c.profile.quotas.tokensLimit, c.profile.quotas.tokensLeft
	}
}

// keyStats returns a copy of the per-key counts; nil without key limits.
// s.mu is held.
func (s *Server) keyStats() map[string]KeyStats {
	if len(s.keyWindows) == 0 {
		return nil
	}
	m := make(map[string]KeyStats, len(s.keyWindows))
	for label, w := range s.keyWindows {
		m[label] = w.stats
	}
	return m
}
