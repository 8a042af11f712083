package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/testclock"
	"github.com/rebound-go/rebound/observe"
)

// noTime drops the time of records, for stable output.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

var overflow = &rebound.HTTPError{StatusCode: 400, Body: []byte(`{"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"too long"}}`)}

// TestSlogHedge: a hedge is a record of its own, between the call's start
// and its end.
func TestSlogHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Observer: observe.Slog(logger)}
		ctx := rebound.WithTarget(t.Context(), "gpt-x")
		var calls atomic.Int32
		_ = rebound.Run(ctx, p, func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		rs := records(t, &buf)
		if len(rs) != 1 || rs[0]["msg"] != "rebound.hedge" || rs[0]["target"] != "gpt-x" || rs[0]["attempt"] != 1.0 ||
			rs[0]["elapsed_ms"] != 1000.0 || rs[0]["level"] != "INFO" {
			t.Fatalf("records %v; want one hedge at 1000 ms", rs)
		}
	})
}

func TestSlogRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: noTime}))
		p := rebound.Policy{BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone, Observer: observe.Slog(logger)}
		ctx := rebound.WithTarget(t.Context(), "gpt-x:summarise")
		calls := 0
		_ = rebound.Run(ctx, p, func(context.Context) error {
			calls++
			if calls == 1 {
				return &rebound.HTTPError{StatusCode: 503}
			}
			return nil
		})
		_ = rebound.Run(ctx, p, func(context.Context) error { return overflow })
		rs := records(t, &buf)
		var msgs []string
		for _, r := range rs {
			msgs = append(msgs, r["msg"].(string))
		}
		if got := strings.Join(msgs, ","); got != "rebound.attempt,rebound.retry,rebound.call,rebound.attempt,rebound.call" {
			t.Fatalf("records %s", got)
		}
		retry, ok, gaveUp := rs[1], rs[2], rs[4]
		if retry["target"] != "gpt-x:summarise" || retry["kind"] != "transient" || retry["status"] != 503.0 || retry["wait_ms"] != 100.0 {
			t.Errorf("retry record %v", retry)
		}
		if ok["succeeded"] != true || ok["attempts"] != 2.0 || ok["waited_ms"] != 100.0 || ok["level"] != "INFO" {
			t.Errorf("call record %v", ok)
		}
		if gaveUp["succeeded"] != false || gaveUp["kind"] != "context_overflow" || gaveUp["status"] != 400.0 ||
			gaveUp["error_code"] != "context_length_exceeded" || gaveUp["reason"] != "not retryable" || gaveUp["level"] != "WARN" {
			t.Errorf("give-up record %v", gaveUp)
		}
	})
}

