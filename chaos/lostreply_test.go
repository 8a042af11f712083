package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/memnet"
)

// act sends a lost-reply request with the given idempotency key ("" for
// none) and returns the recorded response and whether the handler aborted.
func act(s *Server, key string) (*httptest.ResponseRecorder, bool) {
	if key == "" {
		return trySend(s, "POST", "/tools/send", "", HeaderMode, ModeLostReply)
	}
	return trySend(s, "POST", "/tools/send", "", HeaderMode, ModeLostReply, HeaderIdempotencyKey, key)
}

func TestLostReplyKeys(t *testing.T) {
	for _, profile := range allProfiles {
		// With a loss almost never drawn, every reply arrives.
		s := newServer(t, Config{FailRate: 1e-9, Profile: profile})
		for _, c := range []struct {
			key    string
			action int
		}{{"a", 1}, {"a", 1}, {"b", 2}, {"", 3}, {"", 4}, {"a", 1}, {"b", 2}, {"c", 5}} {
			rec, aborted := act(s, c.key)
			want := fmt.Sprintf(`{"ok":true,"action":%d}`, c.action) + "\n"
			if aborted || rec.Code != 200 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%s key %q: aborted %v, %d %q, want 200 %q", profile, c.key, aborted, rec.Code, rec.Body, want)
			}
		}
		st := s.Stats()
		if st.Actions != 5 || st.Duplicates != 3 || st.Requests != 8 || st.ByStatus["200"] != 8 {
			t.Errorf("%s: stats %+v, want 5 actions and 3 duplicates", profile, st)
		}
	}
}

// seedWhere returns a seed under which the first two lost-reply requests of
// a server with cfg have the given mishaps.
func seedWhere(t *testing.T, cfg Config, first, second mishap) uint64 {
	t.Helper()
	for seed := range uint64(1000) {
		cfg.Seed = seed
		s := newServer(t, cfg)
		_, m0 := s.outcome(ModeLostReply, 0)
		_, m1 := s.outcome(ModeLostReply, 1)
		if m0 == first && m1 == second {
			return seed
		}
	}
	t.Fatalf("no seed gives %v then %v", first, second)
	return 0
}

func TestLostReplyRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first reply is lost, one way or the other; a retry with the
		// same key is answered from the record.
		for _, lost := range []mishap{mishapAbort, mishapLate} {
			cfg := Config{Mode: ModeLostReply, FailRate: 0.5, SlowDelay: time.Minute}
			cfg.Seed = seedWhere(t, cfg, lost, mishapNone)
			s := newServer(t, cfg)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			req := httptest.NewRequestWithContext(ctx, "POST", "/", nil)
			req.Header.Set(HeaderIdempotencyKey, "order-17")
			start := time.Now()
			rec, aborted := tryServe(s, req)
			cancel()
			waited := time.Since(start)
			switch {
			case aborted != (lost == mishapAbort):
				t.Errorf("%v: aborted %v", lost, aborted)
			case lost == mishapLate && (waited != 10*time.Second || rec.Body.Len() != 0):
				t.Errorf("late reply: client gave up after %v with body %q, want 10s and none", waited, rec.Body)
			}
			if st := s.Stats(); st.Actions != 1 {
				t.Errorf("%v: %d actions after a lost reply, want 1", lost, st.Actions)
			}

			rec, aborted = act(s, "order-17")
			if aborted || rec.Code != 200 || rec.Body.String() != `{"ok":true,"action":1}`+"\n" {
				t.Errorf("%v: retry got aborted %v, %d %q", lost, aborted, rec.Code, rec.Body)
			}
			if st := s.Stats(); st.Actions != 1 || st.Duplicates != 1 {
				t.Errorf("%v: stats %+v, want 1 action and 1 duplicate", lost, st)
			}
		}

		// A late reply that the client waits for comes after SlowDelay.
		cfg := Config{Mode: ModeLostReply, FailRate: 0.5, SlowDelay: time.Minute}
		cfg.Seed = seedWhere(t, cfg, mishapLate, mishapNone)
		s := newServer(t, cfg)
		start := time.Now()
		rec, _ := act(s, "")
		if d := time.Since(start); d != time.Minute || rec.Code != 200 || rec.Body.String() != `{"ok":true,"action":1}`+"\n" {
			t.Errorf("late reply after %v: %d %q, want 200 after 1m", d, rec.Code, rec.Body)
		}
	})
}

func TestLostReplyOverHTTP(t *testing.T) { synctest.Test(t, testLostReplyOverHTTP) }

