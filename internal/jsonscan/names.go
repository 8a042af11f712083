package jsonscan

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Names are the keys a caller decides by, in one object: a Scanner
// matches a key to them by its text, and refuses an object that gives one
// twice or spells one a second way. Make them once, with NewNames, and
// share them: they are read-only.
type Names struct {
	names   []string
	bytes   [][]byte // each name as bytes, to fold-compare without a copy
	folded  []string // each name in lower case
	longest int      // in bytes, and so in runes: names are ASCII
	byLen   [][]int8 // the indexes of the names of each length
}

// MaxNames is how many names one Names holds.
const MaxNames = 64

// NewNames returns the names, in order: Members.Name reports a key's
// index among them. Names are ASCII, distinct even in case, and at most
// MaxNames; anything else is a programming error, and panics.
func NewNames(names ...string) *Names {
	if len(names) > MaxNames {
		panic(fmt.Sprintf("jsonscan: %d names, more than %d", len(names), MaxNames))
	}
	n := &Names{names: names}
	for i, name := range names {
		for _, c := range []byte(name) {
			if c >= utf8.RuneSelf || c < 0x20 {
				panic(fmt.Sprintf("jsonscan: name %q is not printable ASCII", name))
			}
		}
		f := strings.ToLower(name)
		for j, g := range n.folded {
			if f == g {
				panic(fmt.Sprintf("jsonscan: names %q and %q differ only in case", names[j], names[i]))
			}
		}
		n.folded = append(n.folded, f)
		n.bytes = append(n.bytes, []byte(name))
		n.longest = max(n.longest, len(name))
	}
	n.byLen = make([][]int8, n.longest+1)
	for i, name := range names {
		n.byLen[len(name)] = append(n.byLen[len(name)], int8(i))
	}
	return n
}

// Other is the index Members.Name reports for a key that is none of the
// caller's names.
const Other = -1

// match returns the index of the name key is, raw as written between its
// quotes with the flags of its string, or Other; a key that is a second
// spelling of a name is reported by spelling >= 0, that name's index.
func (n *Names) match(raw []byte, flags uint8) (index, spelling int) {
	if flags == 0 { // ASCII, no escapes: the key's text is raw, and a spelling of a name is as long
		if len(raw) > n.longest {
			return Other, Other
		}
		same := n.byLen[len(raw)]
		for _, i := range same {
			if n.names[i] == string(raw) {
				return int(i), Other
			}
		}
		for _, i := range same {
			if asciiFoldEqual(raw, n.folded[i]) {
				return Other, int(i)
			}
		}
		return Other, Other
	}
	var buf [128]byte
	text, cut := keyText(buf[:0], raw, n.longest)
	if text == nil {
		return Other, Other // longer than any name, in any spelling
	}
	if !cut {
		for i, name := range n.names {
			if name == string(text) {
				return i, Other
			}
		}
	}
	for i, name := range n.bytes {
		if bytes.EqualFold(name, text) {
			return Other, i
		}
	}
	return Other, Other
}

// Spelled returns the index of the name text is, or which some parser
// reads it as (another case, a Unicode fold, cut at a NUL); Other if none.
// text is a string's text, its escapes resolved (Scanner.Text): a caller
// that decides by a string value reads its spellings as a key's.
func (n *Names) Spelled(text []byte) int {
	if cut := bytes.IndexByte(text, 0); cut >= 0 {
		text = text[:cut]
	}
	for i, name := range n.bytes {
		if bytes.EqualFold(name, text) {
			return i
		}
	}
	return Other
}

// Found reads the value ahead and reports whether it names one of the
// names anywhere: as a key, or as a string, in any spelling Spelled
// reads; a key fault (a name given twice) is a finding too. It stops at
// the first: a caller that must know the document valid checks Err or
// End after a false.
func (n *Names) Found(s *Scanner) bool {
	var buf [128]byte
	switch s.Next() {
	case Object:
		for m := s.Object(n); m.Next(); {
			if m.Name() != Other || n.Found(s) {
				return true
			}
		}
		var ke *KeyError
		return errors.As(s.err, &ke)
	case Array:
		for e := s.Array(); e.Next(); {
			if n.Found(s) {
				return true
			}
		}
	case String:
		v, ok := s.Str()
		if !ok {
			return false
		}
		text, _ := keyText(buf[:0], s.b[v.Lo+1:v.Hi-1], n.longest) // nil if longer than any name
		return text != nil && n.Spelled(text) != Other
	default:
		s.Skip()
	}
	return false
}

