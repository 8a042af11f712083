package analyze

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func analyzeLines(t *testing.T, o Options, lines ...string) Report {
	t.Helper()
	a := New(o)
	if _, err := a.Read(context.Background(), "log", strings.NewReader(strings.Join(lines, "\n")+"\n")); err != nil {
		t.Fatal(err)
	}
	return a.Report()
}

func rowOf(t *testing.T, r Report, group string) Row {
	t.Helper()
	for _, row := range r.Rows {
		if row.Group == group {
			return row
		}
	}
	t.Fatalf("no row %q in %v", group, groups(r))
	return Row{}
}

func groups(r Report) []string {
	var g []string
	for _, row := range r.Rows {
		g = append(g, row.Group+" ("+row.Kind+")")
	}
	return g
}

func usdIs(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-6 }

func TestReboundSchema(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"time":"2025-03-01T00:00:00Z","level":"WARN","msg":"rebound.call","target":"gpt-x:plan","attempts":1,"succeeded":false,"kind":"context_overflow","status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","reason":"not_retryable","waited_ms":0}`,
		`{"time":"2025-03-01T00:00:01Z","level":"WARN","msg":"rebound.call","target":"gpt-x:plan","attempts":3,"succeeded":false,"kind":"rate_limited","status":429,"error_type":"requests","error_code":"rate_limit_exceeded","reason":"max_attempts","waited_ms":2500.5}`,
		`{"time":"2025-03-01T00:00:02Z","level":"INFO","msg":"rebound.call","target":"gpt-x:plan","attempts":2,"succeeded":true,"waited_ms":120}`,
		`{"time":"2025-03-01T00:00:03Z","level":"INFO","msg":"rebound.call","target":"gpt-x:plan","succeeded":true}`,
		`{"time":"2025-03-01T00:00:04Z","level":"WARN","msg":"rebound.call","attempts":2,"succeeded":false,"kind":"transient","reason":"max_attempts"}`,
		`{"time":"2025-03-01T00:00:05Z","level":"WARN","msg":"rebound.call","attempts":1,"succeeded":false,"kind":"canceled","reason":"canceled"}`,
		`{"time":"2025-03-01T00:00:06Z","level":"INFO","msg":"rebound.retry","target":"gpt-x:plan","attempt":1,"succeeded":false,"kind":"transient"}`,
		`{"time":"2025-03-01T00:00:07Z","level":"INFO","msg":"rebound.attempt","attempt":1,"succeeded":true}`,
		`{"time":"2025-03-01T00:00:08Z","level":"INFO","msg":"server started","succeeded":true}`,
		`{"time":"2025-03-01T00:00:09Z","level":"INFO","msg":"rebound.call","attempts":1}`, // no "succeeded"
	)
	if r.Lines != 10 || r.Calls != 6 || r.Skipped != 3 || r.Malformed != 1 {
		t.Fatalf("lines %d calls %d skipped %d malformed %d", r.Lines, r.Calls, r.Skipped, r.Malformed)
	}
	if got := r.Files[0].MalformedLines; !slices.Equal(got, []int64{10}) {
		t.Errorf("malformed lines %v", got)
	}
	co := rowOf(t, r, "400 context_length_exceeded")
	if co.Kind != "context_overflow" || co.Calls != 1 || co.Retries != 0 || co.Futile || co.ErrorType != "invalid_request_error" {
		t.Errorf("context overflow row %+v", co)
	}
	rl := rowOf(t, r, "429 rate_limit_exceeded")
	if rl.Kind != "rate_limited" || rl.Attempts != 3 || rl.Retries != 2 || rl.CallsRetried != 1 || rl.WastedAttempts != 3 {
		t.Errorf("rate-limited row %+v", rl)
	}
	ok := rowOf(t, r, "ok")
	if ok.Calls != 2 || ok.Attempts != 3 || ok.SucceededAfterRetry != 1 || ok.WastedAttempts != 1 || ok.SuccessRate != 1 || ok.Kind != "" {
		t.Errorf("ok row %+v", ok)
	}
	if tr := rowOf(t, r, "transport error"); tr.Kind != "transient" || tr.Attempts != 2 {
		t.Errorf("transport row %+v", tr)
	}
	if c := rowOf(t, r, "canceled"); c.Kind != "canceled" {
		t.Errorf("canceled row %+v", c)
	}
	tot := r.Totals
	if tot.Calls != 6 || tot.Succeeded != 2 || tot.Attempts != 10 || tot.Retries != 4 || tot.CallsRetried != 3 ||
		tot.SucceededAfterRetry != 1 || tot.WastedAttempts != 8 || tot.SuccessRate != round(2.0/6, 1e6) ||
		tot.RetryRate != 0.5 {
		t.Errorf("totals %+v", tot)
	}
	if tot.CostUSD != nil || tot.PricedCalls != 0 || tot.CostPerSuccessUSD != nil {
		t.Errorf("rebound's records log no tokens, yet cost %v", *tot.CostUSD)
	}
}

func TestSimpleSchema(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"succeeded":true}`,
		`{"succeeded":true,"status":200,"input_tokens":10,"model":"gpt-4o"}`, // a 2xx is no error
		`{"succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true,"attempts":4}`,
		`{"succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true}`, // 2 attempts
		`{"succeeded":true,"status":503,"retried":true,"attempts":3}`,
		`{"succeeded":false,"status":503,"retried":false}`,
		`{"succeeded":false,"retried":true}`,
		`{"succeeded":true,"error_type":"overloaded_error","retried":true,"target":"claude"}`,
		`{"status":500}`, // no "succeeded": neither schema
		``,
		`  `,
	)
	if r.Lines != 11 || r.Calls != 8 || r.Skipped != 3 || r.Malformed != 0 {
		t.Fatalf("lines %d calls %d skipped %d malformed %d", r.Lines, r.Calls, r.Skipped, r.Malformed)
	}
	if ok := rowOf(t, r, "ok"); ok.Calls != 2 || ok.Attempts != 2 {
		t.Errorf("ok row %+v", ok)
	}
	co := rowOf(t, r, "400 context_length_exceeded")
	if co.Calls != 2 || co.Attempts != 6 || co.Retries != 4 || co.CallsRetried != 2 || co.Kind != "context_overflow" || !co.Futile {
		t.Errorf("context overflow row %+v", co)
	}
	s := rowOf(t, r, "503")
	if s.Calls != 2 || s.Attempts != 4 || s.Succeeded != 1 || s.SucceededAfterRetry != 1 || s.SuccessRate != 0.5 ||
		s.WastedAttempts != 3 || s.Kind != "transient" || s.Futile {
		t.Errorf("503 row %+v", s)
	}
	if tr := rowOf(t, r, "transport error"); tr.Attempts != 2 || tr.Succeeded != 0 {
		t.Errorf("transport row %+v", tr)
	}
	if ov := rowOf(t, r, "overloaded_error"); ov.Kind != "overloaded" || ov.SucceededAfterRetry != 1 || ov.Status != 0 {
		t.Errorf("overloaded row %+v", ov)
	}
}

