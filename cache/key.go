package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// Scope is what, beyond the request itself, an answer belongs to: no
// answer stored under one Scope is served under another.
type Scope struct {
	// Tenant names whose answer it is; "" for none.
	Tenant string
	// Route names the upstreams it came from, as the proxy's routes do;
	// "" for none.
	Route string
	// ClientKey is the client's own credential, where it reaches the
	// provider: an answer is kept apart per key, under a hash of it.
	ClientKey string
}

// answerHeaders are the request headers that change an answer.
var answerHeaders = []string{"Anthropic-Version", "Anthropic-Beta", "Openai-Beta"}

// Key returns the key of req, sent with body, under scope, and whether it
// can be cached at all: a body that is not JSON (empty is fine), whose
// objects repeat a key, or that nests past 128 levels, cannot. The key is a hex SHA-256 of the scope and
// of a canonical form of the request, so two requests that differ only in
// the order of their JSON keys, their white space or the order of their
// query share it, and it says nothing of what they hold.
func Key(scope Scope, req *http.Request, body []byte) (string, bool) {
	h := sha256.New()
	var b []byte
	b = append(b, "rebound-cache/1\n"...)
	b = appendField(b, scope.Tenant)
	b = appendField(b, scope.Route)
	if scope.ClientKey != "" {
		sum := sha256.Sum256([]byte(scope.ClientKey))
		b = hex.AppendEncode(b, sum[:])
	}
	b = append(b, '\n')
	b = appendField(b, req.Method)
	b = appendField(b, req.URL.EscapedPath())
	b = appendField(b, canonicalQuery(req.URL.RawQuery))
	for _, name := range answerHeaders {
		for _, v := range req.Header[name] {
			b = append(b, name...)
			b = append(b, ':')
			b = appendField(b, v)
		}
	}
	if Streamed(req, body) {
		b = append(b, "stream\n"...)
	}
	h.Write(b)
	if len(bytes.TrimSpace(body)) > 0 {
		c := canonicals.Get().(*canonical)
		defer canonicals.Put(c)
		c.s.Reset(body)
		c.s.Strict, c.s.MaxDepth, c.dup, c.over, c.arena = true, maxDepth, false, false, c.arena[:0]
		c.limit = 4*len(body) + 4096
		lo, hi := c.write()
		if !c.s.End() || c.dup || c.over {
			return "", false
		}
		h.Write(c.arena[lo:hi])
		if cap(c.arena) > 4<<20 {
			c.arena = nil // one huge document keeps nothing for ever
		}
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// maxDepth bounds how deep a body Key keys may nest: deeper than any
// request a provider takes.
const maxDepth = 128

// appendField appends s and a line's end, the end escaped in s so that no
// field runs into the next.
func appendField(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n':
			b = append(b, `\n`...)
		case '\\':
			b = append(b, `\\`...)
		default:
			b = append(b, s[i])
		}
	}
	return append(b, '\n')
}

// canonicalQuery is raw with its parameters sorted (each kept as it is
// spelled, so that nothing a server reads differently is merged).
func canonicalQuery(raw string) string {
	if raw == "" || !strings.Contains(raw, "&") {
		return raw
	}
	params := strings.Split(raw, "&")
	slices.Sort(params)
	return strings.Join(params, "&")
}

// Streamed reports whether req, sent with body, asks for a streamed
// answer: "stream": true in its JSON body, Gemini's
// streamGenerateContent, or alt=sse in its query.
func Streamed(req *http.Request, body []byte) bool {
	if strings.HasSuffix(req.URL.Path, ":streamGenerateContent") {
		return true
	}
	if q, err := url.ParseQuery(req.URL.RawQuery); err == nil && q.Get("alt") == "sse" {
		return true
	}
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Next() != jsonscan.Object {
		return false
	}
	m := s.Object(streamName)
	for m.Next() {
		if m.Name() == 0 {
			return s.Next() == jsonscan.True
		}
		s.Skip()
	}
	return false
}

var streamName = jsonscan.NewNames("stream")

// canonical writes a JSON document with its objects' members sorted by
// their keys' text and no white space; dup says an object repeated a key.
// Members are written with their keys as spelled and strings as they came:
// two spellings of one request only miss each other, never meet. An
// object's members that are objects or arrays are written first, each into
// the arena, then the object itself after them, its members in order: the
// arena and the members' stack are kept from one document to the next.
type canonical struct {
	s       jsonscan.Scanner
	dup     bool
	over    bool // the arena passed limit: the document is not keyed
	limit   int
	arena   []byte
	members []member // a stack: each object's members above its parent's
}

// member is one member of an object: its key's text and spelling, and its
// value, in the source (a scalar) or at lo:hi in the arena.
type member struct {
	text, raw, scalar []byte
	lo, hi            int
}

var canonicals = sync.Pool{New: func() any { return new(canonical) }}

// write writes the value ahead into the arena and returns where it is.
func (c *canonical) write() (lo, hi int) {
	s := &c.s
	if c.over {
		// Each level copies what it holds: a document nested deep
		// around a large value would be copied once a level.
		s.Skip()
		return 0, 0
	}
	switch s.Next() {
	case jsonscan.Object:
		base := len(c.members)
		m := s.Object(nil)
		for m.Next() {
			mb := member{raw: s.Bytes(m.Key()), text: s.Text(nil, m.Key())}
			switch s.Next() {
			case jsonscan.Object, jsonscan.Array:
				mb.lo, mb.hi = c.write()
			default:
				mb.scalar = s.Bytes(s.Skip())
			}
			c.members = append(c.members, mb)
		}
		members := c.members[base:]
		if c.over {
			clear(members)
			c.members = c.members[:base]
			return 0, 0
		}
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.text, b.text) })
		lo = len(c.arena)
		c.arena = append(c.arena, '{')
		for i, mb := range members {
			if i > 0 {
				c.arena = append(c.arena, ',')
				if bytes.Equal(members[i-1].text, mb.text) {
					c.dup = true
				}
			}
			c.arena = append(c.arena, mb.raw...)
			c.arena = append(c.arena, ':')
			if mb.scalar != nil {
				c.arena = append(c.arena, mb.scalar...)
			} else {
				c.arena = append(c.arena, c.arena[mb.lo:mb.hi]...)
			}
		}
		clear(members)
		c.members = c.members[:base]
		c.arena = append(c.arena, '}')
		c.over = c.over || len(c.arena) > c.limit
		return lo, len(c.arena)
	case jsonscan.Array:
		// Elements are written in order: each one's own writing lands
		// after the array's bytes so far, so they are gathered after.
		type span struct{ lo, hi int }
		var elems []span
		e := s.Array()
		for e.Next() {
			switch s.Next() {
			case jsonscan.Object, jsonscan.Array:
				l, h := c.write()
				elems = append(elems, span{l, h})
			default:
				v := s.Skip()
				l := len(c.arena)
				c.arena = append(c.arena, s.Bytes(v)...)
				elems = append(elems, span{l, len(c.arena)})
			}
		}
		if c.over {
			return 0, 0
		}
		lo = len(c.arena)
		c.arena = append(c.arena, '[')
		for i, el := range elems {
			if i > 0 {
				c.arena = append(c.arena, ',')
			}
			c.arena = append(c.arena, c.arena[el.lo:el.hi]...)
		}
		c.arena = append(c.arena, ']')
		c.over = c.over || len(c.arena) > c.limit
		return lo, len(c.arena)
	default:
		lo = len(c.arena)
		c.arena = append(c.arena, s.Bytes(s.Skip())...)
		return lo, len(c.arena)
	}
}