// asciiFoldEqual reports whether ASCII key is lower, a lower-case name,
// in another case.
func asciiFoldEqual(key []byte, lower string) bool {
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// keyText appends to dst the text of a key as written between its
// quotes, its escapes resolved, up to an escaped NUL (cut: a C parser
// stops there), or returns nil if it has more than longest runes before
// one: it is then none of the names in any spelling, since a name's case
// fold keeps its runes.
func keyText(dst, raw []byte, longest int) (text []byte, cut bool) {
	runes := 0
	for i := 0; i < len(raw); runes++ {
		if runes > longest {
			return nil, false
		}
		var r rune
		if raw[i] == '\\' {
			r, i, _ = unescapeAt(raw, i)
		} else {
			var n int
			r, n = utf8.DecodeRune(raw[i:])
			i += n
		}
		if r == 0 {
			return dst, true
		}
		dst = utf8.AppendRune(dst, r)
	}
	if runes > longest {
		return nil, false
	}
	return dst, false
}

// Members reads an object's members, in order. Take each member's value
// (with a Scanner method: Skip, Str, Int, Object, Array) before the next
// call of Next.
type Members struct {
	s     *Scanner
	names *Names
	seen  uint64 // the names given so far
	name  int
	key   Span
	state uint8 // 0 before the first member, 1 after one, 2 done
}

// Object starts reading the object ahead, matching its keys to names
// (which may be nil: then every key is Other). If the value ahead is not
// an object the scanner fails: check Next first.
func (s *Scanner) Object(names *Names) Members {
	return Members{s: s, names: names, name: Other, state: s.enter(Object)}
}

// enter enters the container of kind k ahead, and returns the state of
// its reader: 0, or 2 (done) if the value ahead is not one, or nests too
// deep.
func (s *Scanner) enter(k Kind) uint8 {
	if s.Next() != k {
		if s.err == nil && k == Object {
			s.fail("expected an object")
		} else if s.err == nil {
			s.fail("expected an array")
		}
		return 2
	}
	if !s.push(k == Object) {
		return 2
	}
	return 0
}

// Next reads up to the next member's value and reports whether there is
// one; false at the object's end, or once the scanner has failed.
func (m *Members) Next() bool {
	s := m.s
	if m.state == 2 || s.err != nil {
		m.state = 2
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		s.fail("unexpected end")
		m.state = 2
		return false
	}
	c := s.b[s.i]
	switch {
	case c == '}':
		s.i++
		s.depth--
		m.state = 2
		return false
	case m.state == 1 && c != ',':
		s.fail(`expected "," or "}"`)
		m.state = 2
		return false
	case m.state == 1:
		s.i++
		s.ws()
	}
	m.state = 1
	k, flags := s.member()
	if s.err != nil {
		m.state = 2
		return false
	}
	m.key, m.name = k, Other
	if m.names != nil {
		i, spelling := m.names.match(s.b[k.Lo+1:k.Hi-1], flags)
		switch {
		case spelling >= 0:
			s.failKey(m.names.names[spelling], k.Lo, ErrKeySpelling)
		case i >= 0 && m.seen&(1<<i) != 0:
			s.failKey(m.names.names[i], k.Lo, ErrDuplicateKey)
		case i >= 0:
			m.seen |= 1 << i
			m.name = i
		}
		if s.err != nil {
			m.state = 2
			return false
		}
	}
	return true
}

// Name is the index of the current member's key among the names, or
// Other.
func (m *Members) Name() int { return m.name }

// Key is where the current member's key lies, with its quotes.
func (m *Members) Key() Span { return m.key }

// Elements reads an array's elements, in order. Take each element (with
// a Scanner method) before the next call of Next.
type Elements struct {
	s     *Scanner
	state uint8 // as Members'
}

// Array starts reading the array ahead. If the value ahead is not an
// array the scanner fails: check Next first.
func (s *Scanner) Array() Elements {
	return Elements{s: s, state: s.enter(Array)}
}

// Next moves to the next element and reports whether there is one.
func (e *Elements) Next() bool {
	s := e.s
	if e.state == 2 || s.err != nil {
		e.state = 2
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		s.fail("unexpected end")
		e.state = 2
		return false
	}
	switch c := s.b[s.i]; {
	case c == ']':
		s.i++
		s.depth--
		e.state = 2
		return false
	case e.state == 1 && c != ',':
		s.fail(`expected "," or "]"`)
		e.state = 2
		return false
	case e.state == 1:
		s.i++
	}
	e.state = 1
	return true
}
