package reboundotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rebound-go/rebound"
)

// secrets are the credentials a request carries, each where a provider SDK
// puts one.
var secrets = map[string]string{
	"Authorization":  "Bearer sk-proj-authorization-0123456789",
	"X-Api-Key":      "sk-ant-x-api-key-0123456789",
	"Api-Key":        "azure-api-key-0123456789",
	"X-Goog-Api-Key": "AIza-goog-api-key-0123456789",
	"key":            "AIza-query-key-0123456789", // the query parameter
}

// echoAll answers with an error whose body repeats the request's headers
// and URL, in the message and in the provider's type and code fields.
func echoAll(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var echo strings.Builder
		fmt.Fprintf(&echo, "%s %s", r.Method, r.URL)
		for k, v := range r.Header {
			fmt.Fprintf(&echo, " %s=%s", k, strings.Join(v, ","))
		}
		body, _ := json.Marshal(map[string]any{"error": map[string]string{
			"message": echo.String(),
			"type":    r.Header.Get("X-Api-Key"),
			"code":    r.URL.Query().Get("key"),
		}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// echoInStream answers 200 with an event stream whose first event is an
// error repeating the request's credentials, as an overloaded provider's
// stream might.
func echoInStream(w http.ResponseWriter, r *http.Request) {
	echo := fmt.Sprintf("overloaded for %s key=%s", r.Header.Get("Authorization"), r.URL.Query().Get("key"))
	data, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "overloaded_error", "message": echo}})
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
}

// leakyBase fails every request with an error that quotes its URL and
// headers, as a careless base transport might.
type leakyBase struct{}

func (leakyBase) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("dial %s (auth %s, goog %s): %w", r.URL, r.Header.Get("Authorization"),
		r.Header.Get("X-Goog-Api-Key"), errors.New("connection refused"))
}

func TestSecretsNeverRecorded(t *testing.T) {
	h := newHarness(t)
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusUnauthorized} {
		srv := httptest.NewServer(echoAll(status))
		send(t, &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}}, srv.URL)
		srv.Close()
	}
	send(t, &rebound.Transport{Base: leakyBase{}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}}, "http://127.0.0.1:9/v1/chat")
	stream := httptest.NewServer(http.HandlerFunc(echoInStream))
	send(t, &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}}, stream.URL)
	stream.Close()

	var texts []string // everything recorded, as text
	redacted := 0
	spans := h.spans.GetSpans()
	if len(spans) < 12 {
		t.Fatalf("only %d spans", len(spans))
	}
	for _, s := range spans {
		texts = append(texts, s.Name, s.Status.Description)
		texts = append(texts, kvText(s.Attributes)...)
		for _, e := range s.Events {
			texts = append(texts, e.Name)
			texts = append(texts, kvText(e.Attributes)...)
		}
		if strings.Contains(s.Status.Description, "[redacted]") {
			redacted++
		}
	}
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	metrics := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			texts = append(texts, m.Name, m.Description, m.Unit)
			for _, p := range points(m) {
				metrics++
				texts = append(texts, kvText(p.attrs.ToSlice())...)
			}
		}
	}
	if metrics == 0 {
		t.Fatal("no metrics")
	}
	for _, text := range texts {
		for name, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("the %s secret was recorded: %q", name, text)
			}
		}
	}
	// The test means something only if the scrubbed messages were there
	// to be looked at.
	if redacted == 0 {
		t.Error("no span status holds a scrubbed message")
	}
}

// send makes one POST through t with every secret, and drains the answer.
func send(t *testing.T, tr *rebound.Transport, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(rebound.WithTarget(context.Background(), "secret-test"), http.MethodPost,
		url+"/v1/chat?key="+secrets["key"], strings.NewReader(`{"prompt":"tell me a secret"}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range secrets {
		if k != "key" {
			req.Header.Set(k, v)
		}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
}

func kvText(kvs []attribute.KeyValue) []string {
	out := make([]string, 0, 2*len(kvs))
	for _, kv := range kvs {
		out = append(out, string(kv.Key), kv.Value.String())
	}
	return out
}
