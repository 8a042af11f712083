package proxy_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestProxyTokenWhereEachSDKPutsItsKey: with client tokens, each SDK puts
// the token where it puts its key (a Gemini SDK in x-goog-api-key, an
// Azure OpenAI SDK in api-key, Authorization: Bearer in any case), and is
// admitted, changing only its base URL.
func TestProxyTokenWhereEachSDKPutsItsKey(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: "sk-operator-key-0123456789", Tokens: []string{"tok-client-000001"}})
	for _, c := range []struct{ path, header string }{
		{"/v1beta/models/gemini-2.0-flash:generateContent", "X-Goog-Api-Key"},
		{"/openai/deployments/d/chat/completions", "Api-Key"},
		{"/v1/chat/completions", "Authorization"}, // "bearer" in lower case, as RFC 6750 allows
	} {
		v := "tok-client-000001"
		if c.header == "Authorization" {
			v = "bearer " + v
		}
		if resp, body := do(t, "POST", front.URL+c.path, `{}`, c.header, v); resp.StatusCode == 401 {
			t.Errorf("token in %s: %d %s", c.header, resp.StatusCode, body)
		}
	}
}
