package rebound

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A corpusCase is one real error response of a provider, quoted verbatim
// from the public source it names, and the verdict it deserves.
type corpusCase struct {
	Provider     string            `json:"provider"`
	Name         string            `json:"name"`
	Source       string            `json:"source"`
	StatusSource string            `json:"status_source"`
	Status       int               `json:"status"` // 0: an error event in a stream
	Headers      map[string]string `json:"headers"`
	Body         string            `json:"body"`
	Kind         Kind              `json:"kind"`
	WaitMS       *int64            `json:"wait_ms"`
	Note         string            `json:"note"`
}

// loadCorpus reads testdata/corpus: one file of cases per provider.
func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	var all []corpusCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []corpusCase
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cases); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, cases...)
	}
	return all
}

// TestCorpus judges every response of the corpus: the kind it deserves,
// and the wait it asks for, to the millisecond, or none.
func TestCorpus(t *testing.T) {
	// A response's HTTP-date wait is measured from its Date header, if
	// any; the corpus has no date waits without one.
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	for _, c := range loadCorpus(t) {
		h := http.Header{}
		for k, v := range c.Headers {
			h.Set(k, v)
		}
		var v Verdict
		if c.Status == 0 {
			v = classify(&StreamError{Data: []byte(c.Body)}, now, nil)
		} else {
			v = classifyResponse(c.Status, h, []byte(c.Body), now, nil)
		}
		if v.Kind != c.Kind {
			t.Errorf("%s: %s: %v, want %v\n\tsource: %s", c.Provider, c.Name, v.Kind, c.Kind, c.Source)
		}
		switch {
		case c.WaitMS == nil && v.HasServerWait && c.Kind.retryable():
			t.Errorf("%s: %s: a wait of %v, want none", c.Provider, c.Name, v.ServerWait)
		case c.WaitMS != nil && (!v.HasServerWait || v.ServerWait.Round(time.Millisecond) != time.Duration(*c.WaitMS)*time.Millisecond):
			t.Errorf("%s: %s: wait %v (%v), want %d ms", c.Provider, c.Name, v.ServerWait, v.HasServerWait, *c.WaitMS)
		}
	}
}

// TestCorpusIsSourced holds the corpus to what it claims: at least 80
// cases from at least 12 providers, each quoting a public source, each
// distinct.
func TestCorpusIsSourced(t *testing.T) {
	cases := loadCorpus(t)
	providers := map[string]int{}
	seen := map[string]string{}
	for _, c := range cases {
		providers[c.Provider]++
		if c.Provider == "" || c.Name == "" || c.Body == "" {
			t.Errorf("%q: a case needs a provider, a name and a body", c.Name)
		}
		if !strings.HasPrefix(c.Source, "https://") || (c.StatusSource != "" && !strings.HasPrefix(c.StatusSource, "https://")) {
			t.Errorf("%s: %s: source %q is not a public address", c.Provider, c.Name, c.Source)
		}
		if c.Status != 0 && (c.Status < 400 || c.Status > 599) {
			t.Errorf("%s: %s: status %d is not a failure", c.Provider, c.Name, c.Status)
		}
		if c.Kind == KindCanceled {
			t.Errorf("%s: %s: a response cannot be canceled", c.Provider, c.Name)
		}
		key := c.Provider + "\x00" + c.Body
		if prev, dup := seen[key]; dup {
			t.Errorf("%s: %q repeats the body of %q", c.Provider, c.Name, prev)
		}
		seen[key] = c.Name
	}
	if len(cases) < 80 || len(providers) < 12 {
		t.Errorf("%d cases from %d providers, want at least 80 from 12: %v", len(cases), len(providers), providers)
	}
	t.Logf("%d cases from %d providers: %v", len(cases), len(providers), providers)
}
