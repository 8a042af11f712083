package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/frontdoor"
)

// DefaultMaxBodyMemory is the bound on the memory of all request bodies
// in flight together of a zero Options.MaxBodyMemory.
const DefaultMaxBodyMemory = 1 << 30

// BodyMemoryWait is how long a request whose body finds the proxy's body
// memory spent waits for some to come back, before it gets a 503.
const BodyMemoryWait = 2 * time.Second

// firstChunk is the most memory a body gets before any of it has come.
const firstChunk = 16 << 10

var errBodyMemory = errors.New("the memory for request bodies is spent")

// bodyMemory bounds the memory of the request bodies in flight together.
// A body reserves memory before it allocates it, as its bytes arrive, and
// gives it back when the forwarder is done with it.
//
// A body that must wait holds what it has read, so bodies that all wait
// for more while holding the rest would wait for one another until their
// time ran out, and none would go on. So memory goes to those waiting
// oldest first (no newer body takes any while an older one waits), and
// when all the memory reserved is held by bodies waiting for more, the
// newest of them that holds some gives up at once (a 503), for the older
// ones to go on.
type bodyMemory struct {
	limit int64

	mu          sync.Mutex
	used        int64
	bodies      uint64       // bodies started, for their age
	waiting     []*memWaiter // oldest first
	heldWaiting int64        // what the waiting bodies hold
}

// memWaiter is a body waiting for memory.
type memWaiter struct {
	age  uint64
	need int64
	held int64
	done chan error // nil: granted; errBodyMemory: give up
}

func newBodyMemory(limit int64) *bodyMemory { return &bodyMemory{limit: limit} }

// start returns the age of a body that starts.
func (m *bodyMemory) start() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bodies++
	return m.bodies
}

// reserve takes n bytes for the body of that age, which holds held bytes
// already; it waits for them until deadline at most, and returns
// errBodyMemory when they did not come in time or the body had to give
// up, or ctx's error.
func (m *bodyMemory) reserve(ctx context.Context, age uint64, held, n int64, deadline time.Time) error {
	m.mu.Lock()
	if len(m.waiting) == 0 && m.used+n <= m.limit {
		m.used += n
		m.mu.Unlock()
		return nil
	}
	w := &memWaiter{age: age, need: n, held: held, done: make(chan error, 1)}
	i := len(m.waiting)
	for i > 0 && m.waiting[i-1].age > age {
		i--
	}
	m.waiting = slices.Insert(m.waiting, i, w)
	m.heldWaiting += held
	m.settle()
	m.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var err error
	select {
	case err = <-w.done:
		return err
	case <-timer.C:
		err = errBodyMemory
	case <-ctx.Done():
		err = ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.Index(m.waiting, w); i >= 0 {
		m.waiting = slices.Delete(m.waiting, i, i+1)
		m.heldWaiting -= w.held
		m.settle() // those behind it may go on now
		return err
	}
	return <-w.done // settled meanwhile
}

// settle grants memory to those waiting, oldest first, and when all the
// memory reserved is held by bodies waiting for more, has the newest of
// them that holds some give up.
func (m *bodyMemory) settle() {
	for len(m.waiting) > 0 {
		w := m.waiting[0]
		if m.used+w.need <= m.limit {
			m.used += w.need
			m.waiting = m.waiting[1:]
			m.heldWaiting -= w.held
			w.done <- nil
			continue
		}
		if m.used > m.heldWaiting {
			return // bodies not waiting will give memory back
		}
		i := len(m.waiting) - 1
		for i > 0 && m.waiting[i].held == 0 {
			i--
		}
		if i == 0 {
			return
		}
		y := m.waiting[i]
		m.waiting = slices.Delete(m.waiting, i, i+1)
		m.heldWaiting -= y.held
		y.done <- errBodyMemory // its memory comes back when it has given up
		return
	}
}

// release gives n bytes back.
func (m *bodyMemory) release(n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	m.used -= n
	m.settle()
	m.mu.Unlock()
}

// inUse returns the memory reserved.
func (m *bodyMemory) inUse() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// heldBody is a request body read whole, with the memory it holds
// reserved until release. The forwarder sends it, maybe several times
// and with its model renamed, without copying it; once released, nothing
// the proxy keeps (a request sent, a response's Request) holds its bytes.
type heldBody struct {
	mem        *bodyMemory
	mu         sync.Mutex
	b          []byte // nil once released
	reserved   int64
	released   bool
	start, end int    // the span of the JSON "model" value, or -1
	prefix     string // of a Gemini body's model: "models/"

	reader frontdoor.BodyReader // what readBody reads it with: one allocation less
}

// release drops the body's bytes and gives their memory back; the body is
// not sent again. It may be called more than once.
func (h *heldBody) release() {
	h.mu.Lock()
	n := h.reserved
	h.b, h.reserved, h.released = nil, 0, true
	h.mu.Unlock()
	h.mem.release(n)
}

var errReleased = errors.New("proxy: the request body was already released")

// parts returns the body as the pieces that send it with its model
// renamed to model ("" or no model in the body: unrenamed), and their
// length; ok is false once the body is released.
func (h *heldBody) parts(model string) (p [3][]byte, n int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return p, 0, false
	}
	if model == "" || h.start < 0 {
		p[0] = h.b
	} else {
		p[0], p[1], p[2] = h.b[:h.start], strconv.AppendQuote(nil, h.prefix+model), h.b[h.end:]
	}
	return p, int64(len(p[0]) + len(p[1]) + len(p[2])), true
}

