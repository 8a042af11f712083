package chaos_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// inMemory serves requests with a handler in memory, so that waits inside
// a synctest bubble run in virtual time.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// TestPersonalitiesClassified holds each personality to the verdict
// rebound's default classifier gives its every kind of failure, and to the
// wait it reads: the chaos server and the classifier are written apart,
// from the providers' documented errors.
func TestPersonalitiesClassified(t *testing.T) {
	kinds := map[string]rebound.Kind{
		chaos.ModeDown: rebound.KindTransient, chaos.ModeRetryAfter: rebound.KindRateLimited,
		chaos.ModeOverload: rebound.KindOverloaded, chaos.ModeQuota: rebound.KindQuotaExhausted,
		chaos.ModeContext: rebound.KindContextOverflow, chaos.ModeBadRequest: rebound.KindPermanent,
	}
	for _, profile := range []string{chaos.ProfileOpenAI, chaos.ProfileAnthropic, chaos.ProfileGemini,
		chaos.ProfileAzure, chaos.ProfileBedrock, chaos.ProfileLocal} {
		srv, err := chaos.New(chaos.Config{Profile: profile})
		if err != nil {
			t.Fatal(err)
		}
		for mode, kind := range kinds {
			req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			req.Header.Set(chaos.HeaderMode, mode)
			req.Header.Set(chaos.HeaderRetryAfter, "7")
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			v := rebound.Classify(rebound.NewHTTPError(rec.Result()))
			if v.Kind != kind {
				t.Errorf("%s %s: %v, want %v: %s", profile, mode, v.Kind, kind, rec.Body)
			}
			// Bedrock and local servers send no wait hints; the others
			// send theirs with every failure the request asked it of.
			hinted := profile != chaos.ProfileBedrock && profile != chaos.ProfileLocal
			if hinted && (!v.HasServerWait || v.ServerWait != 7*time.Second) || !hinted && v.HasServerWait {
				t.Errorf("%s %s: wait %v (%v)", profile, mode, v.ServerWait, v.HasServerWait)
			}
		}
	}
}

// plainRetry is the loop agents paste: three attempts, retrying any 429
// and any 5xx after 1 s and then 2 s, blind to what the response says.
type plainRetry struct{ base http.RoundTripper }

func (p plainRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := p.base.RoundTrip(req)
		if err != nil || attempt == 3 || resp.StatusCode != 429 && resp.StatusCode < 500 {
			return resp, err
		}
		resp.Body.Close()
		time.Sleep(time.Duration(attempt) * time.Second)
	}
}

// failFirst puts the first n requests (every one if n is 0) in a mode, with
// a wait hint of hint seconds if hint ≥ 0; the rest succeed.
type failFirst struct {
	srv     *chaos.Server
	mode    string
	n, hint int
	mu      sync.Mutex // guards seen
	seen    int
}

func (f *failFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen++
	failing := f.n == 0 || f.seen <= f.n
	f.mu.Unlock()
	r.Header.Set(chaos.HeaderMode, chaos.ModeOK)
	if failing {
		r.Header.Set(chaos.HeaderMode, f.mode)
		if f.hint >= 0 {
			r.Header.Set(chaos.HeaderRetryAfter, strconv.Itoa(f.hint))
		}
	}
	f.srv.ServeHTTP(w, r)
}

// TestPersonalityTable measures rebound.Transport (the zero Policy)
// against the plain retry loop for each personality and each kind of
// failure, in virtual time, and checks the table in docs/providers.md.
func TestPersonalityTable(t *testing.T) {
	personalities := []struct {
		name, profile string
		hints         bool // whether it sends wait hints
	}{
		{"Azure OpenAI", chaos.ProfileAzure, true}, {"Bedrock", chaos.ProfileBedrock, false}, {"local server", chaos.ProfileLocal, false},
	}
	scenarios := []struct {
		what, kind, mode string
		fails, hint      int
	}{
		{"503, once", "transient", chaos.ModeDown, 1, -1},
		{"429, wait hint 2s, once", "rate_limited", chaos.ModeRetryAfter, 1, 2},
		{"429, wait hint 1h, always", "rate_limited", chaos.ModeRetryAfter, 0, 3600},
		{"overloaded, always", "overloaded", chaos.ModeOverload, 0, -1},
		{"quota or budget, always", "quota_exhausted", chaos.ModeQuota, 0, -1},
		{"context too long, always", "context_overflow", chaos.ModeContext, 0, -1},
		{"400, always", "permanent", chaos.ModeBadRequest, 0, -1},
	}
	var table strings.Builder
	table.WriteString("| provider | failure | rebound kind | with rebound | plain retry of 429 and 5xx |\n|---|---|---|---|---|\n")
	for _, p := range personalities {
		for _, s := range scenarios {
			var cells [2]string
			for i, withRebound := range []bool{true, false} {
				synctest.Test(t, func(t *testing.T) {
					srv, err := chaos.New(chaos.Config{Profile: p.profile})
					if err != nil {
						t.Fatal(err)
					}
					var rt http.RoundTripper = inMemory{&failFirst{srv: srv, mode: s.mode, n: s.fails, hint: s.hint}}
					if withRebound {
						rt = &rebound.Transport{Base: rt, Policy: rebound.Policy{Rand: rand.New(rand.NewPCG(1, 2))}}
					} else {
						rt = plainRetry{rt}
					}
					start := time.Now()
					resp, err := (&http.Client{Transport: rt}).Post("http://provider.test/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
					waited := time.Since(start)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					cells[i] = outcome(srv.Stats().Requests, resp.StatusCode, waited, s.hint)
				})
			}
			what := s.what
			if !p.hints {
				what = strings.Replace(strings.Replace(what, "wait hint 2s, ", "", 1), "wait hint 1h, ", "", 1)
			}
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s |\n", p.name, what, s.kind, cells[0], cells[1])
		}
	}
	guide, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), table.String()) {
		t.Errorf("docs/providers.md does not hold the table these tests measured; put this in it:\n%s", table.String())
	}
}

// outcome shows what a call did: its requests, its end, and the time it
// waited when that is the server's hint or the plain loop's fixed 1 s + 2 s
// (a jittered backoff's length is left out).
func outcome(requests, status int, waited time.Duration, hint int) string {
	s := fmt.Sprintf("%d request", requests)
	if requests != 1 {
		s += "s"
	}
	if status == http.StatusOK {
		s += ", ok"
	} else {
		s += ", " + strconv.Itoa(status)
	}
	if waited > 0 && (waited == time.Duration(hint)*time.Second || waited == time.Second || waited == 3*time.Second) {
		s += ", waited " + waited.String()
	}
	return s
}
