package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// held returns body as a heldBody outside any memory bound.
func held(body string) *heldBody {
	return &heldBody{mem: newBodyMemory(1 << 40), b: []byte(body), start: -1, end: -1}
}

// sent returns what the forwarder sends of h, its model renamed to model.
func sent(t *testing.T, h *heldBody, model string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://upstream.test/", nil)
	h.attach(req, model)
	b, err := io.ReadAll(req.Body)
	if err != nil || int64(len(b)) != req.ContentLength {
		t.Fatalf("body %q, %v; length %d", b, err, req.ContentLength)
	}
	if req.GetBody != nil {
		again, _ := req.GetBody()
		if b2, _ := io.ReadAll(again); !bytes.Equal(b, b2) {
			t.Fatalf("GetBody gave %q, the body %q", b2, b)
		}
	}
	return string(b)
}

// TestModel: the top-level model is read and renamed, and no other byte
// of the body moves; a nested "model" or a body that is not JSON is left.
func TestModel(t *testing.T) {
	for _, c := range []struct{ path, contentType, body, model, renamed string }{
		{"/v1/chat/completions", "application/json", `{"messages":[{"model":"inner"}], "model" : "gpt-x" ,"n":1}`, "gpt-x", `{"messages":[{"model":"inner"}], "model" : "gpt-y" ,"n":1}`},
		{"/v1/messages", "application/json", `{"metadata":{"model":"no"}}`, "", `{"metadata":{"model":"no"}}`},
		{"/v1/chat/completions", "", `{"model":"a\"b"}`, `a"b`, `{"model":"gpt-y"}`},
		{"/v1/chat/completions", "", `{"\u006dodel":"\u00e9\ud83d\ude00"}`, "é😀", `{"\u006dodel":"gpt-y"}`},
		{"/v1/chat/completions", "text/plain", `not json {"model":"x"}`, "", `not json {"model":"x"}`},
		{"/v1/audio/transcriptions", "multipart/form-data; boundary=b", "--b\r\n", "", "--b\r\n"},
		{"/v1/chat/completions", "application/json", ``, "", ``},
		{"/v1/chat/completions", "application/json", `["model"]`, "", `["model"]`},
		{"/v1beta/models/gemini-x:streamGenerateContent", "application/json", `{"contents":[]}`, "gemini-x", `{"contents":[]}`},
		{"/v1beta/models/gemini-x:generateContent", "application/json", `{"model":"models/gemini-x"}`, "gemini-x", `{"model":"models/gpt-y"}`},
	} {
		h := held(c.body)
		if got, err := modelOf(c.path, http.Header{"Content-Type": {c.contentType}}, h); got != c.model || err != nil {
			t.Errorf("modelOf(%q) = %q, %v, want %q", c.body, got, err, c.model)
		}
		if got := sent(t, h, "gpt-y"); got != c.renamed {
			t.Errorf("renamed %q: %q, want %q", c.body, got, c.renamed)
		}
		if got := sent(t, h, ""); got != c.body {
			t.Errorf("sent %q as %q", c.body, got)
		}
	}
	for _, body := range []string{
		`{"model":"a","n":1,"model":"b"}`,
		`{"model":"a","mod\u0065l":"b"}`,
		`{"model":"` + strings.Repeat("m", MaxModel+1) + `"}`,
		`{"model":"` + strings.Repeat(`\u00e9`, MaxModel) + `"}`,
		`{"Model":"a"}`,
		`{"model":null}`,
		`{"model":"a\udc00"}`,
		`{"model":"a"`,
	} {
		if m, err := modelOf("/v1/chat/completions", http.Header{"Content-Type": {"application/json"}}, held(body)); err == nil {
			t.Errorf("modelOf(%.40q) = %q, want an error", body, m)
		}
	}
	for body, want := range map[string]error{`{"model":"gemini-y"}`: errModelTwice, `{"model":"gemini-x"}`: nil, `{"model":"models/gemini-x"}`: nil} {
		if m, err := modelOf("/v1beta/models/gemini-x:generateContent", nil, held(body)); err != want || err == nil && m != "gemini-x" {
			t.Errorf("Gemini, %s: %q, %v; want gemini-x, %v", body, m, err, want)
		}
	}
	gzipped := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}
	if m, err := modelOf("/v1/chat/completions", gzipped, held("\x1f\x8b{\"model\":")); m != "" || err != nil {
		t.Errorf("a compressed body: %q, %v; want no model and no error", m, err)
	}
}

// TestReleasedBodyLetsGo: once released, a body's GetBody fails and the
// readers already made have let go of its bytes once read or closed.
func TestReleasedBodyLetsGo(t *testing.T) {
	h := held(`{"model":"a"}`)
	modelOf("/v1/chat/completions", nil, h)
	req, _ := http.NewRequest("POST", "http://upstream.test/", nil)
	h.attach(req, "b")
	io.ReadAll(req.Body)
	h.release()
	if r := req.Body.(*partsReader); r.p[0] != nil || r.p[1] != nil || r.p[2] != nil {
		t.Errorf("a body read to its end still holds %q", r.p)
	}
	if _, err := req.GetBody(); err == nil {
		t.Errorf("GetBody after release: no error")
	}
	late, _ := http.NewRequest("POST", "http://upstream.test/", nil)
	h.attach(late, "")
	if _, err := io.ReadAll(late.Body); !errors.Is(err, errReleased) {
		t.Errorf("a body attached after release reads %v, want errReleased", err)
	}
	if h.b != nil || h.mem.inUse() != 0 {
		t.Errorf("released: still holds %d bytes, %d reserved", len(h.b), h.mem.inUse())
	}
}

