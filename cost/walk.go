package cost

import (
	"bytes"
	"encoding/json"
	"io"
)

// readBody reads body into r: its models, output cap, thinking budget,
// answers, predicted output and kept context, and returns the images it
// refers to. A body that is not JSON throughout names no output cap or
// thinking budget of its own, whatever it says before its flaw, and
// every value of a body of several is read.
func (r *request) readBody(body []byte) (media int64) {
	if len(body) == 0 {
		return 0
	}
	text, exact := pythonText(body)
	w := walker{d: json.NewDecoder(bytes.NewReader(text)), r: r}
	w.d.UseNumber()
	docs := 0
	for ; !w.ended; docs++ {
		w.value(placeTop, "", document)
	}
	if docs != 2 || w.broken || !exact { // one document, then the end
		r.output.own, r.thoughts.own = false, false
	}
	return w.media
}

// A walker reads the values of a body in order, and what they say into r.
type walker struct {
	d     *json.Decoder
	r     *request
	media int64 // the parts that refer to an image
	depth int   // of the arrays and objects the walk is in
	// ended says the body ended, or broke, which broken says: nothing
	// more is read.
	ended, broken bool
}

// fail ends the walk on err, which breaks the body unless it is the end
// of the body between two documents.
func (w *walker) fail(err error, between bool) {
	w.ended = true
	w.broken = w.broken || err != io.EOF || !between
}

// What a value is to the walk: a document of the body, a member of an
// object, or an element of an array.
type role uint8

const (
	document role = iota
	member
	element
)

// value reads the next value, a document, a member named key of an
// object at at, or an element at at of an array that is the value of a
// member named key (an element says what its member says: "n": [4]
// counts as much as "n": 4), and returns its first token.
func (w *walker) value(at place, key string, as role) json.Token {
	start := w.d.InputOffset()
	t, err := w.d.Token()
	if err != nil {
		w.fail(err, as == document)
		return nil
	}
	if as != document {
		w.named(at, key, t)
	}
	if d, ok := t.(json.Delim); ok && w.depth == maxDepth {
		w.skip()
	} else if ok {
		w.depth++
		defer func() { w.depth-- }()
		in := at // an element's members and elements are where the element is
		switch {
		case as == document && d == '{':
			in = placeTop
		case as != element:
			in = w.within(at, key)
		}
		// A legacy completion's prompt may be a list of prompts, each
		// answered n times: its strings, or its lists of token ids (a
		// list of numbers is one prompt).
		prompts := as == member && at == placeTop && d == '[' && fold(key) == "prompt"
		var listed int64
		for w.d.More() && !w.ended {
			if d == '[' {
				if e := w.value(in, key, element); prompts {
					if _, id := e.(json.Number); !id {
						listed++
					}
				}
				continue
			}
			t, err := w.d.Token()
			k, ok := t.(string)
			if err != nil || !ok {
				w.fail(err, false)
				return t
			}
			w.value(in, k, member)
		}
		w.r.prompts = max(w.r.prompts, listed)
		if _, err := w.d.Token(); err != nil && !w.ended { // the closing delimiter
			w.fail(err, false)
		}
	}
	if as == member && at == placeTop && fold(key) == "prediction" {
		w.r.predicted += (w.d.InputOffset() - start + bytesPerToken - 1) / bytesPerToken
	}
	return t
}

// maxDepth is the deepest nesting of arrays and objects the walk goes
// into, encoding/json's own bound (Python's is lower): the walk takes a
// call for each level, and a body of a few MiB of "[" would otherwise
// overflow the goroutine's stack.
const maxDepth = 10000

// skip reads the rest of a value nested past maxDepth, whose opening
// delimiter was read, without a call for each level. The body is broken:
// parsers refuse it, or read it as they like.
func (w *walker) skip() {
	w.broken = true
	for open := 1; open > 0; {
		t, err := w.d.Token()
		if err != nil {
			w.fail(err, false)
			return
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			open++
		case json.Delim('}'), json.Delim(']'):
			open--
		}
	}
}
