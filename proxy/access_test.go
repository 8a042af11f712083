package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestAccessLogTokens: the access line of a request carries the tokens the
// answer reported, whole or streamed.
func TestAccessLogTokens(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+
				`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`+"\n\n"+"data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
	}))
	defer up.Close()
	var logs bytes.Buffer
	p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	for _, body := range []string{`{"model":"m","messages":[]}`, `{"model":"m","stream":true,"messages":[]}`} {
		resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	front.Close() // waits for the handlers, and so for their access lines
	var got [][2]float64
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "request" {
			in, _ := rec["input_tokens"].(float64)
			out, _ := rec["output_tokens"].(float64)
			got = append(got, [2]float64{in, out})
		}
	}
	if len(got) != 2 || got[0] != [2]float64{12, 5} || got[1] != [2]float64{7, 3} {
		t.Errorf("access lines' tokens %v; want [12 5] and [7 3]\n%s", got, logs.String())
	}
}
