package proxy_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// chatOfSize reads as a chat request of exactly size bytes, its content a
// run of "x", without holding the body: the client's copy would otherwise
// count as the proxy's.
type chatOfSize struct {
	head, tail string
	size, off  int
}

func newChatOfSize(size int) *chatOfSize {
	return &chatOfSize{head: `{"model":"gpt-x","messages":[{"role":"user","content":"`, tail: `"}]}`, size: size}
}

var xs = strings.Repeat("x", 32<<10)

func (c *chatOfSize) Read(p []byte) (int, error) {
	if c.off == c.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && c.off < c.size {
		var k int
		switch middle := c.size - len(c.tail); {
		case c.off < len(c.head):
			k = copy(p[n:], c.head[c.off:])
		case c.off < middle:
			k = copy(p[n:], xs[:min(len(xs), middle-c.off)])
		default:
			k = copy(p[n:], c.tail[c.off-middle:])
		}
		n += k
		c.off += k
	}
	return n, nil
}

// bodyHoldingUpstream reads each request body to its end, then holds the
// request until release is closed: every body is then in flight at once.
type bodyHoldingUpstream struct {
	arrived *sync.WaitGroup
	release chan struct{}
}

func (u bodyHoldingUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, req.Body)
	req.Body.Close()
	u.arrived.Done()
	<-u.release
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(canned)), ContentLength: int64(len(canned)), Request: req}, nil
}

// bodyHeap sends n requests of size bytes each through a proxy at once,
// in memory, and returns what the heap grew by until every body had
// reached the upstream, the collector held off (every byte allocated on
// the way, garbage included: the peak the heap reaches when no collection
// comes in between), and what of it was still live then.
func bodyHeap(tb testing.TB, n, size int) (allocated, live uint64) {
	tb.Helper()
	var arrived sync.WaitGroup
	arrived.Add(n)
	up := bodyHoldingUpstream{arrived: &arrived, release: make(chan struct{})}
	p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: up,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	reqs := make([]*http.Request, n)
	recs := make([]*httptest.ResponseRecorder, n)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("POST", "http://127.0.0.1:8080/v1/chat/completions", newChatOfSize(size))
		reqs[i].ContentLength = int64(size)
		recs[i] = httptest.NewRecorder()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, peak, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var done sync.WaitGroup
	for i := range reqs {
		done.Go(func() { p.ServeHTTP(recs[i], reqs[i]) })
	}
	arrived.Wait()
	runtime.ReadMemStats(&peak)
	runtime.GC()
	runtime.ReadMemStats(&after)
	close(up.release)
	done.Wait()
	for _, rec := range recs {
		if rec.Code != 200 {
			tb.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	return peak.HeapAlloc - before.HeapAlloc, after.HeapAlloc - before.HeapAlloc
}

// TestProxyBodyHeapGrowth: eight concurrent 8 MiB bodies, all in flight
// at once, make the heap grow by less than twice their size with the
// collector held off (the body kept once, and the little its reading
// throws away), and keep about their size live.
func TestProxyBodyHeapGrowth(t *testing.T) {
	const n, size = 8, 8 << 20
	allocated, live := bodyHeap(t, n, size)
	total := float64(n * size)
	t.Logf("heap grew by %.2f× the bodies (%d MiB), %.2f× live", float64(allocated)/total, allocated>>20, float64(live)/total)
	if float64(allocated) > 2*total || float64(live) > 1.25*total {
		t.Errorf("%d bodies of %d MiB: the heap grew by %.2f× their size (want ≤ 2), %.2f× live (want ≤ 1.25)",
			n, size>>20, float64(allocated)/total, float64(live)/total)
	}
}

// BenchmarkProxyBodyHeap: the heap's growth for 8 concurrent 8 MiB
// bodies, as TestProxyBodyHeapGrowth measures it, per byte of body.
func BenchmarkProxyBodyHeap(b *testing.B) {
	const n, size = 8, 8 << 20
	var allocated, live uint64
	for b.Loop() {
		a, l := bodyHeap(b, n, size)
		allocated += a
		live += l
	}
	total := float64(b.N * n * size)
	b.ReportMetric(float64(allocated)/total, "heap/body")
	b.ReportMetric(float64(live)/total, "live/body")
	b.ReportMetric(0, "ns/op")
}
