package rebound_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound"
)

// okTransport answers every request at once with a small 200, so that a
// benchmark through it measures what wraps it.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), Request: req}, nil
}

func benchRoundTrips(b *testing.B, rt http.RoundTripper, url string) {
	client := &http.Client{Transport: rt}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m","messages":[]}`))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// BenchmarkTransport measures what rebound.Transport adds to a successful
// POST: in memory (the wrapper alone) and over loopback to a local handler.
func BenchmarkTransport(b *testing.B) {
	b.Run("memory/direct", func(b *testing.B) { benchRoundTrips(b, okTransport{}, "http://provider.test/v1") })
	b.Run("memory/rebound", func(b *testing.B) {
		benchRoundTrips(b, &rebound.Transport{Base: okTransport{}}, "http://provider.test/v1")
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	base := srv.Client().Transport
	b.Run("loopback/direct", func(b *testing.B) { benchRoundTrips(b, base, srv.URL) })
	b.Run("loopback/rebound", func(b *testing.B) { benchRoundTrips(b, &rebound.Transport{Base: base}, srv.URL) })
}
