package proxy

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/frontdoor"
)

// maxErrorBody is the most of an upstream's error body the proxy passes
// on: it reads the whole of it to scrub it, and an error is a few hundred
// bytes.
const maxErrorBody = 1 << 20

// scrubResponse readies an upstream's answer, its hop-by-hop headers gone,
// before its header goes to the client (relay). An answer that
// says its quota is exhausted goes with x-should-retry: false. It strips the
// upstream's CORS headers (frontdoor.StripCORS). And an upstream that
// echoes the key it was sent (in a response header, or in an error's
// body) must not hand the operator's key to a client that holds only a
// token. Header values lose the keys and tokens the proxy knows; an error
// body that is not a stream loses those and anything shaped like a key,
// and is cut at maxErrorBody. A body the transport did not decode (an
// encoding the proxy did not ask for) goes as it came.
func (p *Proxy) scrubResponse(resp *http.Response) error {
	frontdoor.StripCORS(resp.Header)
	if resp.StatusCode >= http.StatusBadRequest && lastVerdictIsQuota(resp.Request) {
		// The official SDKs retry a 429 twice by default; an exhausted
		// quota, which the chain has already taken to every upstream and
		// key it could, would only be spent on again.
		resp.Header.Set("X-Should-Retry", "false")
	}
	if p.secrets.Empty() {
		return nil
	}
	for _, values := range resp.Header {
		for i, v := range values {
			values[i] = p.secrets.Known(v)
		}
	}
	if resp.StatusCode < http.StatusBadRequest || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	if media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); media == "text/event-stream" {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if err != nil {
		return err
	}
	body = p.secrets.Bytes(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// lastVerdictIsQuota reports whether the last failed attempt of the call
// that sent req was judged an exhausted quota: the answer being passed on.
func lastVerdictIsQuota(req *http.Request) bool {
	if req == nil {
		return false
	}
	c, ok := req.Context().Value(callKey{}).(*call)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.kinds) > 0 && c.kinds[len(c.kinds)-1] == quotaKind
}

// quotaKind is how the access log names an exhausted quota.
var quotaKind = rebound.KindQuotaExhausted.String()
