package rebound

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/sse"
)

// The fuzz targets feed the hint and body parsers whatever a server might
// send. Seeds live in testdata/fuzz; run one with, for example,
//
//	go test -run '^$' -fuzz FuzzClassifyResponse -fuzztime 60s .

var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func checkHint(t *testing.T, d time.Duration, ok bool) {
	t.Helper()
	if ok && (d < 0 || d > header.MaxHint) {
		t.Fatalf("hint %v outside [0, %v]", d, header.MaxHint)
	}
	if !ok && d != 0 {
		t.Fatalf("no hint, yet %v", d)
	}
}

func FuzzClassifyResponse(f *testing.F) {
	f.Add(429, "", "", []byte(`{"error":{"code":"insufficient_quota","type":"insufficient_quota"}}`))
	f.Add(529, "true", "3", []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add(429, "", "", []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"53s"}]}}`))
	f.Add(400, "false", "", []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5 tokens > 4 maximum"}}`))
	f.Add(503, "", "", []byte(`{"error":"busy","retry_after":"1e9"}`))
	f.Add(0, "", "", []byte(`{"error":{"details":[{"@type":null}]}}`))
	f.Add(429, "", "", []byte(`[{"error":{"code":429,"message":"Please retry in 1m30.5s","status":"RESOURCE_EXHAUSTED"}}]`))
	f.Add(400, "", "", []byte(`{"error":{"message":"filtered","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}`))
	f.Add(500, "", "", []byte(`{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}`))
	f.Add(429, "", "", []byte(`{"error":{"message":"Limit 6000, Used 0, Requested ~12903. Please try again in 50.5s.","code":"rate_limit_exceeded"}}`))
	f.Add(0, "", "", []byte(`{"response":{"error":{"code":"server_error","message":"overloaded"}},"type":"response.failed"}`))
	f.Fuzz(func(t *testing.T, status int, shouldRetry, retryAfter string, body []byte) {
		h := http.Header{}
		h.Set("X-Should-Retry", shouldRetry)
		h.Set("Retry-After", retryAfter)
		h.Set("X-Amzn-Errortype", shouldRetry)
		h.Set("X-Ratelimit-Remaining-Tokens", "0")
		h.Set("X-Ratelimit-Reset-Tokens", retryAfter)
		v := ClassifyResponse(status, h, body)
		if v.Kind > KindCanceled || v.Kind == KindCanceled {
			t.Fatalf("kind %v from an HTTP response", v.Kind)
		}
		checkHint(t, v.ServerWait, v.HasServerWait)
	})
}

// FuzzPolicyJSON: reading any bytes as a policy either fails with an error
// or gives a valid policy whose JSON form reads back to the same JSON.
func FuzzPolicyJSON(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"base_delay_ms":0,"max_delay_ms":300,"jitter":"equal","per_kind":{"rate_limited":{"max_attempts":6}}}`))
	f.Add([]byte(`{"max_attempts":-1,"multiplier":0.5}`))
	f.Add([]byte(`{"wait_budget_ms":9223372036854775807}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Policy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("cannot marshal an accepted policy: %v", err)
		}
		var q Policy
		if err := json.Unmarshal(out, &q); err != nil {
			t.Fatalf("cannot read back %s: %v", out, err)
		}
		again, _ := json.Marshal(q)
		if string(again) != string(out) {
			t.Fatalf("round trip changed %s into %s", out, again)
		}
	})
}

// FuzzContinuationHandsOnOnlyText continues a cut text answer, in each
// dialect that has continuations, with whatever stream a server might
// send: the caller's stream, read by a fresh tracker, holds text only,
// and ends with io.EOF or an *IncompleteStreamError.
func FuzzContinuationHandsOnOnlyText(f *testing.F) {
	f.Add(false, chatRole+chatChunk(`{"content":" world"}`)+chatChunk(`{"tool_calls":[{"index":0,"function":{"name":"f"}}]}`)+chatFinish("tool_calls")+chatDone)
	f.Add(false, chatRole+chatFinish("stop")+chatUsage+chatDone)
	f.Add(true, anthMessageStart+anthBlockStart(0, "text")+anthDelta(0, " world")+anthBlockStop(0)+anthBlockStart(1, "tool_use")+anthBlockStop(1)+anthMessageDelta("tool_use")+anthMessageStop)
	f.Add(true, anthMessageStart+anthBlockStart(0, "thinking")+anthBlockStop(0)+anthMessageDelta("end_turn")+anthMessageStop)
	f.Add(true, anthMessageStart+anthMessageDelta("end_turn")+anthMessageStop)
	f.Fuzz(func(t *testing.T, anthropic bool, cont string) {
		path, body, cut := "/v1/chat/completions", chatRequest, chatRole+chatChunkOf("c1", `{"content":"Hello"}`)
		if anthropic {
			path, body, cut = "/v1/messages", anthropicRequest, anthMessageStart+anthBlockStart(0, "text")+anthDelta(0, "Hello")
		}
		tr := &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1, Policy: Policy{MaxAttempts: 1}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test"+path, strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ie *IncompleteStreamError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("the stream ended with %v", err)
		}
		var fresh sse.Tracker
		fresh.Write(got)
		if !fresh.TextOnly() || !strings.HasPrefix(string(got), cut) {
			t.Fatalf("the caller read other than text, or lost the cut stream:\n%s", got)
		}
	})
}
