package chaos

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestKeyPastItsRequestsPerWindowGetsA429UntilTheWindowEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Mode: ModeOK, Profile: ProfileOpenAI, KeyRPM: 3, KeyWindow: 2 * time.Second})
		ask := func(key string) (int, string, string) {
			rec := send(s, "POST", "/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer "+key)
			return rec.Code, rec.Header().Get("x-ratelimit-remaining-requests"), rec.Header().Get("x-ratelimit-reset-requests")
		}
		for i, want := range []string{"2", "1", "0"} {
			if code, left, reset := ask("sk-one"); code != 200 || left != want || reset != "2s" {
				t.Fatalf("request %d: %d, remaining %s, reset %s; want 200, %s, 2s", i, code, left, reset, want)
			}
		}
		time.Sleep(500 * time.Millisecond)
		if code, left, reset := ask("sk-one"); code != 429 || left != "0" || reset != "1.5s" {
			t.Errorf("4th request in the window: %d, remaining %s, reset %s; want 429, 0, 1.5s", code, left, reset)
		}
		if code, _, _ := ask("sk-two"); code != 200 {
			t.Errorf("another key: %d, want 200: each key has its own limits", code)
		}
		time.Sleep(1500 * time.Millisecond)
		if code, left, _ := ask("sk-one"); code != 200 || left != "2" {
			t.Errorf("in the next window: %d, remaining %s, want 200, 2", code, left)
		}
		st := s.Stats()
		one := st.Keys[KeyLabel("sk-one")]
		want := KeyStats{Requests: 5, Admitted: 4, RateLimited: 1, Windows: 2, MaxRequests: 3}
		if one != want {
			t.Errorf("stats of sk-one %+v, want %+v", one, want)
		}
		data, _ := json.Marshal(st)
		if strings.Contains(string(data), "sk-one") {
			t.Errorf("the stats show a key: %s", data)
		}
	})
}

func TestKeyOutOfQuotaByPrefixGetsTheQuotaError(t *testing.T) {
	s := newServer(t, Config{Mode: ModeOK, Profile: ProfileAnthropic, KeysOutOfQuota: []string{"sk-dead-"}})
	rec := send(s, "POST", "/v1/messages", `{"model":"m"}`, "X-Api-Key", "sk-dead-123")
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), "enforced_spend_limit_reached") {
		t.Errorf("out of quota key: %d %s, want the quota 429", rec.Code, rec.Body)
	}
	if rec := send(s, "POST", "/v1/messages", `{"model":"m"}`, "X-Api-Key", "sk-live-123"); rec.Code != 200 {
		t.Errorf("another key: %d, want 200", rec.Code)
	}
	if got := s.Stats().Keys[KeyLabel("sk-dead-123")].OutOfQuota; got != 1 {
		t.Errorf("out_of_quota %d, want 1", got)
	}
}

func TestKeyLimitsRefuseBadConfig(t *testing.T) {
	for _, cfg := range []Config{{KeyRPM: -1}, {KeyTPM: -5}, {KeyWindow: -time.Second}, {KeysOutOfQuota: []string{""}}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
