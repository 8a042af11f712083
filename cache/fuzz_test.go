package cache_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/rebound-go/rebound/cache"
)

// FuzzKeyIsTheSameWhateverTheWhiteSpace holds Key to its promise that
// white space does not matter, and that a document encoding/json refuses
// is never keyed.
func FuzzKeyIsTheSameWhateverTheWhiteSpace(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"b":[1,2,{"c":null,"a":true}],"a":"\u00e9"}`,
		`[]`, `"x"`, `{"a":{"a":{"a":1}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		k, ok := cache.Key(cache.Scope{}, req, doc)
		if !ok {
			return
		}
		if len(bytes.TrimSpace(doc)) > 0 && !json.Valid(doc) {
			t.Fatalf("keyed a document encoding/json refuses: %q", doc)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, doc, "", "\t"); err != nil {
			return
		}
		if k2, ok := cache.Key(cache.Scope{}, req, indented.Bytes()); !ok || k2 != k {
			t.Fatalf("%q and its indented form have keys %q and %q (%v)", doc, k, k2, ok)
		}
	})
}
