package rebound

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/scrub"
)

// defaultErrorBodyTimeout bounds how long a failed response's body is read
// to judge it, unless a Transport says otherwise.
const defaultErrorBodyTimeout = 5 * time.Second

// errorBody is what was read of a failed response's body to judge it.
type errorBody struct {
	// raw is the start of the body as it was received, at most
	// MaxErrorBody bytes: the caller may still want it, encoded as it was.
	raw []byte
	// whole says raw is all there will ever be: the body ended, broke or
	// took too long (and was closed).
	whole bool
	// text is raw decoded (a request that sets Accept-Encoding itself
	// gets its bodies encoded), at most MaxErrorBody bytes: what the
	// classifier reads.
	text []byte
	// decoded says text is not raw.
	decoded bool
}

// readErrorBody reads the start of a failed response's body, at most
// MaxErrorBody bytes and, with a timeout, for at most that long: a server
// that sends part of an error body and holds the connection open must not
// hold the call. A body that takes too long is closed.
func readErrorBody(resp *http.Response, timeout time.Duration) errorBody {
	if resp.Body == nil || resp.Body == http.NoBody {
		return errorBody{whole: true}
	}
	const (
		reading int32 = iota
		done
		late
	)
	var state atomic.Int32
	if timeout > 0 {
		timer := time.AfterFunc(timeout, func() {
			if state.CompareAndSwap(reading, late) {
				resp.Body.Close() // unblocks the read below
			}
		})
		defer timer.Stop()
	}
	raw, err := readAtMost(resp.Body, MaxErrorBody, resp.ContentLength)
	b := errorBody{raw: raw, text: raw}
	switch {
	case !state.CompareAndSwap(reading, done): // too late: the body is closed
		b.whole = true
	case err != nil || len(raw) < MaxErrorBody:
		b.whole = true // ended or broke: all there is
	}
	if !resp.Uncompressed {
		b.text, b.decoded = decode(resp.Header.Get("Content-Encoding"), raw)
	}
	return b
}

// readAtMost reads r until it ends, fails, or n bytes have come, and
// returns what came; the error is nil at the end of r. The buffer starts at
// size (the body's length, when it is known; a server may lie, so no more
// than 4 KiB) and doubles, so a slow body that sends a few bytes holds a
// few bytes, and a large one costs at most twice its size in garbage.
func readAtMost(r io.Reader, n int, size int64) ([]byte, error) {
	switch {
	case size <= 0:
		size = 512
	case size < 4096:
		size++ // room to see the end
	default:
		size = 4096
	}
	size = min(size, int64(n))
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			if len(b) >= n {
				return b, nil
			}
			b = append(make([]byte, 0, min(2*cap(b), n)), b...)
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// decode undoes a gzip or deflate Content-Encoding, keeping at most
// MaxErrorBody bytes of what it gives (a small body may inflate to
// gigabytes). A body cut short gives what could be decoded of it; one
// that is not what its header says is judged as it came.
func decode(encoding string, raw []byte) ([]byte, bool) {
	r, err := decoder(encoding, bytes.NewReader(raw))
	if r == nil || err != nil {
		return raw, false
	}
	text, _ := readAtMost(r, MaxErrorBody, 0)
	return text, true
}

// decoder returns a reader that undoes a gzip or deflate Content-Encoding
// of r; nil for any other encoding, which is left as it is. Making it reads
// the gzip header from r.
func decoder(encoding string, r io.Reader) (io.Reader, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate":
		return zlib.NewReader(r)
	}
	return nil, nil
}

// httpError makes the *HTTPError of a failed response whose body b was
// read, with the credentials of its request scrubbed from the body and
// from the headers a server echoed them in. The response's own header is
// left as it was.
func httpError(resp *http.Response, b errorBody, secrets scrub.Secrets) *HTTPError {
	h := resp.Header
	if b.decoded {
		h = h.Clone()
		h.Del("Content-Encoding")
		h.Del("Content-Length")
	}
	return &HTTPError{StatusCode: resp.StatusCode, Header: secrets.Header(h), Body: secrets.CutBytes(b.text, MaxErrorBody)}
}
