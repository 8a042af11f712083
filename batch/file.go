package batch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode/utf8"
)

// MaxLine is the longest input line Read takes, in bytes: a request with
// a few images inlined fits; a longer line is malformed.
const MaxLine = 64 << 20

// Request is one line of an input file: a request to send, named by its
// custom_id.
type Request struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
	// Line is the request's line number in its file, from 1.
	Line int `json:"-"`
}

// LineError is a malformed input line.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// DuplicateError is the error of Read for an input that names one
// custom_id twice: its output could not say which answer is whose.
type DuplicateError struct {
	CustomID    string
	First, Line int
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("batch: custom_id %q is on line %d and again on line %d: every request needs its own", e.CustomID, e.First, e.Line)
}

// File is a batch input file, read.
type File struct {
	// Requests are the well-formed lines, in order.
	Requests []Request
	// Malformed are the lines that are not a request, in order; blank
	// lines are neither.
	Malformed []*LineError
}

// Read reads an input file in the OpenAI Batch API's format: one JSON
// object a line, {"custom_id", "method", "url", "body"}, the method POST,
// the url a path ("/v1/chat/completions"), the body a JSON object. A line
// that is not one is kept in File.Malformed; the error is for a file that
// could not be read, or a *DuplicateError.
func Read(r io.Reader) (*File, error) {
	f := &File{}
	seen := map[string]int{}
	br := bufio.NewReaderSize(r, 64<<10)
	// A byte order mark, as some editors write, is not part of the
	// first line.
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
	}
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("batch: reading line %d: %w", n, err)
		}
		switch {
		case tooLong:
			f.Malformed = append(f.Malformed, &LineError{n, fmt.Errorf("longer than %d MiB", MaxLine>>20)})
		case len(bytes.TrimSpace(line)) > 0:
			req, perr := parseLine(line)
			if perr != nil {
				f.Malformed = append(f.Malformed, &LineError{n, perr})
				break
			}
			if first, ok := seen[req.CustomID]; ok {
				return nil, &DuplicateError{CustomID: req.CustomID, First: first, Line: n}
			}
			seen[req.CustomID] = n
			req.Line = n
			f.Requests = append(f.Requests, req)
		}
		if err != nil { // io.EOF
			return f, nil
		}
	}
}

// readLine reads one line without its end; a line longer than MaxLine is
// read to its end and dropped, reported as tooLong. err is io.EOF with the
// file's last line.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxLine+2 { // room for "\r\n"
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if err == nil && len(line) > MaxLine {
			tooLong, line = true, nil
		}
		return line, tooLong, err
	}
}

// parseLine parses and checks one input line.
func parseLine(line []byte) (Request, error) {
	var raw struct {
		CustomID *json.RawMessage `json:"custom_id"`
		Method   *json.RawMessage `json:"method"`
		URL      *json.RawMessage `json:"url"`
		Body     json.RawMessage  `json:"body"`
	}
	if err := json.Unmarshal(line, &raw); err != nil {
		return Request{}, fmt.Errorf("not a JSON object: %v", err)
	}
	var req Request
	for _, f := range []struct {
		name string
		raw  *json.RawMessage
		to   *string
	}{{"custom_id", raw.CustomID, &req.CustomID}, {"method", raw.Method, &req.Method}, {"url", raw.URL, &req.URL}} {
		if f.raw == nil {
			return Request{}, fmt.Errorf("%s is missing", f.name)
		}
		if err := json.Unmarshal(*f.raw, f.to); err != nil {
			return Request{}, fmt.Errorf("%s is not a string", f.name)
		}
		if *f.to == "" {
			return Request{}, fmt.Errorf("%s is empty", f.name)
		}
		// Invalid UTF-8 would be decoded to U+FFFD, making two ids one;
		// a NUL no database keeps in text.
		if !utf8.Valid(*f.raw) || strings.ContainsRune(*f.to, 0) || strings.ContainsRune(*f.to, utf8.RuneError) {
			return Request{}, fmt.Errorf("%s is not valid UTF-8 text", f.name)
		}
	}
	if req.Method != "POST" {
		return Request{}, fmt.Errorf("method %q: only POST is sent", req.Method)
	}
	u, err := url.Parse(req.URL)
	if err != nil || !strings.HasPrefix(req.URL, "/") || strings.HasPrefix(req.URL, "//") || u.Host != "" {
		return Request{}, fmt.Errorf("url %q: want a path such as /v1/chat/completions", req.URL)
	}
	body := bytes.TrimSpace(raw.Body)
	if len(body) == 0 || body[0] != '{' {
		return Request{}, errors.New("body is missing or not a JSON object")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		return Request{}, fmt.Errorf("body: %v", err)
	}
	req.Body = compact.Bytes()
	return req, nil
}

// Input returns what identifies f to a journal: its custom_ids in order,
// and a digest of its requests, custom_ids, methods, urls and bodies (the
// bodies compacted, so that a file re-indented is still the same input).
func (f *File) Input() Input {
	h := sha256.New()
	in := Input{IDs: make([]string, len(f.Requests))}
	var n [8]byte
	for i, r := range f.Requests {
		in.IDs[i] = r.CustomID
		for _, field := range [][]byte{[]byte(r.CustomID), []byte(r.Method), []byte(r.URL), r.Body} {
			binary.BigEndian.PutUint64(n[:], uint64(len(field)))
			h.Write(n[:])
			h.Write(field)
		}
	}
	in.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return in
}
