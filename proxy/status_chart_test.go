package proxy_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// outcomes are a row's calls by how they ended, and its chart, as
// /ui/status gives them.
type outcomes struct {
	Upstream             string
	Calls                int64
	AnsweredFirst        int64 `json:"answered_first"`
	AnsweredAfterRetries int64 `json:"answered_after_retries"`
	GaveUp               int64 `json:"gave_up"`
	PerMinute            []struct {
		Minute         time.Time
		Calls, Retries int64
		GaveUp         int64 `json:"gave_up"`
	} `json:"per_minute"`
}

// readOutcomes reads the rows of p's status by upstream, and the time
// the status was taken at.
func readOutcomes(t *testing.T, p http.Handler) (map[string]outcomes, time.Time, string) {
	t.Helper()
	_, raw := readStatus(t, p)
	var s struct {
		Now       time.Time
		Upstreams []outcomes
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	rows := map[string]outcomes{}
	for _, u := range s.Upstreams {
		rows[u.Upstream] = u
	}
	return rows, s.Now, raw
}

// scriptedProxy returns a proxy whose route calls upstream a, falling
// back to b, both in memory: a answers each attempt with the next of
// statuses (200 once they run out), b with 200. Policy: three attempts,
// 10 ms apart.
func scriptedProxy(t *testing.T, statuses ...int) http.Handler {
	t.Helper()
	var mu sync.Mutex
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status := 200
		mu.Lock()
		if r.URL.Host == "a.invalid" && len(statuses) > 0 {
			status, statuses = statuses[0], statuses[1:]
		}
		mu.Unlock()
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"choices":[]}`)), Request: r}, nil
	})
	c := config(t, `{"upstreams":{"a":{"url":"http://a.invalid"},"b":{"url":"http://b.invalid"}},
		"routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}],
		"policy":{"max_attempts":3,"base_delay_ms":10,"max_delay_ms":10}}`, nil)
	p, err := proxy.New(proxy.Options{Config: c, Base: base, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusCountsCallsAnsweredAtOnceAfterRetriesOrGivenUp: each call to
// an upstream is answered by its first attempt, answered after retries,
// or given up, and its row counts which; a call a fallback answered
// after its route's upstream gave up is a call on each. The chart's
// current minute has the calls, the retries and the give-ups.
func TestStatusCountsCallsAnsweredAtOnceAfterRetriesOrGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Call 1: answered at once. Call 2: two failures, then an answer.
		// Call 3: three failures, given up, answered by b.
		p := scriptedProxy(t, 200, 503, 503, 200, 503, 503, 503)
		for i := range 3 {
			if code := call(t, p); code != 200 {
				t.Fatalf("call %d: %d", i+1, code)
			}
		}
		rows, _, raw := readOutcomes(t, p)
		a, b := rows["a"], rows["b"]
		if a.Calls != 3 || a.AnsweredFirst != 1 || a.AnsweredAfterRetries != 1 || a.GaveUp != 1 {
			t.Errorf("a: %d calls, %d answered at once, %d after retries, %d given up; want 3, 1, 1, 1: %s",
				a.Calls, a.AnsweredFirst, a.AnsweredAfterRetries, a.GaveUp, raw)
		}
		if b.Calls != 1 || b.AnsweredFirst != 1 || b.AnsweredAfterRetries != 0 || b.GaveUp != 0 {
			t.Errorf("b, the fallback: %+v, want one call answered at once", b)
		}
		if m := a.PerMinute[len(a.PerMinute)-1]; m.Calls != 3 || m.Retries != 4 || m.GaveUp != 1 {
			t.Errorf("a's current minute: %+v, want 3 calls, 4 retries, 1 given up", m)
		}
		if m := b.PerMinute[len(b.PerMinute)-1]; m.Calls != 1 || m.Retries != 0 || m.GaveUp != 0 {
			t.Errorf("b's current minute: %+v, want 1 call", m)
		}
	})
}

// TestStatusChartHoldsTheLast30Minutes: a row's chart is 30 minutes, the
// current one last; a call moves back a place each minute, and 31
// minutes on it has left the chart, as the newer calls stay.
func TestStatusChartHoldsTheLast30Minutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := scriptedProxy(t, 503, 200) // the first call answered after a retry
		call(t, p)
		call(t, p)
		time.Sleep(10 * time.Minute)
		rows, _, raw := readOutcomes(t, p)
		if m := rows["a"].PerMinute[29-10]; m.Calls != 2 || m.Retries != 1 {
			t.Errorf("10 minutes on, the calls' minute: %+v, want 2 calls and a retry: %s", m, raw)
		}
		// Minute 31: minute 0's slot of the ring, which nothing has
		// written since, is minute 30's on the chart.
		time.Sleep(21 * time.Minute)
		call(t, p)
		rows, _, raw = readOutcomes(t, p)
		var calls, retries int64
		for _, m := range rows["a"].PerMinute {
			calls, retries = calls+m.Calls, retries+m.Retries
		}
		if last := rows["a"].PerMinute[29]; calls != 1 || retries != 0 || last.Calls != 1 {
			t.Errorf("31 minutes on: %d calls and %d retries on the chart, %d in the last minute; want the new call only: %s",
				calls, retries, last.Calls, raw)
		}
	})
}

// TestStatusJSONHasOutcomesAndAChartPerRow: every row of /ui/status,
// a fallback never called among them, has the three outcomes, which
// add up to its calls, and per_minute: 30 consecutive minutes, oldest
// first, the last the minute of the status's own time.
func TestStatusJSONHasOutcomesAndAChartPerRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := scriptedProxy(t, 400)
		time.Sleep(90 * time.Second)
		call(t, p)
		rows, now, raw := readOutcomes(t, p)
		for _, field := range []string{`"answered_first":`, `"answered_after_retries":`, `"gave_up":`, `"per_minute":[{"minute":"`, `"retries":`} {
			if strings.Count(raw, field) < 2 {
				t.Errorf("%s is not in every row: %s", field, raw)
			}
		}
		if len(rows) != 2 {
			t.Fatalf("rows: %s", raw)
		}
		for name, u := range rows {
			if u.AnsweredFirst+u.AnsweredAfterRetries+u.GaveUp != u.Calls {
				t.Errorf("%s: %d calls, but %d + %d + %d outcomes", name, u.Calls, u.AnsweredFirst, u.AnsweredAfterRetries, u.GaveUp)
			}
			if len(u.PerMinute) != 30 {
				t.Fatalf("%s: %d minutes, want 30", name, len(u.PerMinute))
			}
			for i, m := range u.PerMinute {
				if want := now.Truncate(time.Minute).Add(time.Duration(i-29) * time.Minute); !m.Minute.Equal(want) || m.Minute.Location() != time.UTC {
					t.Errorf("%s: minute %d is %v, want %v in UTC", name, i, m.Minute, want)
				}
			}
		}
		// a: a 400, which no retry cures and no fallback is asked after,
		// given up at once; b: never called.
		if a := rows["a"]; a.Calls != 1 || a.GaveUp != 1 || a.PerMinute[29].Calls != 1 || a.PerMinute[29].Retries != 0 || a.PerMinute[29].GaveUp != 1 {
			t.Errorf("a: %+v", a)
		}
		if b := rows["b"]; b.Calls != 0 || b.PerMinute[29].Calls != 0 {
			t.Errorf("b: %+v", b)
		}
	})
}