// TestKinds checks each kind's verdict and recommendation, computed from a
// status, type and code or taken from rebound's log.
func TestKinds(t *testing.T) {
	cases := []struct {
		line, group, kind, rec string
		futile                 bool
	}{
		{`{"succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","attempts":2}`,
			"400 context_length_exceeded", "context_overflow", "never retry; compact or fall back", true},
		{`{"succeeded":false,"status":413,"attempts":2}`, "413", "context_overflow", "never retry; compact or fall back", true},
		{`{"succeeded":false,"status":429,"error_type":"insufficient_quota","error_code":"insufficient_quota","attempts":3}`,
			"429 insufficient_quota", "quota_exhausted", "never retry; quota does not come back in seconds: fall back or alert", true},
		{`{"succeeded":false,"status":402,"attempts":2}`, "402", "quota_exhausted", "never retry; quota does not come back in seconds: fall back or alert", true},
		{`{"succeeded":false,"status":400,"error_type":"invalid_request_error","attempts":2}`, "400 invalid_request_error", "permanent", "never retry: fix the request", true},
		{`{"succeeded":false,"status":401,"attempts":2}`, "401", "permanent", "never retry: fix the request", true},
		{`{"succeeded":false,"status":429,"error_code":"rate_limit_exceeded","attempts":2}`, "429 rate_limit_exceeded", "rate_limited", "retry with backoff, honour Retry-After", false},
		{`{"succeeded":false,"status":529,"attempts":2}`, "529", "overloaded", "retry; fall back on repeat", false},
		{`{"succeeded":false,"status":503,"error_type":"overloaded_error","attempts":2}`, "503 overloaded_error", "overloaded", "retry; fall back on repeat", false},
		{`{"succeeded":false,"status":503,"attempts":2}`, "503", "transient", "retry with backoff and jitter", false},
		{`{"succeeded":false,"attempts":2}`, "transport error", "transient", "retry with backoff and jitter", false},
		// rebound's logged kind wins over what the status alone says.
		{`{"msg":"rebound.call","succeeded":false,"kind":"context_overflow","status":400,"error_type":"invalid_request_error","attempts":2}`,
			"400 invalid_request_error", "context_overflow", "never retry; compact or fall back", true},
		{`{"msg":"rebound.call","succeeded":false,"kind":"permanent","attempts":2}`, "transport error", "permanent", "never retry: fix the request", true},
		{`{"msg":"rebound.call","succeeded":false,"kind":"canceled","attempts":2}`, "canceled", "canceled", "not a provider failure: check the caller's deadlines", false},
		// An unknown kind name is computed instead.
		{`{"msg":"rebound.call","succeeded":false,"kind":"weird","status":401}`, "401", "permanent", "never retry: fix the request", false},
	}
	for _, c := range cases {
		r := analyzeLines(t, Options{}, c.line)
		if len(r.Rows) != 1 {
			t.Fatalf("%s: rows %v", c.line, groups(r))
		}
		row := r.Rows[0]
		if row.Group != c.group || row.Kind != c.kind || row.Recommendation != c.rec || row.Futile != c.futile {
			t.Errorf("%s:\ngot  %q %s %q futile=%v\nwant %q %s %q futile=%v", c.line, row.Group, row.Kind,
				row.Recommendation, row.Futile, c.group, c.kind, c.rec, c.futile)
		}
		if want := int64(0); c.futile {
			want = row.Retries
			if r.Totals.FutileRetries != want {
				t.Errorf("%s: futile retries %d, want %d", c.line, r.Totals.FutileRetries, want)
			}
		} else if r.Totals.FutileRetries != want {
			t.Errorf("%s: futile retries %d", c.line, r.Totals.FutileRetries)
		}
	}
}