func TestSlogRecordsRestartsAndBreakerChanges(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	obs := observe.Slog(logger)
	obs.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:memory", Attempt: 2, Err: errors.New("the server process exited")})
	obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:memory", State: "open", Wait: 30 * time.Second, Err: errors.New("exited")})
	obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:memory", State: "half-open"})
	var got []string
	for _, r := range records(t, &buf) {
		got = append(got, fmt.Sprintf("%v %v %v start=%v state=%v wait_ms=%v error=%v", r["level"], r["msg"], r["target"], r["start"], r["state"], r["wait_ms"], r["error"]))
	}
	want := []string{
		"WARN rebound.restart mcp:memory start=2 state=<nil> wait_ms=0 error=the server process exited",
		"WARN rebound.breaker mcp:memory start=<nil> state=open wait_ms=30000 error=exited",
		"INFO rebound.breaker mcp:memory start=<nil> state=half-open wait_ms=<nil> error=<nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlogRecordsAnswersServedFromACache(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	obs := observe.Slog(logger)
	obs.Observe(rebound.Event{Type: rebound.EventCacheHit, Target: "gpt-x", Age: 42 * time.Second, Elapsed: time.Millisecond})
	gaveUp := &rebound.GiveUpError{Attempts: 3, Reason: rebound.StopAttempts, Err: &rebound.HTTPError{StatusCode: 503}}
	obs.Observe(rebound.Event{Type: rebound.EventCacheStale, Target: "gpt-x", Age: time.Hour, Elapsed: 3 * time.Second,
		Attempt: 3, Reason: rebound.StopAttempts, Err: gaveUp})
	var got []string
	for _, r := range records(t, &buf) {
		got = append(got, fmt.Sprintf("%v %v %v served=%v age_s=%v elapsed_ms=%v attempts=%v reason=%v status=%v", r["level"], r["msg"], r["target"],
			r["served"], r["age_s"], r["elapsed_ms"], r["attempts"], r["reason"], r["status"]))
	}
	want := []string{
		"INFO rebound.cache gpt-x served=hit age_s=42 elapsed_ms=1 attempts=<nil> reason=<nil> status=<nil>",
		"WARN rebound.cache gpt-x served=stale age_s=3600 elapsed_ms=3000 attempts=3 reason=attempts exhausted status=503",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMonitorCountsNoAnswerFromACacheAsACall(t *testing.T) {
	m := &observe.Monitor{}
	m.Observe(rebound.Event{Type: rebound.EventCacheHit, Target: "gpt-x"})
	m.Observe(rebound.Event{Type: rebound.EventCacheStale, Target: "gpt-x", Attempt: 3})
	if rate, calls := m.Rate("gpt-x", time.Now()); calls != 0 {
		t.Fatalf("rate %v over %d calls, want no call: the give-up before a stale answer is the call", rate, calls)
	}
}

func TestMonitorCountsNoRestartOrBreakerChangeAsACall(t *testing.T) {
	m := &observe.Monitor{}
	m.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:memory", Attempt: 2})
	m.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:memory", State: "open"})
	if rate, calls := m.Rate("mcp:memory", time.Now()); calls != 0 {
		t.Fatalf("rate %v over %d calls, want no call", rate, calls)
	}
}

func TestMonitor(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	var alerts []observe.Alert
	m := &observe.Monitor{Window: time.Minute, Clock: clk, OnAlert: func(a observe.Alert) { alerts = append(alerts, a) }}
	call := func(retried bool) {
		attempt := 1
		if retried {
			attempt = 2
		}
		m.Observe(rebound.Event{Type: rebound.EventAttempt, Target: "search", Attempt: attempt})
	}
	// A minute at 2%: quiet.
	for i := range 100 {
		call(i%50 == 0)
		clk.Add(600 * time.Millisecond)
	}
	if len(alerts) != 0 {
		t.Fatalf("alerts at 2%%: %v", alerts)
	}
	// The next minute at 15%: above the threshold, and a jump.
	for i := range 100 {
		call(i%20 < 3)
		clk.Add(600 * time.Millisecond)
	}
	var kinds []string
	for _, a := range alerts {
		kinds = append(kinds, a.Kind.String())
	}
	if strings.Count(strings.Join(kinds, ","), "above") != 1 || strings.Count(strings.Join(kinds, ","), "jump") != 1 {
		t.Fatalf("alerts %v", alerts)
	}
	if rate, calls := m.Rate("search", clk.Now()); rate < 0.13 || rate > 0.17 || calls < 90 {
		t.Fatalf("rate %v over %d calls", rate, calls)
	}
	// Back to no retries: one alert that it is over.
	alerts = nil
	for range 200 {
		call(false)
		clk.Add(600 * time.Millisecond)
	}
	if len(alerts) != 1 || alerts[0].Kind != observe.AlertBelow {
		t.Fatalf("alerts after recovery %v", alerts)
	}
	if !strings.Contains(alerts[0].String(), "search") {
		t.Fatalf("alert text %q", alerts[0])
	}
}

type spanStarter struct{ calls int }

func (s *spanStarter) Observe(rebound.Event) {}
func (s *spanStarter) ObserveCall(context.Context) rebound.Observer {
	s.calls++
	return s
}

func TestMultiKeepsCallObservers(t *testing.T) {
	s := &spanStarter{}
	seen := 0
	p := rebound.Policy{Observer: observe.Multi(nil, s, rebound.ObserverFunc(func(rebound.Event) { seen++ }))}
	for range 3 {
		_ = rebound.Run(context.Background(), p, func(context.Context) error { return nil })
	}
	if s.calls != 3 || seen != 3 {
		t.Fatalf("ObserveCall %d times, %d events", s.calls, seen)
	}
}

// TestNothingSecretLeaks sends a request with every kind of credential to
// a server that echoes them in its errors, through rebound.Transport with
// the log observer and a raw event recorder attached, and checks that no
// credential appears in any event, log line or error string.
func TestNothingSecretLeaks(t *testing.T) {
	secrets := []string{"sk-proj-LEAKME000001", "sk-ant-LEAKME000002", "azure-LEAKME000003", "AIzaLEAKME000004", "AIzaLEAKME000005"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"message":"bad %s %s %s %s key=%s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"),
			r.Header.Get("Api-Key"), r.Header.Get("X-Goog-Api-Key"), r.URL.Query().Get("key"))
	}))
	defer srv.Close()
	var logs, events bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	raw := rebound.ObserverFunc(func(e rebound.Event) { fmt.Fprintf(&events, "%+v %v\n", e, e.Err) })
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay,
		Observer: observe.Multi(observe.Slog(logger), raw, &observe.Monitor{})}}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1?key="+secrets[4], strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+secrets[0])
	req.Header.Set("X-Api-Key", secrets[1])
	req.Header.Set("Api-Key", secrets[2])
	req.Header.Set("X-Goog-Api-Key", secrets[3])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, s := range secrets {
		for name, text := range map[string]string{"logs": logs.String(), "events": events.String()} {
			if strings.Contains(text, s) {
				t.Errorf("%s hold %s:\n%s", name, s, text)
			}
		}
	}
	if !strings.Contains(logs.String(), "[redacted]") || !strings.Contains(logs.String(), `"msg":"rebound.call"`) {
		t.Errorf("the logs show no scrubbed error:\n%s", logs.String())
	}
	// And the error of a call that reaches no server at all, as the
	// Transport returns it. (http.Client then wraps it in a *url.Error that
	// repeats the request's URL, query and all: a key belongs in a header,
	// as the providers' SDKs put it.)
	srv.Close()
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1?key="+secrets[4], strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+secrets[0])
	_, err = client.Transport.RoundTrip(req)
	if err == nil {
		t.Fatal("a closed server answered")
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) || strings.Contains(events.String(), s) {
			t.Errorf("secret %s leaked after a transport error: %v", s, err)
		}
	}
}

// A call that needed a retry, as its log records show it (times left out).
func ExampleSlog() {
	untimed := func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == "elapsed_ms" {
			return slog.Attr{}
		}
		return noTime(groups, a)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: untimed}))
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: observe.Slog(logger)}
	attempt := 0
	_ = rebound.Run(rebound.WithTarget(context.Background(), "search"), p, func(context.Context) error {
		attempt++
		if attempt == 1 {
			return &rebound.HTTPError{StatusCode: 429, Body: []byte(`{"error":{"type":"requests","code":"rate_limit_exceeded"}}`)}
		}
		return nil
	})
	// Output:
	// {"level":"INFO","msg":"rebound.retry","target":"search","attempt":1,"kind":"rate_limited","wait_ms":0,"waited_ms":0,"status":429,"error_type":"requests","error_code":"rate_limit_exceeded","error":"http 429 Too Many Requests: {\"error\":{\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}"}
	// {"level":"INFO","msg":"rebound.call","target":"search","attempts":2,"succeeded":true,"waited_ms":0}
}