// testLostReplyOverHTTP: every reply is lost, aborted or so late that the
// client's timeout fires first, and the action is performed once all the
// same. net/http's client and server talk over an in-memory network in
// virtual time, so that an abort is never taken for a late reply because
// the machine was slow to deliver it.
func testLostReplyOverHTTP(t *testing.T) {
	s := newServer(t, Config{Mode: ModeLostReply, FailRate: 1, Seed: 5, SlowDelay: time.Hour})
	transport, stop := memnet.Serve(s)
	defer stop()
	transport.DisableKeepAlives = true
	client := &http.Client{Timeout: 50 * time.Millisecond, Transport: transport}
	const n = 8
	count := map[mishap]int{}
	for i := range uint64(n) {
		req, err := http.NewRequest("POST", "http://chaos/tools/charge", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(HeaderIdempotencyKey, "charge-1")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("request %d: status %d, want the reply lost", i, resp.StatusCode)
		}
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		_, m := s.outcome(ModeLostReply, i)
		count[m]++
		if timeout != (m == mishapLate) {
			t.Errorf("request %d (%v): error %v", i, m, err)
		}
	}
	if count[mishapAbort] == 0 || count[mishapLate] == 0 {
		t.Errorf("outcomes %v, want both ways of losing a reply", count)
	}
	st := s.Stats()
	if st.Actions != 1 || st.Duplicates != n-1 || st.ByStatus["reset"] != count[mishapAbort] || st.ByStatus["200"] != count[mishapLate] {
		t.Errorf("stats %+v, want 1 action, %d duplicates, %v", st, n-1, count)
	}
}

func TestLostReplyReset(t *testing.T) {
	s := newServer(t, Config{Mode: ModeLostReply, FailRate: 1e-9})
	for _, key := range []string{"a", "b", "a"} {
		act(s, key)
	}
	if st := s.Stats(); st.Actions != 2 || st.Duplicates != 1 {
		t.Fatalf("stats %+v, want 2 actions and 1 duplicate", st)
	}
	s.Reset()
	if data, _ := json.Marshal(s.Stats()); string(data) != `{"requests":0,"by_status":{},"input_tokens":0,"output_tokens":0,"tallies":{}}` {
		t.Errorf("stats after Reset %s", data)
	}
	// The key is forgotten: it performs a new action, numbered 1 again.
	if rec, _ := act(s, "b"); rec.Body.String() != `{"ok":true,"action":1}`+"\n" {
		t.Errorf("key after Reset: %q", rec.Body)
	}
	if st := s.Stats(); st.Actions != 1 || st.Duplicates != 0 {
		t.Errorf("stats %+v, want 1 action", st)
	}
}

func TestLostReplyConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Mode: ModeLostReply, Seed: 9})
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() { act(s, "key-"+strconv.Itoa(i%50)) })
		}
		wg.Go(func() { s.Stats() })
		wg.Wait()
		st := s.Stats()
		if st.Requests != 200 || st.Actions != 50 || st.Duplicates != 150 || st.ByStatus["200"]+st.ByStatus["reset"] != 200 {
			t.Errorf("stats %+v, want 200 requests, 50 actions, 150 duplicates", st)
		}
		if st.ByStatus["reset"] == 0 {
			t.Errorf("stats %+v: no reply lost at FailRate 0.35", st)
		}
	})
}

func TestKeyBound(t *testing.T) {
	s := newServer(t, Config{Mode: ModeLostReply})
	for i := range maxKeys + 1 {
		s.perform(strconv.Itoa(i))
	}
	if len(s.keys) != maxKeys || len(s.keyOrder) != maxKeys {
		t.Fatalf("%d keys on record, %d in order; want %d", len(s.keys), len(s.keyOrder), maxKeys)
	}
	// Key 0, the oldest, is forgotten. Performing it anew forgets key 1 in
	// turn, but key 2 is remembered.
	if a := s.perform("0"); a != maxKeys+2 {
		t.Errorf("forgotten key: action %d, want a new one, %d", a, maxKeys+2)
	}
	if a := s.perform("2"); a != 3 {
		t.Errorf("remembered key: action %d, want 3", a)
	}
	if st := s.Stats(); st.Actions != maxKeys+2 || st.Duplicates != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestLostReplyStatsJSON(t *testing.T) {
	s := newServer(t, Config{Mode: ModeLostReply, FailRate: 1e-9})
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, key := range []string{"x", "x", ""} {
		req, _ := http.NewRequest("POST", srv.URL+"/", nil)
		if key != "" {
			req.Header.Set(HeaderIdempotencyKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := `{"requests":3,"by_status":{"200":3},"actions":2,"duplicates":1,"input_tokens":0,"output_tokens":0,` +
		`"tallies":{"":{"":{"requests":3,"input_tokens":0,"output_tokens":0}}}}` + "\n"
	if string(body) != want {
		t.Errorf("GET %s: %q, want %q", StatsPath, body, want)
	}
}