func TestCost(t *testing.T) {
	lines := []string{
		// failed, 4 attempts of 100 000 input tokens: all waste
		`{"succeeded":false,"status":400,"error_code":"context_length_exceeded","attempts":4,"input_tokens":100000}`,
		// succeeded on the 2nd attempt: 1 attempt's input is waste
		`{"succeeded":true,"status":429,"error_code":"rate_limit_exceeded","attempts":2,"input_tokens":1000,"output_tokens":500}`,
		// succeeded at once
		`{"succeeded":true,"input_tokens":2000,"output_tokens":1000}`,
		// a logged cost wins over prices, split evenly across attempts
		`{"succeeded":true,"status":503,"attempts":4,"input_tokens":9999999,"cost":0.8}`,
		// no tokens, no cost: unknown
		`{"succeeded":false,"status":503,"attempts":3}`,
	}
	const in, out = 2.5, 10.0 // dollars per million tokens

	r := analyzeLines(t, Options{Priced: true, PriceIn: in, PriceOut: out}, lines...)
	co := rowOf(t, r, "400 context_length_exceeded")
	if c := 4 * 100000 * in / 1e6; !usdIs(co.CostUSD, c) || !usdIs(co.WastedUSD, c) || !usdIs(co.RetryCostUSD, 3*100000*in/1e6) {
		t.Errorf("failed call: cost %v wasted %v retry %v, want %v all wasted", *co.CostUSD, *co.WastedUSD, *co.RetryCostUSD, c)
	}
	rl := rowOf(t, r, "429 rate_limit_exceeded")
	if !usdIs(rl.CostUSD, (2*1000*in+500*out)/1e6) || !usdIs(rl.WastedUSD, 1000*in/1e6) {
		t.Errorf("succeeded after retry: cost %v wasted %v", *rl.CostUSD, *rl.WastedUSD)
	}
	if ok := rowOf(t, r, "ok"); !usdIs(ok.CostUSD, (2000*in+1000*out)/1e6) || !usdIs(ok.WastedUSD, 0) {
		t.Errorf("ok: cost %v wasted %v", *ok.CostUSD, *ok.WastedUSD)
	}
	s := rowOf(t, r, "503")
	if s.PricedCalls != 1 || !usdIs(s.CostUSD, 0.8) || !usdIs(s.WastedUSD, 0.6) {
		t.Errorf("503: priced %d cost %v wasted %v", s.PricedCalls, *s.CostUSD, *s.WastedUSD)
	}
	tot := r.Totals
	total := 4*100000*in/1e6 + (2*1000*in+500*out)/1e6 + (2000*in+1000*out)/1e6 + 0.8
	wasted := 4*100000*in/1e6 + 1000*in/1e6 + 0.6
	if tot.PricedCalls != 4 || !usdIs(tot.CostUSD, total) || !usdIs(tot.WastedUSD, wasted) ||
		!usdIs(tot.CostPerSuccessUSD, round(total, 1e6)/3) {
		t.Errorf("totals: priced %d cost %v wasted %v per success %v", tot.PricedCalls, *tot.CostUSD, *tot.WastedUSD, *tot.CostPerSuccessUSD)
	}
	if !usdIs(tot.FutileRetryCostUSD, 3*100000*in/1e6) || tot.FutileRetries != 3 {
		t.Errorf("futile: %d retries, %v", tot.FutileRetries, *tot.FutileRetryCostUSD)
	}
	// Rows sort by wasted dollars, then calls.
	if r.Rows[0].Group != "400 context_length_exceeded" || r.Rows[1].Group != "503" {
		t.Errorf("order %v", groups(r))
	}

	// Without prices only the logged cost is known.
	r = analyzeLines(t, Options{}, lines...)
	if r.Totals.PricedCalls != 1 || !usdIs(r.Totals.CostUSD, 0.8) {
		t.Errorf("unpriced: %d priced calls, cost %v", r.Totals.PricedCalls, *r.Totals.CostUSD)
	}
	if co := rowOf(t, r, "400 context_length_exceeded"); co.CostUSD != nil || co.WastedUSD != nil {
		t.Errorf("unpriced row has a cost: %+v", co)
	}
	// With no cost at all, every dollar figure is null in JSON.
	r = analyzeLines(t, Options{}, lines[0], lines[4])
	b, _ := json.Marshal(r)
	for _, key := range []string{`"cost_usd":null`, `"wasted_usd":null`, `"cost_per_success_usd":null`, `"futile_retry_cost_usd":null`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("no %s in %s", key, b)
		}
	}
}

