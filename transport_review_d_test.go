package rebound

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// Found in review, and fixed: Goroutines after continued streams over a real connection.
func TestTransportContinuationsLeakNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		k := n.Add(1)
		switch k % 3 {
		case 1: // cut: abort after content
			io.WriteString(w, anthropicStart+reviewAnth("Hello"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case 2: // continuation, whole
			io.WriteString(w, anthropicStart+reviewAnth(" world")+reviewAnthStop)
		case 0: // unused
		}
	}))
	defer srv.Close()
	tr := &Transport{Continuations: 1, Base: &http.Transport{}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i := range 20 {
		n.Store(0)
		resp, err := c.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(reviewAnthBody))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || !strings.Contains(string(b), "world") {
			t.Fatalf("%d: %v %q", i, err, b)
		}
		if i%2 == 0 {
			resp.Body.Close() // careless callers don't
		}
	}
	tr.CloseIdleConnections() // goleak waits for what is closing
}
