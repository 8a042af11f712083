package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestProxyRefusesAmbiguousModel: a route limited to one model is not
// bypassed by a body that parsers read in different ways (a second model
// key in another case or escaped, after a value some parsers refuse, with
// invalid UTF-8, trailing bytes): each gets a 400 in the dialect, and the
// upstream sees nothing. A body that is plainly one model's passes.
func TestProxyRefusesAmbiguousModel(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap","upstream":"a"}]}`, map[string]string{"K": operatorKey})
	front, _ := newReviewProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return operatorKey }})
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
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap","upstream":"a"},{"path_prefix":"/v1/files","upstream":"a"}]}`, map[string]string{"K": operatorKey})
	front, _ := newReviewProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return operatorKey }})
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
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	resp, got := do(t, "POST", front.URL+"/v1beta/models/gemini-cheap:generateContent", `{"model":"models/gemini-expensive","contents":[]}`)
	if resp.StatusCode != 400 || !strings.HasPrefix(got, `{"error":{"code":400,`) || s.hits != 0 {
		t.Errorf("%d %s, %d upstream requests; want a 400 in Gemini's shape and none", resp.StatusCode, got, s.hits)
	}
}
