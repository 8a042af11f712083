package relay

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// ErrorBody is what was read of a failed response's body to judge it.
type ErrorBody struct {
	// Raw is the start of the body as it was received, at most the bound
	// read: the caller may still want it, encoded as it was.
	Raw []byte
	// Whole says Raw is all there will ever be: the body ended, broke or
	// took too long (and was closed).
	Whole bool
	// Text is Raw decoded (a request that sets Accept-Encoding itself
	// gets its bodies encoded), at most the bound: what the classifier
	// reads.
	Text []byte
	// Decoded says Text is not Raw.
	Decoded bool
}

// ReadErrorBody reads the start of a failed response's body, at most max
// bytes and, with a timeout, for at most that long: a server that sends
// part of an error body and holds the connection open must not hold the
// call. A body that takes too long is closed.
func ReadErrorBody(resp *http.Response, max int, timeout time.Duration) ErrorBody {
	if resp.Body == nil || resp.Body == http.NoBody {
		return ErrorBody{Whole: true}
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
	raw, err := readAtMost(resp.Body, max, resp.ContentLength)
	b := ErrorBody{Raw: raw, Text: raw}
	switch {
	case !state.CompareAndSwap(reading, done): // too late: the body is closed
		b.Whole = true
	case err != nil || len(raw) < max:
		b.Whole = true // ended or broke: all there is
	}
	if !resp.Uncompressed {
		b.Text, b.Decoded = decode(resp.Header.Get("Content-Encoding"), raw, max)
	}
	return b
}

// GiveBack puts back the body of resp, a failed response read to judge
// it into b, so that it reads whole: from memory if b holds all of it,
// else b then the rest. cancel ends the attempt's context once the body
// is read or closed (at once when it is in memory, so that it stays
// readable after).
func GiveBack(resp *http.Response, b ErrorBody, cancel func()) {
	if b.Whole {
		resp.Body.Close()
		cancel()
		resp.Body = io.NopCloser(bytes.NewReader(b.Raw))
		return
	}
	resp.Body = EndWith(readCloser{Reader: io.MultiReader(bytes.NewReader(b.Raw), resp.Body), Closer: resp.Body}, cancel)
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

// decode undoes a gzip or deflate Content-Encoding, keeping at most max
// bytes of what it gives (a small body may inflate to gigabytes). A body
// cut short gives what could be decoded of it; one that is not what its
// header says is judged as it came.
func decode(encoding string, raw []byte, max int) ([]byte, bool) {
	r, err := decoder(encoding, bytes.NewReader(raw))
	if r == nil || err != nil {
		return raw, false
	}
	text, _ := readAtMost(r, max, 0)
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