// attach makes the body req's, its model renamed to model unless that is
// empty: Body and GetBody read the held bytes in place.
func (h *heldBody) attach(req *http.Request, model string) {
	p, n, ok := h.parts(model)
	if !ok {
		// Sent after the forwarder was done with it: fail the attempt
		// rather than send an empty body.
		req.Body, req.GetBody, req.ContentLength = io.NopCloser(failingReader{}), nil, -1
		return
	}
	if n == 0 {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		return
	}
	req.ContentLength = n
	req.Body = &partsReader{p: p}
	req.GetBody = func() (io.ReadCloser, error) {
		p, _, ok := h.parts(model)
		if !ok {
			return nil, errReleased
		}
		return &partsReader{p: p}, nil
	}
}

// failingReader fails every read with errReleased.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errReleased }

// partsReader reads its pieces in turn, and lets go of them once read to
// the end.
type partsReader struct{ p [3][]byte }

func (r *partsReader) Read(b []byte) (int, error) {
	n := 0
	for i := range r.p {
		for len(r.p[i]) > 0 && n < len(b) {
			c := copy(b[n:], r.p[i])
			r.p[i] = r.p[i][c:]
			n += c
		}
	}
	if len(r.p[0])+len(r.p[1])+len(r.p[2]) == 0 {
		r.p = [3][]byte{}
		return n, io.EOF
	}
	return n, nil
}

// WriteTo writes the pieces out without a buffer between.
func (r *partsReader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for i := range r.p {
		for len(r.p[i]) > 0 {
			c, err := w.Write(r.p[i])
			r.p[i] = r.p[i][c:]
			n += int64(c)
			if err != nil {
				return n, err
			}
		}
	}
	r.p = [3][]byte{}
	return n, nil
}

// Close does nothing: a transport may close a body while another of its
// goroutines reads it, and the pieces go at the end of the reading.
func (r *partsReader) Close() error { return nil }

// readBody reads r's body, at most limit bytes, within timeout and with
// no stall of BodyStall: a body that does not come holds a connection, a
// goroutine and its bytes so far. rc sets the connection's read deadline
// (a ResponseWriter that cannot has its body read without one).
//
// The memory the body takes is reserved from mem as its bytes arrive,
// never on its declared length alone (a client could then make the proxy
// allocate up to the cap with headers): the proxy allocates at most twice
// what has come, or firstChunk before anything has. The bytes go into
// chunks, each as large as all before it, until half the declared length
// has come; then into one buffer of that length, the body's own. Without
// a declared length, the chunks are joined at the end. Past mem's bound a
// read waits BodyMemoryWait at most, then fails with errBodyMemory.
// The body is read through reader, the request's body bounded in time.
func readBody(r *http.Request, reader frontdoor.BodyReader, mem *bodyMemory, limit int64) (*heldBody, error) {
	h := &heldBody{mem: mem, start: -1, end: -1}
	if r.Body == nil || r.Body == http.NoBody {
		return h, nil
	}
	h.reader = reader
	body := &h.reader
	declared := r.ContentLength
	if declared > limit {
		body.Push() // for the server, which may read the rest before it answers
		return nil, errTooLarge
	}
	fail := func(err error) (*heldBody, error) {
		// The deadline stays: the server reads what is left of a body
		// before it answers, and must not wait for this one.
		h.release()
		return nil, err
	}
	age := mem.start()
	wait := BodyMemoryWait // in all, however many times the body waits
	reserve := func(n int64) error {
		h.mu.Lock()
		held := h.reserved
		h.mu.Unlock()
		asked := time.Now()
		err := mem.reserve(r.Context(), age, held, n, asked.Add(min(time.Until(body.End()), wait)))
		wait -= time.Since(asked)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.reserved += n
		h.mu.Unlock()
		return nil
	}
	var chunks [][]byte // full, in order
	var cur []byte      // the one being filled
	var got int64       // bytes read
	for declared < 0 || got < declared {
		if len(cur) == cap(cur) {
			size := got
			switch {
			case declared >= 0 && (got == 0 && declared <= firstChunk || got > 0 && 2*got >= declared):
				size = declared
			case got == 0:
				size = firstChunk
			case declared < 0:
				size = min(size, limit-got)
			}
			if size == 0 {
				// Without a declared length, at the cap: one byte more
				// is one too many.
				var probe [1]byte
				n, err := io.ReadFull(body, probe[:])
				if n > 0 {
					return fail(errTooLarge)
				}
				if err != io.EOF {
					return fail(err)
				}
				break
			}
			if err := reserve(size); err != nil {
				return fail(err)
			}
			if cur != nil {
				chunks = append(chunks, cur)
			}
			cur = make([]byte, 0, size)
			if size == declared {
				cur = join(cur, chunks)
				h.drop(chunks)
				chunks = nil
			}
		}
		n, err := body.Read(cur[len(cur):cap(cur)])
		cur = cur[:len(cur)+n]
		got += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
	}
	if len(chunks) > 0 {
		chunks = append(chunks, cur)
		if err := reserve(got); err != nil {
			return fail(err)
		}
		cur = join(make([]byte, 0, got), chunks)
		h.drop(chunks)
	}
	body.Clear()
	h.b = cur
	return h, nil
}

// join appends the chunks to b.
func join(b []byte, chunks [][]byte) []byte {
	for _, c := range chunks {
		b = append(b, c...)
	}
	return b
}

// drop gives back the memory of chunks, which the body no longer holds.
func (h *heldBody) drop(chunks [][]byte) {
	var n int64
	for _, c := range chunks {
		n += int64(cap(c))
	}
	h.mu.Lock()
	h.reserved -= n
	h.mu.Unlock()
	h.mem.release(n)
}
