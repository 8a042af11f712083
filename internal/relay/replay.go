package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DefaultReplay is how much of a request body without GetBody is buffered
// to send it again, unless a Transport says otherwise; a continuation
// reads no more of the body it continues.
const DefaultReplay = 1 << 20

// Replay says how a request's body is sent again.
type Replay struct {
	// Get returns a fresh copy of the body; nil when there is none.
	Get func() (io.ReadCloser, error)
	// Once says the body can be sent only once.
	Once bool
	// closed says the request's own body was already closed (after it
	// was buffered).
	closed bool
}

// Replayable prepares req's body to be sent again: GetBody if the request
// has one, else a buffer of up to limit bytes (none when limit is
// negative). A larger body is sent once.
func Replayable(req *http.Request, limit int64) (Replay, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return Replay{}, nil
	case req.GetBody != nil:
		return Replay{Get: req.GetBody}, nil
	case limit < 0:
		return Replay{Once: true}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		req.Body.Close()
		return Replay{}, fmt.Errorf("rebound: reading the request body to replay it: %w", err)
	}
	if int64(len(buf)) > limit {
		// Too large to keep: send what was read and the rest, once.
		rest := req.Body
		first := io.NopCloser(io.MultiReader(bytes.NewReader(buf), rest))
		return Replay{Once: true, Get: func() (io.ReadCloser, error) {
			return readCloser{Reader: first, Closer: rest}, nil
		}}, nil
	}
	req.Body.Close()
	return Replay{closed: true, Get: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }}, nil
}

// Bytes returns a copy of the whole body (nil for none), when it can be
// sent again and is at most limit bytes; false for a body sent once,
// longer than limit, or that Get fails to give. (A copy, read through Get,
// so that a Replay costs nothing more to those that never ask.)
func (b Replay) Bytes(limit int64) ([]byte, bool) {
	switch {
	case b.Once:
		return nil, false
	case b.Get == nil:
		return nil, true
	case limit < 0:
		return nil, false
	}
	r, err := b.Get()
	if err != nil {
		return nil, false
	}
	defer r.Close()
	buf, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil || int64(len(buf)) > limit {
		return nil, false
	}
	return buf, true
}

// Close closes req's body if nothing has: for a request given up before
// its first attempt was sent.
func (b Replay) Close(req *http.Request) {
	if req.Body != nil && !b.closed {
		req.Body.Close()
	}
}

// Request returns the request of one attempt of req under ctx: req itself
// when it can go as it is, else a copy with a fresh body (for a request
// sent again) and a context of its own (ctx, under a per-attempt timeout if
// there is one); cancel ends that context. A protocol upgrade gets no
// per-attempt timeout: the connection it returns outlives any body. The
// error is GetBody's.
func (b Replay) Request(ctx context.Context, req *http.Request, again bool, timeout time.Duration) (areq *http.Request, cancel context.CancelFunc, err error) {
	if req.Header.Get("Upgrade") != "" {
		timeout = 0
	}
	fresh := b.Get != nil && (again || req.GetBody == nil)
	if !fresh && timeout <= 0 && ctx == req.Context() {
		return req, nothing, nil
	}
	var body io.ReadCloser
	if fresh {
		if body, err = b.Get(); err != nil {
			return nil, nil, fmt.Errorf("rebound: getting the request body again: %w", err)
		}
	}
	cancel = nothing
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	areq = req.Clone(ctx)
	if fresh {
		areq.Body = body
		if b.Once {
			areq.GetBody = nil
		} else if req.GetBody == nil {
			areq.GetBody = b.Get
		}
	}
	return areq, cancel, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// EndWith returns body, calling end once it is fully read or closed: a
// per-attempt timeout covers reading the body without cutting it off once
// RoundTrip has returned.
func EndWith(body io.ReadCloser, end func()) io.ReadCloser {
	return &endingBody{ReadCloser: body, end: end}
}

type endingBody struct {
	io.ReadCloser
	end func()
}

func (b *endingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.end()
	}
	return n, err
}

func (b *endingBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}
