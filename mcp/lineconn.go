package reboundmcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/internal/jsonscan"
)

// maxLine bounds one message, as the SDK's mcp.DefaultMaxLineLength does.
const maxLine = mcp.DefaultMaxLineLength

// A lineConn speaks the SDK's stdio framing (one JSON-RPC message, or a
// batch of them, per line: newline-delimited JSON) over a pipe, with the
// SDK's jsonrpc.EncodeMessage and DecodeMessage (which returns what the
// SDK's jsonrpc.DecodeMessage does, for a fraction of its cost), but reads on the
// goroutine that calls Read instead of handing each message through a
// goroutine of its own: over stdio that hand-off, and the wake-up of a
// sleeping thread it costs, is most of what a relay adds to a call.
// Read cannot be interrupted by its context: closing the connection (a
// pipe's end is an *os.File the runtime polls) ends it.
//
// A line that is not a JSON-RPC message is returned by Read as a
// *lineError, and the next Read goes on with the line after it, so that
// one bad line costs the connection nothing.
type lineConn struct {
	r  *bufio.Reader
	rc io.Closer
	w  io.Writer
	wc io.Closer

	queue []jsonrpc.Message // the rest of a batch read

	wmu     sync.Mutex
	batches map[jsonrpc.ID]*batch // requests of a batch read, by ID, until answered

	closeOnce sync.Once
	closeErr  error
}

// A batch collects the answers to the requests of one batch the peer
// sent, to be written back in one array, as the SDK does.
type batch struct {
	left    int
	answers []*jsonrpc.Response
	index   map[jsonrpc.ID]int
}

// lineError is a line that could not be read as JSON-RPC.
type lineError struct{ err error }

func (e *lineError) Error() string { return "reboundmcp: unreadable line: " + e.err.Error() }
func (e *lineError) Unwrap() error { return e.err }

// NewLineConn returns an mcp.Connection that speaks newline-delimited
// JSON-RPC over r and w, as the SDK's mcp.IOTransport does, reading on
// the goroutine that calls Read rather than on one of its own. Close
// closes r and w when they are io.Closers; Read ends only then, or when r
// ends, whatever its context says, so r should be one whose Close ends a
// Read in progress: a pipe or a socket (an *os.File in non-blocking mode,
// a net.Conn). Given to Serve as the client's connection, a line that is
// not JSON-RPC is answered with a parse error (-32700, id null), and the
// client's next line is read as if the bad one had not come.
func NewLineConn(r io.Reader, w io.Writer) mcp.Connection {
	c := &lineConn{r: bufio.NewReaderSize(r, 64<<10), w: w}
	c.rc, _ = r.(io.Closer)
	c.wc, _ = w.(io.Closer)
	return c
}

// Read returns the next message.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(c.queue) > 0 {
		msg := c.queue[0]
		c.queue = c.queue[1:]
		return msg, nil
	}
	for {
		line, err := c.line()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			continue // a blank line says nothing
		}
		msgs, err := c.decode(line)
		switch {
		case err == nil:
		case incomplete(line):
			if msgs, err = c.decodeSpread(line); err != nil {
				return nil, err
			}
		default:
			return nil, &lineError{err}
		}
		c.queue = msgs[1:]
		return msgs[0], nil
	}
}

// decode reads one line: a message, or a batch of them.
func (c *lineConn) decode(line []byte) ([]jsonrpc.Message, error) {
	if line[0] == '[' {
		return c.readBatch(line)
	}
	msg, err := DecodeMessage(line)
	if err != nil {
		return nil, err
	}
	return []jsonrpc.Message{msg}, nil
}

// decodeSpread reads a value that begins with first and goes on over the
// lines after it, as the SDK's JSON decoder reads one: a json.Decoder
// scans each line once, going on from where the line before left it.
// (Decoding all the lines again with each line added was quadratic in
// the lines: a notification pretty-printed over 20 000 lines took
// seconds, and held up what came after it.) A value longer than maxLine
// is refused, its lines so far skipped. An error is a *lineError, or the
// stream's.
func (c *lineConn) decodeSpread(first []byte) ([]jsonrpc.Message, error) {
	f := &lineFeed{c: c, line: first, newline: true, size: len(first) + 1}
	var raw json.RawMessage
	err := json.NewDecoder(f).Decode(&raw)
	switch {
	case f.err != nil:
		return nil, f.err // the stream's, or a line's or the value's length
	case err != nil:
		return nil, &lineError{err}
	}
	msgs, err := c.decode(raw)
	if err != nil {
		return nil, &lineError{err}
	}
	return msgs, nil
}

// A lineFeed gives a json.Decoder the lines of one value, each with its
// newline (tokens on two lines are two tokens), for at most maxLine bytes
// of lines.
type lineFeed struct {
	c       *lineConn
	line    []byte // what is left to give of the line read last
	newline bool   // its newline is still to give
	size    int    // the lines' bytes so far, newlines counted
	err     error  // why the lines stopped
}