// TestScanStrict: what strict JSON is, and the model keys it finds.
func TestScanStrict(t *testing.T) {
	for _, c := range []struct {
		body     string
		ok       bool
		keys     int
		variant  bool
		modelRaw string
	}{
		{`{"model":"m"}`, true, 1, false, `"m"`},
		{` {"a":[1,-0.5e+3,true,false,null,{}],"model" : [] } `, true, 1, false, `[`},
		{`{"Model":1,"model\u0000x":2,"mode":3}`, true, 2, true, `2`},
		{`{"b":{"model":1}}`, true, 0, false, ``},
		{`"model"`, true, 0, false, ``},
		{`[{"model":1}]`, true, 0, false, ``},
		{`{"\u006D\u006f\u0064\u0065\u006c":"x"}`, true, 1, false, `"x"`},
		{`{"model":"\ud800"}`, true, 1, false, `"\ud800"`},
		{"\"\xef\xbf\xbd\"", true, 0, false, ``},
		{`{"a":1,}`, false, 0, false, ``},
		{`{"a":NaN}`, false, 0, false, ``},
		{`[-Infinity]`, false, 0, false, ``},
		{`[1.]`, false, 0, false, ``},
		{`[.5]`, false, 0, false, ``},
		{`[1e]`, false, 0, false, ``},
		{`[00]`, false, 0, false, ``},
		{`[+1]`, false, 0, false, ``},
		{`["\x"]`, false, 0, false, ``},
		{`["\u12"]`, false, 0, false, ``},
		{"[\"\x7f\"]", true, 0, false, ``},
		{"[\"\x1f\"]", false, 0, false, ``},
		{"[\"\xed\xa0\x80\"]", false, 0, false, ``},
		{"[\"\xff\"]", false, 0, false, ``},
		{"\xef\xbb\xbf{}", false, 0, false, ``},
		{`{} {}`, false, 0, false, ``},
		{`{'a':1}`, false, 0, false, ``},
		{`{"a" 1}`, false, 0, false, ``},
		{`[tru]`, false, 0, false, ``},
		{``, false, 0, false, ``},
		{`   `, false, 0, false, ``},
		{strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), true, 0, false, ``},
		{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), false, 0, false, ``},
	} {
		sb, err := scanStrict([]byte(c.body))
		if (err == nil) != c.ok {
			t.Errorf("%.60q: %v, want ok %v", c.body, err, c.ok)
			continue
		}
		if !c.ok {
			if se := (*syntaxError)(nil); !errors.As(err, &se) {
				t.Errorf("%.60q: %T %v, want a *syntaxError", c.body, err, err)
			}
			continue
		}
		raw := ""
		if sb.start >= 0 {
			raw = c.body[sb.start:sb.end]
		}
		if sb.modelKeys != c.keys || sb.variant != c.variant || raw != c.modelRaw {
			t.Errorf("%.60q: %d keys, variant %v, value %q; want %d, %v, %q", c.body, sb.modelKeys, sb.variant, raw, c.keys, c.variant, c.modelRaw)
		}
	}
}

// FuzzScanStrict: scanStrict takes exactly what encoding/json takes as
// valid and is UTF-8 throughout, and finds the top-level keys a strict
// decode takes for "model" (in any case, or cut at a NUL), the last one's
// value where the decoder has it; renaming that model leaves a document
// that decodes to the new name and to every other value as before.
func FuzzScanStrict(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"a","MODEL":"b"}`, `{"mod\u0065l":1}`, `{"model\u0000":"x"}`,
		`{"model":"cheap","n":NaN,"model":"expensive"}`, "{\"mo\xffdel\":1}",
		`[1,2.5e-3,-0]`, `{"a":{"b":[true,false,null]}}`, `"\ud83d\ude00"`, `{"model":"\ud800x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := scanStrict(b)
		if valid := json.Valid(b) && utf8.Valid(b); (err == nil) != valid {
			t.Fatalf("%q: scanStrict %v, encoding/json valid %v", b, err, valid)
		}
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			if sb.modelKeys != 0 || sb.start >= 0 {
				t.Fatalf("%q: not an object, yet %+v", b, sb)
			}
			return
		}
		keys, variant := 0, false
		var last json.RawMessage
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			key := tok.(string)
			if cut, _, _ := strings.Cut(key, "\x00"); strings.EqualFold(cut, "model") {
				keys++
				variant = variant || key != "model"
				last = v
			}
		}
		if sb.modelKeys != keys || sb.variant != variant {
			t.Fatalf("%q: %d model keys, variant %v; encoding/json: %d, %v", b, sb.modelKeys, sb.variant, keys, variant)
		}
		if keys == 0 {
			return
		}
		if sb.str != (last[0] == '"') || sb.str && string(b[sb.start:sb.end]) != string(last) {
			t.Fatalf("%q: model value %q (string %v), encoding/json's %q", b, b[sb.start:sb.end], sb.str, last)
		}
		if keys > 1 || variant || !sb.str {
			return
		}
		var want string
		json.Unmarshal(last, &want)
		text, _ := unescape(nil, b[sb.start+1:sb.end-1])
		if string(text) != want {
			t.Fatalf("%q: model %q, encoding/json's %q", b, text, want)
		}
		h := &heldBody{mem: newBodyMemory(1 << 40), b: b, start: sb.start, end: sb.end}
		renamed := []byte(sent(t, h, "renamed-\u00e9"))
		var before, after map[string]any
		json.Unmarshal(b, &before)
		if err := json.Unmarshal(renamed, &after); err != nil || after["model"] != "renamed-\u00e9" {
			t.Fatalf("%q renamed to %q: %v, model %v", b, renamed, err, after["model"])
		}
		before["model"] = after["model"]
		if !jsonEqual(before, after) {
			t.Fatalf("%q renamed to %q: other values changed", b, renamed)
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