func TestMalformed(t *testing.T) {
	good := `{"succeeded":true}`
	bad := []string{
		`not json`,
		`[1,2]`,
		`null`,
		`{"succeeded":true`,
		`{"succeeded":"yes"}`,
		`{"succeeded":true,"status":"400"}`,
		`{"succeeded":true,"attempts":1.5}`,
		`{"succeeded":true,"attempts":-1}`,
		`{"succeeded":true,"attempts":1000001}`,
		`{"succeeded":true,"status":1000}`,
		`{"succeeded":true,"input_tokens":-5}`,
		`{"succeeded":true,"cost":-0.1}`,
		`{"succeeded":true,"cost":"0.1"}`,
		`{"succeeded":true,"cost":1e999}`,
		`{"succeeded":true,"cost":1e308}`,
		`{"succeeded":true,"cost":1000000001}`,
		`{"succeeded":true} trailing`,
		`{"msg":"rebound.call","attempts":1}`,
	}
	lines := []string{good}
	for _, b := range bad {
		lines = append(lines, b, good)
	}
	r := analyzeLines(t, Options{}, lines...)
	if r.Malformed != int64(len(bad)) || r.Calls != int64(len(bad)+1) {
		t.Errorf("malformed %d, calls %d; want %d, %d", r.Malformed, r.Calls, len(bad), len(bad)+1)
	}
	if got, want := r.Files[0].MalformedLines, []int64{2, 4, 6, 8, 10}; !slices.Equal(got, want) {
		t.Errorf("malformed lines %v, want %v", got, want)
	}
	for _, b := range bad {
		if r := analyzeLines(t, Options{}, b); r.Malformed != 1 {
			t.Errorf("%s: not malformed", b)
		}
	}
}

