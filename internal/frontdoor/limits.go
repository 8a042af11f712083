package frontdoor

import (
	"errors"
	"io"
	"log"
	"net/http"
	"time"
)

// The limits every server of rebound's puts on a caller's connection, so
// that a client that sends slowly, or nothing, cannot hold a connection,
// a goroutine and their buffers for ever.
const (
	// HeaderTimeout bounds the reading of a request's header.
	HeaderTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive connection that sends no next
	// request for this long, whatever its last one was answered (a 401
	// included).
	IdleTimeout = 2 * time.Minute
	// BodyStall is how long a request body may send nothing before the
	// server gives up on it (a 408), as it gives up on a header that
	// stalls. The connection's read deadline is moved on at most every
	// bodyStallSlack (each move is a timer's change, and a body comes in
	// many reads), to BodyStall and bodyStallSlack from then: a body that
	// stalls is given up after BodyStall to BodyStall+bodyStallSlack of
	// silence, never sooner.
	BodyStall = 10 * time.Second
	// BodyTimeout bounds the reading of a whole request body, however
	// it trickles in.
	BodyTimeout = 60 * time.Second
)

// bodyStallSlack is how much later than BodyStall a stalled body may be
// given up, so that its deadline need not move at every read.
const bodyStallSlack = BodyStall / 10

// Server returns a server of h with the header and idle limits. A body's
// are its handler's, with a BodyReader: a read timeout of the server's
// would also end the answers that stream for minutes (an MCP call's, a
// model's), and the request's context with them.
func Server(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          errorLog,
	}
}

// A BodyReader reads a request body with the connection's read deadline
// moved on as the body comes (BodyStall), up to an end: a read past
// either fails with an error that is os.ErrDeadlineExceeded. Make one with
// NewBodyReader.
type BodyReader struct {
	r           io.Reader
	rc          *http.ResponseController
	end         time.Time
	left        int64     // of the declared length; -1 when none was
	pushedAt    time.Time // when the deadline was last moved; zero if never
	unsupported bool      // rc cannot set a deadline: no use asking again
}

// NewBodyReader returns a BodyReader of body, whose connection's read
// deadline rc sets (a ResponseWriter that cannot has its body read
// without one), that gives up at end; length is the declared length (the
// request's ContentLength), -1 for none.
func NewBodyReader(body io.Reader, rc *http.ResponseController, end time.Time, length int64) BodyReader {
	return BodyReader{r: body, rc: rc, end: end, left: length}
}

// Read reads the body, moving the deadline on first if it is due.
func (d *BodyReader) Read(b []byte) (int, error) {
	// The read that finds the end of a declared length waits for nothing.
	if d.left != 0 && (d.pushedAt.IsZero() || time.Since(d.pushedAt) >= bodyStallSlack) {
		d.Push()
	}
	n, err := d.r.Read(b)
	if d.left > 0 {
		d.left = max(d.left-int64(n), 0)
	}
	return n, err
}

// Push sets the read deadline BodyStall and bodyStallSlack from now, or
// at the end: the server's own reads of what is left of a body it did
// not read (one too large, say) must not wait for ever either.
func (d *BodyReader) Push() {
	if d.unsupported {
		return
	}
	now := time.Now()
	deadline := now.Add(BodyStall + bodyStallSlack)
	if deadline.After(d.end) {
		deadline = d.end
	}
	if err := d.rc.SetReadDeadline(deadline); errors.Is(err, http.ErrNotSupported) {
		d.unsupported = true
		return
	}
	d.pushedAt = now
}

// Clear takes the deadline away, if it was set, once the body is read:
// the server's own reads after it (the one that watches for the client
// going, while a long answer streams) must not meet it.
func (d *BodyReader) Clear() {
	if !d.pushedAt.IsZero() {
		d.rc.SetReadDeadline(time.Time{})
	}
}

// End returns when the body is given up, however it comes.
func (d *BodyReader) End() time.Time { return d.end }
