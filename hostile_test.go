package rebound

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The hostile server: a provider that does everything a provider should
// not, for the adversarial tests of Transport (hostile_load_test.go). Each
// request picks its misbehaviour by its path, "/" + one of HostileModes.
// Every error it sends repeats the request's credentials, in its body and
// in its headers.

// HostileModes are the hostile server's misbehaviours.
var HostileModes = []string{
	"ok",                 // 200, a small JSON body
	"stall",              // no answer at all, until the client goes away
	"drip",               // 503, an error body of 50 bytes at one byte per 100 ms
	"endless-error",      // 503 promising 1000 bytes, sending 9, holding the connection
	"endless-chunked",    // 503, a chunked error body that never ends (1 KiB every 100 ms)
	"huge-error",         // 503, 512 KiB of error body at once
	"lying-length",       // 503 promising 1000 bytes, sending 10, closing
	"reset",              // the connection reset before any answer
	"reset-mid-body",     // 200 promising 1000 bytes, sending 10, then a reset
	"gzip-bomb",          // 400, 64 MiB of gzip in about 64 KiB, unasked for
	"inband-error",       // 200 event stream whose first event is an overloaded error
	"endless-preamble",   // 200 event stream of pings every 100 ms, for ever
	"stall-stream",       // 200 event stream that sends nothing
	"bare-cr",            // 200 event stream with bare CR line endings
	"cut-after-content",  // 200 event stream broken by a reset after its first content
	"retry-after-absurd", // 429 asking to wait 99999999999 seconds
	"retry-after-1s",     // 429 asking to wait a second
	"quota",              // 429 insufficient_quota, gzip-encoded because the client asked
}

// HostileHandler serves the hostile modes.
var HostileHandler http.Handler = http.HandlerFunc(serveHostileRequest)

// hostileEnv, when set, makes the test binary serve the hostile server
// instead of running tests (see TestMain): a load test runs it in a
// process of its own, so that ten thousand connections' file descriptors
// are shared between two processes.
const hostileEnv = "REBOUND_HOSTILE_SERVER"

// HostileEnv is hostileEnv, for the external tests.
const HostileEnv = hostileEnv

// serveHostile serves the hostile server on a loopback port, prints
// "listening on http://HOST:PORT", and stops when its stdin closes.
func serveHostile() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: HostileHandler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Printf("listening on http://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	os.Exit(0)
}

// echo is what a careless server repeats of a request: its credentials
// (fit to go inside a JSON string).
func echo(r *http.Request) string {
	return fmt.Sprintf("auth=%s api-key=%s query=%s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.URL.RawQuery)
}

func serveHostileRequest(w http.ResponseWriter, r *http.Request) {
	// Read the request as a real server would; only then does net/http
	// notice a client that goes away.
	io.Copy(io.Discard, r.Body)
	mode := strings.TrimPrefix(r.URL.Path, "/")
	wait := func(d time.Duration) bool {
		select {
		case <-r.Context().Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	flush := func() { http.NewResponseController(w).Flush() }
	w.Header().Set("X-Echo", echo(r))
	w.Header().Set("X-Api-Key", r.Header.Get("X-Api-Key"))
	errorBody := fmt.Sprintf(`{"error":{"message":"no: %s","type":"server_error"}}`, echo(r))
	switch mode {
	case "ok":
		io.WriteString(w, `{"ok":true}`)
	case "stall":
		<-r.Context().Done()
	case "drip":
		w.Header().Set("Content-Length", "50")
		w.WriteHeader(http.StatusServiceUnavailable)
		body := (errorBody + strings.Repeat(" ", 50))[:50]
		for i := range body {
			if !wait(100 * time.Millisecond) {
				return
			}
			io.WriteString(w, body[i:i+1])
			flush()
		}
	case "endless-error":
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":`)
		flush()
		<-r.Context().Done()
	case "endless-chunked":
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, errorBody)
		for wait(100 * time.Millisecond) {
			if _, err := io.WriteString(w, strings.Repeat(" ", 1024)); err != nil {
				return
			}
			flush()
		}
	case "huge-error":
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, errorBody)
		chunk := strings.Repeat("x", 64<<10)
		for range 8 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	case "lying-length":
		raw(w, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 1000\r\n\r\n"+errorBody[:10], false)
	case "reset":
		raw(w, "", true)
	case "reset-mid-body":
		raw(w, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789", true)
	case "gzip-bomb":
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusBadRequest)
		zw := gzip.NewWriter(w)
		io.WriteString(zw, errorBody)
		zw.Close()
		w.Write(gzipBomb()) // a second gzip member: the zeros, compressed once for all requests
	case "inband-error":
		sseHeader(w)
		fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded %s\"}}\n\n", echo(r))
	case "endless-preamble":
		sseHeader(w)
		for wait(100 * time.Millisecond) {
			if _, err := io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n"); err != nil {
				return
			}
			flush()
		}
	case "stall-stream":
		sseHeader(w)
		flush()
		<-r.Context().Done()
	case "bare-cr":
		sseHeader(w)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\rdata: [DONE]\r\r")
	case "cut-after-content":
		raw(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+
			"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", true)
	case "retry-after-absurd":
		w.Header().Set("Retry-After", "99999999999")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, errorBody)
	case "retry-after-1s":
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, errorBody)
	case "quota":
		body := fmt.Sprintf(`{"error":{"message":"quota %s","type":"insufficient_quota","code":"insufficient_quota"}}`, echo(r))
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusTooManyRequests)
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, body)
	default:
		http.Error(w, "unknown mode "+strconv.Quote(mode), http.StatusNotFound)
	}
}

// gzipBomb is 64 MiB of zeros in about 64 KiB: one gzip member of 1 MiB
// of zeros, 64 times over (a gzip stream may hold many members), so that
// it is cheap to make even under the race detector.
var gzipBomb = sync.OnceValue(func() []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	return bytes.Repeat(member.Bytes(), 64)
})

func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

// raw writes s on the bare connection and closes it: with a reset if
// reset is set, else cleanly.
func raw(w http.ResponseWriter, s string, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	bw := bufio.NewWriter(conn)
	bw.WriteString(s)
	bw.Flush()
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
}