// TestLongLines checks that a line up to MaxLineBytes is read, a longer one
// is malformed, and reading goes on after it, the line count right.
func TestLongLines(t *testing.T) {
	line := func(n int) string {
		head := `{"succeeded":true,"pad":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	in := strings.Join([]string{
		line(MaxLineBytes),
		line(MaxLineBytes + 1),
		line(5 * MaxLineBytes),
		line(MaxLineBytes) + "\r",
		`{"succeeded":false,"status":503}`,
	}, "\n") // no newline at the end
	a := New(Options{})
	f, err := a.Read(context.Background(), "long", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if f.Lines != 5 || f.Calls != 3 || f.Malformed != 2 || !slices.Equal(f.MalformedLines, []int64{2, 3}) {
		t.Errorf("%+v", f)
	}
	if r := a.Report(); rowOf(t, r, "503").Calls != 1 || rowOf(t, r, "ok").Calls != 2 {
		t.Errorf("rows %v", groups(r))
	}
	if cap(a.long) > MaxLineBytes+readerSize+2 {
		t.Errorf("kept %d bytes for a long line", cap(a.long))
	}
}

func TestOtherGroup(t *testing.T) {
	a := New(Options{MaxGroups: 10})
	var in strings.Builder
	for i := range 100 {
		fmt.Fprintf(&in, `{"succeeded":false,"status":400,"error_code":"code_%d","attempts":2}`+"\n", i)
	}
	in.WriteString(`{"succeeded":true}` + "\n") // "ok" has a row whatever comes before it
	if _, err := a.Read(context.Background(), "hostile", strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	r := a.Report()
	if len(r.Rows) != 12 || len(a.groups) != 12 || len(a.kinds) > 10 || rowOf(t, r, "ok").Calls != 1 {
		t.Fatalf("%d rows, %d groups, %d kinds cached", len(r.Rows), len(a.groups), len(a.kinds))
	}
	other := rowOf(t, r, "other")
	if other.Calls != 90 || other.Attempts != 180 || other.Kind != "" || r.Totals.Calls != 101 {
		t.Errorf("other %+v, totals %+v", other, r.Totals)
	}
}

// TestClip checks that a long type or code is cut, on a rune boundary.
func TestClip(t *testing.T) {
	long := strings.Repeat("é", 100)
	r := analyzeLines(t, Options{}, `{"succeeded":false,"status":400,"error_code":"`+long+`"}`)
	code := r.Rows[0].ErrorCode
	if len(code) > MaxCodeBytes || !strings.HasPrefix(long, code) || len(code) < MaxCodeBytes-1 {
		t.Errorf("clipped to %q", code)
	}
}

// TestClipDropsControlCharacters: a type that would set a terminal's title
// and clear its screen reaches no report as such.
func TestClipDropsControlCharacters(t *testing.T) {
	r := analyzeLines(t, Options{}, `{"succeeded":false,"status":400,"error_type":"\u001b]0;owned\u0007\u001b[2Jcall me"}`)
	typ := r.Rows[0].ErrorType
	if strings.ContainsAny(typ, "\x1b\x07") || !strings.Contains(typ, "call me") {
		t.Errorf("error type %q", typ)
	}
}

func TestReadCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := New(Options{})
	var in bytes.Buffer
	if err := Generate(&in, 10000, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(ctx, "x", &in); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadError(t *testing.T) {
	a := New(Options{})
	r := io.MultiReader(strings.NewReader(`{"succeeded":true}`+"\n"), failingReader{})
	f, err := a.Read(context.Background(), "x", r)
	if err == nil || f.Calls != 1 {
		t.Errorf("err %v, %+v", err, f)
	}
}

// TestReportJSON checks the documented keys of the JSON report.
func TestReportJSON(t *testing.T) {
	r := analyzeLines(t, Options{}, `{"succeeded":true}`, `{"succeeded":false,"status":429,"error_code":"insufficient_quota","attempts":2,"cost":0.2}`)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "report", top, "calls", "files", "lines", "malformed", "rows", "skipped", "totals")
	var totals map[string]json.RawMessage
	json.Unmarshal(top["totals"], &totals)
	checkKeys(t, "totals", totals, "attempts", "cache_read_share", "cache_read_tokens", "cache_saved_usd", "cache_write_tokens",
		"calls", "calls_retried", "cost_per_success_usd", "cost_usd",
		"futile_retries", "futile_retry_cost_usd", "input_tokens", "priced_calls",
		"response_cache_hits", "response_cache_saved_usd", "response_cache_stale", "retries", "retry_cost_usd", "retry_rate",
		"succeeded", "succeeded_after_retry", "success_rate", "wasted_attempts", "wasted_usd")
	var rows []map[string]json.RawMessage
	json.Unmarshal(top["rows"], &rows)
	checkKeys(t, "row", rows[0], "attempts", "calls", "calls_retried", "cost_usd", "error_code", "futile", "group",
		"kind", "priced_calls", "recommendation", "retries", "retry_cost_usd", "status", "succeeded",
		"succeeded_after_retry", "success_rate", "wasted_attempts", "wasted_usd")
	var files []map[string]json.RawMessage
	json.Unmarshal(top["files"], &files)
	checkKeys(t, "file", files[0], "calls", "lines", "malformed", "malformed_lines", "name", "skipped")
	if string(files[0]["malformed_lines"]) != "[]" {
		t.Errorf("malformed_lines %s", files[0]["malformed_lines"])
	}
}

func checkKeys(t *testing.T, what string, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s keys %v, want %v", what, got, want)
	}
}

func TestGenerate(t *testing.T) {
	var a, b, c bytes.Buffer
	for _, x := range []struct {
		w    *bytes.Buffer
		seed uint64
	}{{&a, 7}, {&b, 7}, {&c, 8}} {
		if err := Generate(x.w, 5000, x.seed); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Error("same seed, different lines, or different seeds, the same")
	}
	an := New(Options{Priced: true, PriceIn: 2.5, PriceOut: 10})
	f, err := an.Read(context.Background(), "gen", &a)
	if err != nil {
		t.Fatal(err)
	}
	if f.Lines != 5000 || f.Malformed != 0 || f.Skipped == 0 || f.Calls < 4000 {
		t.Errorf("%+v", f)
	}
	r := an.Report()
	if r.Totals.FutileRetries == 0 || r.Totals.SucceededAfterRetry == 0 || r.Totals.PricedCalls == 0 ||
		r.Totals.PricedCalls == r.Totals.Calls || len(r.Rows) < 10 {
		t.Errorf("an unrealistic mix: %+v, rows %v", r.Totals, groups(r))
	}
}

// heapAfter feeds a the lines of gen and returns the live heap once it is
// done.
func heapAfter(t *testing.T, a *Analyzer, gen func(io.Writer) error) uint64 {
	t.Helper()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(gen(pw)) }()
	if _, err := a.Read(context.Background(), "gen", pr); err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestConstantMemory checks that the live heap does not grow with the
// input: after 10 000 lines and after 100 000 more it is the same, give or
// take, for a realistic log and for a hostile one whose every line is a
// new group.
func TestConstantMemory(t *testing.T) {
	hostile := func(from, n int) func(io.Writer) error {
		return func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			for i := from; i < from+n; i++ {
				fmt.Fprintf(bw, `{"succeeded":false,"status":%d,"error_type":"type_%d","error_code":"%s_%d"}`+"\n",
					400+i%100, i, strings.Repeat("c", 50), i)
			}
			return bw.Flush()
		}
	}
	for _, tc := range []struct {
		name        string
		small, more func(io.Writer) error
	}{
		{"generated",
			func(w io.Writer) error { return Generate(w, 10000, 1) },
			func(w io.Writer) error { return Generate(w, 100000, 2) }},
		{"hostile", hostile(0, 10000), hostile(10000, 100000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Options{Priced: true, PriceIn: 1, PriceOut: 1, MaxGroups: 2000})
			small := heapAfter(t, a, tc.small)
			large := heapAfter(t, a, tc.more)
			const slack = 1 << 20
			if large > small+slack {
				t.Errorf("live heap grew from %d to %d bytes", small, large)
			}
			if len(a.groups) > 2002 || len(a.dec.strs) > maxInterned {
				t.Errorf("%d groups, %d interned strings", len(a.groups), len(a.dec.strs))
			}
			runtime.KeepAlive(a)
		})
	}
}

// TestAllocsPerLine checks that a line of a known group allocates nothing
// that stays, or at most a string.
func TestAllocsPerLine(t *testing.T) {
	a := New(Options{Priced: true, PriceIn: 1, PriceOut: 1})
	for _, line := range []string{
		`{"time":"2025-03-01T00:00:00Z","level":"WARN","msg":"rebound.call","target":"gpt-x","attempts":3,"succeeded":false,"kind":"rate_limited","status":429,"error_type":"requests","error_code":"rate_limit_exceeded","reason":"max_attempts","waited_ms":2500}`,
		`{"model":"gpt-4o","succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true,"attempts":4,"input_tokens":130000,"cost":1.3}`,
		`{"time":"2025-03-01T00:00:00Z","level":"INFO","msg":"rebound.retry","attempt":1}`,
		`{"time":"2025-03-01T00:00:00Z","level":"WARN","msg":"rebound.call","target":"gpt-x","attempts":1,"succeeded":false,"kind":"transient","reason":"refused by the guard","run":"run-0042","tenant":"acme","run_cap_usd":5,"tenant_cap_usd":100,"cost":0.01}`,
	} {
		b := []byte(line)
		a.line(b) // the group's first call
		if n := testing.AllocsPerRun(1000, func() { a.line(b) }); n > 1 {
			t.Errorf("%.1f allocations a line: %s", n, line)
		}
	}
}

// TestAbsurdPrices checks that no price and no log, however large, makes a
// figure infinite or NaN: every report encodes as JSON.
func TestAbsurdPrices(t *testing.T) {
	huge := fmt.Sprintf(`{"succeeded":%%v,"status":%%d,"attempts":%d,"input_tokens":%d,"output_tokens":%d}`,
		MaxAttempts, int64(math.MaxInt64), int64(math.MaxInt64))
	lines := []string{
		fmt.Sprintf(huge, true, 0), fmt.Sprintf(huge, true, 0),
		fmt.Sprintf(huge, false, 400), fmt.Sprintf(huge, false, 400),
		fmt.Sprintf(`{"succeeded":true,"attempts":2,"cost":%v}`, MaxCost),
		fmt.Sprintf(`{"succeeded":true,"attempts":2,"cost":%v}`, MaxCost),
	}
	for _, price := range []float64{1e308, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN(), -1, MaxPrice} {
		r := analyzeLines(t, Options{Priced: true, PriceIn: price, PriceOut: price}, lines...)
		b, err := json.Marshal(r)
		if err != nil {
			t.Errorf("price %v: %v", price, err)
			continue
		}
		if s := string(b); strings.Contains(s, "Inf") || strings.Contains(s, "NaN") {
			t.Errorf("price %v: %s", price, s)
		}
		if r.Totals.CostUSD == nil || *r.Totals.CostUSD < 2*MaxCost {
			t.Errorf("price %v: cost %v, want at least the logged costs", price, r.Totals.CostUSD)
		}
	}
}

// TestCachedShareAndSavings: the totals carry the input tokens the calls
// logged, those of them read from the provider's cache and written into
// it, the share read from the cache, and, with prices, what the cache
// saved: what that input would have cost at the input price, less what it
// cost at the cache prices (a cache price not given is the input price:
// nothing saved). A call that logs its cost costs that; its tokens still
// count.
func TestCachedShareAndSavings(t *testing.T) {
	lines := []string{
		// rebound proxy's lines: one with the cache's counts and its cost,
		// one retried that read nothing from a cache
		`{"msg":"request","status":200,"attempts":1,"input_tokens":92010,"output_tokens":200,"cache_read_tokens":90000,"cache_write_tokens":2000,"cost_usd":0.038655}`,
		`{"msg":"request","status":200,"attempts":2,"input_tokens":1000,"output_tokens":10,"cost_usd":0.001}`,
		// the simple schema, priced from its tokens
		`{"succeeded":true,"input_tokens":5000,"output_tokens":100,"cache_read_tokens":4000}`,
		// no tokens
		`{"msg":"rebound.call","succeeded":true}`,
	}
	const in, out, read, write = 3.0, 15.0, 0.3, 3.75
	r := analyzeLines(t, Options{Priced: true, PriceIn: in, PriceOut: out, PriceCacheRead: ptr(read), PriceCacheWrite: ptr(write)}, lines...)
	tot := r.Totals
	if tot.InputTokens != 98010 || tot.CacheReadTokens != 94000 || tot.CacheWriteTokens != 2000 ||
		tot.CacheReadShare == nil || math.Abs(*tot.CacheReadShare-94000.0/98010) > 1e-6 {
		t.Errorf("tokens: input %d, read %d, written %d, share %v; want 98010, 94000, 2000 and %v",
			tot.InputTokens, tot.CacheReadTokens, tot.CacheWriteTokens, tot.CacheReadShare, 94000.0/98010)
	}
	spend := 0.038655 + 0.001 + (1000*in+4000*read+100*out)/1e6
	saved := (90000*(in-read) + 2000*(in-write) + 4000*(in-read)) / 1e6
	if !usdIs(tot.CostUSD, spend) || !usdIs(tot.CacheSavedUSD, saved) {
		t.Errorf("spend %v, saved %v; want %v and %v", tot.CostUSD, tot.CacheSavedUSD, spend, saved)
	}
	// Only input and output prices: the cache is priced as input, and
	// saved nothing.
	r = analyzeLines(t, Options{Priced: true, PriceIn: in, PriceOut: out}, lines...)
	if !usdIs(r.Totals.CacheSavedUSD, 0) || !usdIs(r.Totals.CostUSD, 0.038655+0.001+(5000*in+100*out)/1e6) {
		t.Errorf("without cache prices: saved %v, spend %v", r.Totals.CacheSavedUSD, r.Totals.CostUSD)
	}
	// Without prices, the savings are not known; the share is.
	r = analyzeLines(t, Options{}, lines...)
	if r.Totals.CacheSavedUSD != nil || r.Totals.CacheReadShare == nil || !usdIs(r.Totals.CostUSD, 0.039655) {
		t.Errorf("without prices: saved %v, share %v, spend %v", r.Totals.CacheSavedUSD, r.Totals.CacheReadShare, r.Totals.CostUSD)
	}
	// No input logged: no share.
	r = analyzeLines(t, Options{}, lines[3])
	if r.Totals.CacheReadShare != nil || r.Totals.InputTokens != 0 {
		t.Errorf("no tokens: share %v, input %d", r.Totals.CacheReadShare, r.Totals.InputTokens)
	}
}

// TestCacheCountsBeyondTheInputAreMalformed: the cache's counts are parts
// of input_tokens; a line whose counts are negative, not whole numbers,
// or add up to more than its input is malformed.
func TestCacheCountsBeyondTheInputAreMalformed(t *testing.T) {
	for _, line := range []string{
		`{"succeeded":true,"input_tokens":10,"cache_read_tokens":11}`,
		`{"succeeded":true,"input_tokens":10,"cache_write_tokens":11}`,
		`{"succeeded":true,"input_tokens":10,"cache_read_tokens":6,"cache_write_tokens":5}`,
		`{"succeeded":true,"cache_read_tokens":1}`,
		`{"succeeded":true,"input_tokens":10,"cache_read_tokens":-1}`,
		`{"msg":"request","status":200,"input_tokens":10,"cache_write_tokens":"5"}`,
		`{"msg":"request","status":200,"input_tokens":10,"cache_read_tokens":1.5}`,
		`{"succeeded":true,"input_tokens":9223372036854775807,"cache_read_tokens":9223372036854775807,"cache_write_tokens":1}`,
	} {
		if r := analyzeLines(t, Options{}, line); r.Malformed != 1 {
			t.Errorf("%s: %d malformed, want 1", line, r.Malformed)
		}
	}
	huge := `{"succeeded":true,"attempts":1000000,"input_tokens":9223372036854775807,"cache_read_tokens":9223372036854775806,"cache_write_tokens":1}`
	r := analyzeLines(t, Options{Priced: true, PriceIn: MaxPrice, PriceCacheRead: ptr(0), PriceCacheWrite: ptr(MaxPrice)}, huge, huge)
	if b, err := json.Marshal(r); err != nil || r.Malformed != 0 || r.Totals.InputTokens != math.MaxInt64 || *r.Totals.CacheReadShare > 1 {
		t.Errorf("the largest counts: %v %s", err, b)
	}
}

func ptr(v float64) *float64 { return &v }

// TestAnswersFromTheResponseCache: rebound proxy's lines of answers its
// response cache served are counted apart, hit and stale, with what they
// did not cost, in both outputs.
func TestAnswersFromTheResponseCache(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"msg":"request","status":200,"attempts":1,"cost_usd":0.01,"cache":"stored"}`,
		`{"msg":"request","status":200,"attempts":1,"cost_usd":0.02,"cache":"miss"}`,
		`{"msg":"request","status":200,"attempts":0,"cache":"hit","saved_usd":0.01}`,
		`{"msg":"request","status":200,"attempts":0,"cache":"hit","saved_usd":0.015}`,
		`{"msg":"request","status":200,"attempts":3,"cache":"stale","saved_usd":0.01}`,
		`{"msg":"request","status":200,"attempts":3,"cache":"stale"}`, // not priced
		`{"msg":"request","status":503,"attempts":3}`,
	)
	tot := r.Totals
	if tot.ResponseCacheHits != 2 || tot.ResponseCacheStale != 2 || !usdIs(tot.ResponseCacheSavedUSD, 0.035) || !usdIs(tot.CostUSD, 0.03) {
		t.Errorf("hits %d, stale %d, saved %v, cost %v; want 2, 2, 0.035 and 0.03",
			tot.ResponseCacheHits, tot.ResponseCacheStale, deref(tot.ResponseCacheSavedUSD), deref(tot.CostUSD))
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"response_cache_hits":2,"response_cache_stale":2,"response_cache_saved_usd":0.035`) {
		t.Errorf("--json: %v %s", err, b)
	}
	var text bytes.Buffer
	r.WriteTable(&text)
	if want := "answered from the response cache 4: 2 fresh (hit), 2 stale in place of a failure; they did not cost $0.035"; !strings.Contains(text.String(), want) {
		t.Errorf("the table has no line %q:\n%s", want, text.String())
	}

	// None served: nothing said, nothing known.
	r = analyzeLines(t, Options{}, `{"msg":"request","status":200,"cache":"miss","saved_usd":0.5}`)
	if r.Totals.ResponseCacheHits != 0 || r.Totals.ResponseCacheSavedUSD != nil {
		t.Errorf("a miss: %+v", r.Totals)
	}
	text.Reset()
	r.WriteTable(&text)
	if strings.Contains(text.String(), "response cache") {
		t.Errorf("a table without answers from the cache mentions it:\n%s", text.String())
	}
	for _, line := range []string{
		`{"msg":"request","status":200,"cache":"hit","saved_usd":-1}`,
		`{"msg":"request","status":200,"cache":"hit","saved_usd":"0.1"}`,
		`{"msg":"request","status":200,"cache":1}`,
	} {
		if r := analyzeLines(t, Options{}, line); r.Malformed != 1 {
			t.Errorf("%s: %d malformed, want 1", line, r.Malformed)
		}
	}
}

// TestToolCallsOfTheOneSchemaAreNotModelCalls: rebound mcp's access line
// shares the proxy's schema, with "kind":"mcp"; a model call's is "llm".
func TestToolCallsOfTheOneSchemaAreNotModelCalls(t *testing.T) {
	r := analyzeLines(t, Options{},
		`{"msg":"request","kind":"llm","status":200,"attempts":2,"kinds":["transient"]}`,
		`{"msg":"request","kind":"mcp","server":"memory","method":"tools/call","tool":"create","attempts":1,"outcome":"ok","latency_ms":3.2}`,
		`{"msg":"request","status":503,"attempts":3}`,
	)
	if r.Calls != 2 || r.Skipped != 1 || r.Malformed != 0 {
		t.Errorf("calls %d, skipped %d, malformed %d; want 2, 1, 0", r.Calls, r.Skipped, r.Malformed)
	}
}