func (f *lineFeed) Read(p []byte) (int, error) {
	for len(f.line) == 0 && !f.newline {
		line, err := f.c.line()
		if err == nil && f.size+len(line)+1 > maxLine {
			err = &lineError{errTooLong}
		}
		if err != nil {
			f.err = err
			return 0, err
		}
		f.line, f.newline, f.size = line, true, f.size+len(line)+1
	}
	n := copy(p, f.line) // before the next line() reuses the reader's buffer
	f.line = f.line[n:]
	if len(f.line) == 0 && n < len(p) && f.newline {
		p[n] = '\n'
		n++
		f.newline = false
	}
	return n, nil
}

// errTooLong is a message over maxLine, on one line or many.
var errTooLong = fmt.Errorf("a message longer than %d bytes", maxLine)

// line returns the next line, trimmed of white space: valid until the
// next call. A line longer than maxLine is skipped and reported.
func (c *lineConn) line() ([]byte, error) {
	part, err := c.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := bytes.Clone(part)
		for err == bufio.ErrBufferFull && len(long) <= maxLine {
			part, err = c.r.ReadSlice('\n')
			long = append(long, part...)
		}
		if err == bufio.ErrBufferFull {
			return nil, c.skipLong(err)
		}
		part = long
	}
	part = bytes.TrimSpace(part)
	switch {
	case len(part) > maxLine:
		return nil, &lineError{errTooLong}
	case err == io.EOF && len(part) > 0:
		return part, nil // the last line, without its newline; the next read ends
	case err != nil:
		return nil, err
	}
	return part, nil
}

// incomplete says whether b is the start of a JSON value that goes on
// past it.
func incomplete(b []byte) bool {
	var raw json.RawMessage
	var se *json.SyntaxError
	err := json.Unmarshal(b, &raw)
	return errors.As(err, &se) && se.Offset >= int64(len(b))
}

// skipLong drops the rest of a line over maxLine.
func (c *lineConn) skipLong(err error) error {
	for err == bufio.ErrBufferFull {
		_, err = c.r.ReadSlice('\n')
	}
	if err != nil && err != bufio.ErrBufferFull {
		return err
	}
	return &lineError{errTooLong}
}

// readBatch reads a batch; its requests are answered in one array.
func (c *lineConn) readBatch(line []byte) ([]jsonrpc.Message, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(line, &raws); err != nil {
		return nil, err
	}
	if len(raws) == 0 {
		return nil, errors.New("empty batch")
	}
	msgs := make([]jsonrpc.Message, len(raws))
	b := &batch{index: map[jsonrpc.ID]int{}}
	for i, raw := range raws {
		msg, err := DecodeMessage(raw)
		if err != nil {
			return nil, err
		}
		msgs[i] = msg
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			if _, dup := b.index[req.ID]; dup {
				return nil, fmt.Errorf("batch repeats request ID %v", req.ID.Raw())
			}
			b.index[req.ID] = len(b.answers)
			b.answers = append(b.answers, nil)
		}
	}
	if b.left = len(b.answers); b.left > 0 {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if c.batches == nil {
			c.batches = map[jsonrpc.ID]*batch{}
		}
		for id := range b.index {
			if _, dup := c.batches[id]; dup {
				return nil, fmt.Errorf("batch repeats request ID %v", id.Raw())
			}
		}
		for id := range b.index {
			c.batches[id] = b
		}
	}
	return msgs, nil
}

// Write writes msg as one line; the answer to a request of a batch waits
// for the batch's last, and goes with them in one array.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if resp, ok := msg.(*jsonrpc.Response); ok && c.batches[resp.ID] != nil {
		return c.answerInBatch(resp)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("marshaling message: %v", err)
	}
	_, err = c.w.Write(append(data, '\n'))
	return err
}

// answerInBatch keeps resp with its batch, and writes the batch once it
// is whole.
func (c *lineConn) answerInBatch(resp *jsonrpc.Response) error {
	b := c.batches[resp.ID]
	delete(c.batches, resp.ID)
	b.answers[b.index[resp.ID]] = resp
	if b.left--; b.left > 0 {
		return nil
	}
	raws := make([]json.RawMessage, len(b.answers))
	for i, a := range b.answers {
		raw, err := jsonrpc.EncodeMessage(a)
		if err != nil {
			return err
		}
		raws[i] = raw
	}
	data, err := json.Marshal(raws)
	if err != nil {
		return err
	}
	_, err = c.w.Write(append(data, '\n'))
	return err
}

// parseError is JSON-RPC's answer to a message that could not be read:
// its ID unknown, null.
const parseError = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not a JSON-RPC message"}}` + "\n"

// invalidRequest is its answer to a message that gives a member twice or
// spells one another way: which is meant is not guessed.
const invalidRequest = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a member given twice, or spelled another way"}}` + "\n"

// answerParseError tells the peer a line it sent could not be read, for
// why.
func (c *lineConn) answerParseError(why error) error {
	answer := parseError
	if errors.Is(why, jsonscan.ErrDuplicateKey) || errors.Is(why, jsonscan.ErrKeySpelling) {
		answer = invalidRequest
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := io.WriteString(c.w, answer)
	return err
}

// Close closes both ends, ending a Read in progress.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.rc != nil {
			errs = append(errs, c.rc.Close())
		}
		if c.wc != nil && c.wc != c.rc {
			errs = append(errs, c.wc.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// SessionID is empty: a pipe has no sessions.
func (c *lineConn) SessionID() string { return "" }
