package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestProxyScrubsEchoedKey: an upstream that echoes the key it was sent,
// in a header, a trailer or its error body, does not hand the operator's
// key to a client that holds only a token.
func TestProxyScrubsEchoedKey(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Debug-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	})
	const key = "operator-upstream-key-998877"
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: key, Tokens: []string{"tok-client-000001"}})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer tok-client-000001")
	if strings.Contains(body, key) || strings.Contains(fmt.Sprint(resp.Header), key) {
		t.Errorf("the client read the operator's key: %v %s", resp.Header, body)
	}

	// A success's trailers, announced or not, are scrubbed as its header
	// is.
	up, _ = recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Trailer", "X-Debug-Auth")
		io.WriteString(w, `{"choices":[]}`)
		w.Header().Set("X-Debug-Auth", r.Header.Get("Authorization"))
		w.Header().Set(http.TrailerPrefix+"X-Late-Auth", r.Header.Get("Authorization"))
	})
	front, _ = serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: key, Tokens: []string{"tok-client-000001"}})
	resp, body = do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer tok-client-000001")
	if len(resp.Trailer) != 2 || strings.Contains(fmt.Sprint(resp.Trailer), key) {
		t.Errorf("trailers %v: want both, without the operator's key", resp.Trailer)
	}
}
