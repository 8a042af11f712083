package proxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

// TestProxyRefusesAmbiguousModel: a route limited to one model is not
// bypassed by a body that parsers read in different ways (a second model
// key in another case or escaped, after a value some parsers refuse, with
// invalid UTF-8, trailing bytes): each gets a 400 in the dialect, and the
// upstream sees nothing. A body that is plainly one model's passes.
func TestProxyRefusesAmbiguousModel(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap","upstream":"a"}]}`, map[string]string{"K": operatorKey})
	front, _ := serveProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return operatorKey }})
	for _, body := range []string{
		`{"model":"cheap","n":NaN,"model":"expensive"}`,
		`{"model":"cheap","Model":"expensive"}`,
		`{"model":"cheap","MODEL":"expensive"}`,
		`{"Model":"cheap"}`,
		`{"model":"cheap","\u006dodel":"expensive"}`,
		`{"model":"cheap","\u004dodel":"expensive"}`,
		`{"model":"cheap","model\u0000":"expensive"}`,
		"{\"model\":\"cheap\",\"mo\xffdel\":\"expensive\"}",
		"{\"model\":\"cheap\",\"x\":\"\xc0\xaf\"}",
		`{"model":"cheap","n":Infinity}`,
		`{"model":"cheap"}{"model":"expensive"}`,
		`{"model":"cheap"} x`,
		`{"model":"cheap",}`,
		`{"model":"ch\ud800eap"}`,
		`{"model":["cheap"]}`,
		`{"model":"cheap", "n": 01}`,
		"{\"model\":\"cheap\",\"x\":\"a\tb\"}",
		`{"model": nope`,
		`not json`,
	} {
		resp, got := do(t, "POST", front.URL+"/v1/chat/completions", body, "Content-Type", "application/json")
		if resp.StatusCode != 400 || !strings.HasPrefix(got, `{"error":{"message":`) {
			t.Errorf("%q: %d %s, want a 400 in OpenAI's shape", body, resp.StatusCode, got)
		}
	}
	if s.hits != 0 {
		t.Fatalf("the upstream saw %d ambiguous bodies", s.hits)
	}
	for _, body := range []string{`{"model":"cheap","messages":[{"model":"other","Model":1}]}`, ` {"model" : "ch\u0065ap"} `, `{"model":"cheap","text":"\ud83d\ude00 \u00e9"}`} {
		if resp, got := do(t, "POST", front.URL+"/v1/chat/completions", body, "Content-Type", "application/json"); resp.StatusCode != 200 {
			t.Errorf("%q: %d %s, want 200", body, resp.StatusCode, got)
		}
	}
}

// TestProxyNonJSONBodyHasNoModel: a body that is not JSON (a file
// upload) goes as it came, but only to a route that names no model: its
// model could not be read.
func TestProxyNonJSONBodyHasNoModel(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap","upstream":"a"},{"path_prefix":"/v1/files","upstream":"a"}]}`, map[string]string{"K": operatorKey})
	front, _ := serveProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return operatorKey }})
	const form = "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ncheap\r\n--b--\r\n"
	if resp, got := do(t, "POST", front.URL+"/v1/audio/transcriptions", form, "Content-Type", "multipart/form-data; boundary=b"); resp.StatusCode != 404 {
		t.Errorf("a form to a model's route: %d %s, want 404", resp.StatusCode, got)
	}
	if resp, got := do(t, "POST", front.URL+"/v1/files", form, "Content-Type", "multipart/form-data; boundary=b"); resp.StatusCode != 200 || s.body != form {
		t.Errorf("a form to a route without a model: %d %s, the upstream got %q", resp.StatusCode, got, s.body)
	}
}

// TestProxyGeminiModelInPathAndBody: a Gemini request names its model in
// the path; a body that names one too is refused, whichever an upstream
// would take.
func TestProxyGeminiModelInPathAndBody(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL})
	resp, got := do(t, "POST", front.URL+"/v1beta/models/gemini-cheap:generateContent", `{"model":"models/gemini-expensive","contents":[]}`)
	if resp.StatusCode != 400 || !strings.HasPrefix(got, `{"error":{"code":400,`) || s.hits != 0 {
		t.Errorf("%d %s, %d upstream requests; want a 400 in Gemini's shape and none", resp.StatusCode, got, s.hits)
	}
}

// TestProxyRefusesDuplicateModelKey: a body with two top-level "model"
// keys would be routed by the first while the upstream (Go, Python and JS
// parsers: the last wins) serves the second, past a config whose routes
// list only some models (an unknown one is a 404), and a fallback's
// renaming would leave the second in place: it is not sent so.
func TestProxyRefusesDuplicateModelKey(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap-model","upstream":"a"}]}`, map[string]string{"K": "sk-operator-key-0123456789"})
	front, _ := serveProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return "sk-operator-key-0123456789" }})

	if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"expensive-model"}`); resp.StatusCode != 404 {
		t.Fatalf("an unlisted model: %d, want 404 (the allow-list the operator relies on)", resp.StatusCode)
	}
	resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"cheap-model","model":"expensive-model"}`)
	var got struct{ Model string }
	json.Unmarshal([]byte(s.body), &got)
	if resp.StatusCode == 200 && got.Model == "expensive-model" {
		t.Errorf("routed as cheap-model, but the upstream (last key wins) served %q with the operator's key", got.Model)
	}
}

// TestProxyBoundsHugeModelName: the model name is the client's, up to the
// body cap (32 MiB), and would become a breaker's key (1024 kept), a
// metric's label and a field of every access line: a 1 MiB name is
// refused, and neither key nor log line holds it.
func TestProxyBoundsHugeModelName(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	var keyLen atomic.Int64
	front, logs := serveProxy(t, proxy.Options{Upstream: up.URL, Breaker: func(key string) rebound.Breaker {
		keyLen.Store(int64(len(key)))
		return breaker.New(key, proxy.RecommendedBreaker())
	}})
	model := strings.Repeat("m", 1<<20)
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"`+model+`"}`)
	front.Close()
	if keyLen.Load() > 1024 || logs.Len() > 64<<10 {
		t.Errorf("a 1 MiB model name: breaker key of %d bytes kept, access log of %d bytes", keyLen.Load(), logs.Len())
	}
}
