package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
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

// modelOf returns the model readModels reads of a POST to path.
func modelOf(path string, header http.Header, h *heldBody) (string, error) {
	m, err := readModels(http.MethodPost, path, header, h)
	return m.model, err
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
		{"/v1/chat/completions", "", `not json {"model":"x"}`, "", `not json {"model":"x"}`},
		{"/v1/audio/transcriptions", "multipart/form-data; boundary=b", "--b\r\n", "", "--b\r\n"},
		{"/v1/chat/completions", "application/json", ``, "", ``},
		{"/v1/chat/completions", "application/json", `["model"]`, "", `["model"]`},
		{"/v1beta/models/gemini-x:streamGenerateContent", "application/json", `{"contents":[]}`, "gemini-x", `{"contents":[]}`},
		{"/v1beta/models/gemini-x:generateContent", "application/json", `{"model":"models/gemini-x"}`, "gemini-x", `{"model":"models/gpt-y"}`},
		{"/v1beta/tunedModels/big-tuned:generateContent", "application/json", `{"contents":[]}`, "big-tuned", `{"contents":[]}`},
		{"/openai/deployments/big/chat/completions", "application/json", `{"model":"small"}`, "big", `{"model":"small"}`},
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
		`{"model\u0000x":"a"}`,
		`{"model":null}`,
		`{"model":"a\udc00"}`,
		`{"model":"a"`,
		`{"model":"a","n":NaN}`,
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

// TestBodyNotUTF8IsRefused: a body sent as JSON, or untyped, that starts
// with a byte-order mark or is not UTF-8 is refused (Python's json reads
// a model where the proxy would read none); a form or a compressed body
// is not judged.
func TestBodyNotUTF8IsRefused(t *testing.T) {
	utf16 := func(s string) string {
		var b []byte
		for _, c := range []byte(s) {
			b = append(b, c, 0)
		}
		return string(b)
	}
	for _, c := range []struct {
		contentType, body string
		want              error
	}{
		{"", "\xef\xbb\xbf{\"model\":\"big\"}", errBOM},
		{"application/json", "\xef\xbb\xbf{\"model\":\"big\"}", errBOM},
		{"", "\xff\xfe" + utf16(`{"model":"big"}`), errBOM},
		{"", utf16(`{"model":"big"}`), errNotUTF8},
		{"application/json", utf16(`{"model":"big"}`), errNotUTF8},
		{"", "caf\xe9", errInvalidUTF8},
		{"text/plain", "caf\xe9", nil},
		{"multipart/form-data; boundary=b", "\xef\xbb\xbf--b", nil},
	} {
		_, err := modelOf("/v1/chat/completions", http.Header{"Content-Type": {c.contentType}}, held(c.body))
		if err != c.want {
			t.Errorf("%q as %q: %v, want %v", c.body, c.contentType, err, c.want)
		}
	}
	gzipped := http.Header{"Content-Encoding": {"gzip"}}
	if _, err := modelOf("/v1/chat/completions", gzipped, held("\xef\xbb\xbf\x00")); err != nil {
		t.Errorf("a compressed body: %v", err)
	}
}

// TestBatchAndUnseenModels: every model a batch's requests name is read,
// and a model call whose model the proxy cannot see says so.
func TestBatchAndUnseenModels(t *testing.T) {
	for _, c := range []struct {
		method, path, body string
		model              string
		batch              []string
		unseen             bool
	}{
		{"POST", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"small","max_tokens":1}},{"custom_id":"b","params":{"model":"big"}}]}`, "", []string{"small", "big"}, false},
		{"POST", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"small"}},{"custom_id":"b","params":{}}]}`, "", []string{"small"}, true},
		{"POST", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"mod\u0065l":"big"}}]}`, "", []string{"big"}, false},
		{"POST", "/v1/batches", `{"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "", nil, true},
		{"POST", "/v1/responses", `{"prompt":{"id":"pmpt_1"},"input":"hi"}`, "", nil, true},
		{"POST", "/v1/responses", `{"model":"small","prompt":{"id":"pmpt_1"}}`, "small", nil, false},
		{"POST", "/v1/files", `{}`, "", nil, false},
		{"GET", "/v1/models", ``, "", nil, false},
		{"DELETE", "/v1/files/file-1", ``, "", nil, false},
		{"POST", "/v1/chat/completions", `{"requests":[{"params":{"model":"big"}}]}`, "", nil, true},
	} {
		m, err := readModels(c.method, c.path, http.Header{"Content-Type": {"application/json"}}, held(c.body))
		if err != nil || m.model != c.model || !slices.Equal(m.batch, c.batch) || m.unseen != c.unseen {
			t.Errorf("%s %s %s: %q %q unseen %v, %v; want %q %q unseen %v", c.method, c.path, c.body, m.model, m.batch, m.unseen, err, c.model, c.batch, c.unseen)
		}
	}
	for _, body := range []string{
		`{"requests":[{"params":{"model":"small","Model":"big"}}]}`,
		`{"requests":[{"params":{"model":"small","model":"big"}}]}`,
		`{"requests":[{"params":{"model":"small"},"Params":{"model":"big"}}]}`,
		`{"requests":[],"Requests":[{"params":{"model":"big"}}]}`,
	} {
		if m, err := readModels("POST", "/v1/messages/batches", nil, held(body)); err == nil {
			t.Errorf("%s: %q %q, want an error", body, m.model, m.batch)
		}
	}
}

// FuzzReadModels: a body readModels takes is one encoding/json takes as
// valid and is UTF-8 throughout, with one top-level "model" and no key a
// parser may take for it; the model read is the one encoding/json
// decodes, and renaming it leaves a document that decodes to the new
// name and to every other value as before.
func FuzzReadModels(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"a","MODEL":"b"}`, `{"mod\u0065l":1}`, `{"model\u0000":"x"}`,
		`{"model":"cheap","n":NaN,"model":"expensive"}`, "{\"mo\xffdel\":1}",
		`[1,2.5e-3,-0]`, `{"a":{"b":[true,false,null]}}`, `"\ud83d\ude00"`, `{"model":"\ud800x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return // no body: nothing to read
		}
		h := &heldBody{mem: newBodyMemory(1 << 40), b: b, start: -1, end: -1}
		model, err := modelOf("/v1/chat/completions", http.Header{"Content-Type": {"application/json"}}, h)
		if err != nil {
			return
		}
		if !json.Valid(b) || !utf8.Valid(b) {
			t.Fatalf("%q: taken, yet encoding/json says valid %v, UTF-8 %v", b, json.Valid(b), utf8.Valid(b))
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			if model != "" || h.start >= 0 {
				t.Fatalf("%q: not an object, yet model %q", b, model)
			}
			return
		}
		keys := 0
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
				if key != "model" {
					t.Fatalf("%q: taken with the key %q", b, key)
				}
				keys++
				last = v
			}
		}
		switch {
		case keys > 1:
			t.Fatalf("%q: taken with %d model keys", b, keys)
		case keys == 0:
			if model != "" {
				t.Fatalf("%q: no model key, yet model %q", b, model)
			}
			return
		}
		var want string
		if err := json.Unmarshal(last, &want); err != nil || model != want || string(b[h.start:h.end]) != string(last) {
			t.Fatalf("%q: model %q at %q; encoding/json's %q at %q (%v)", b, model, b[h.start:h.end], want, last, err)
		}
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
