package jsonscan

import (
	"errors"
	"fmt"
)

// DefaultMaxDepth is how deep arrays and objects may nest when a Scanner's
// MaxDepth is zero: encoding/json's bound.
const DefaultMaxDepth = 10000

// Kind is the kind of a JSON value, as its first byte tells it.
type Kind uint8

const (
	Invalid Kind = iota // no value: the end, or a byte no value starts with
	Object
	Array
	String
	Number
	True
	False
	Null
)

// Span is where a value lies in the document: a string's with its quotes.
// The zero Span is no value.
type Span struct{ Lo, Hi int }

// Set reports whether s holds a value.
func (s Span) Set() bool { return s.Hi > s.Lo }

// Len is the span's length in bytes.
func (s Span) Len() int { return s.Hi - s.Lo }

var (
	// ErrDuplicateKey: an object gives one of the caller's names twice.
	ErrDuplicateKey = errors.New("a key given twice")
	// ErrKeySpelling: an object has a key that is not one of the caller's
	// names but which some parser reads as one (another case, a Unicode
	// fold, or the name cut at an escaped NUL).
	ErrKeySpelling = errors.New("a second spelling of a key")
)

// SyntaxError says where and why a document is not JSON.
type SyntaxError struct {
	Offset int // of the byte at fault
	Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at byte %d", e.Reason, e.Offset)
}

// KeyError says which of the caller's names an object gave twice or
// spelled a second way. It wraps ErrDuplicateKey or ErrKeySpelling.
type KeyError struct {
	Name   string // the caller's name
	Offset int    // of the key at fault
	Err    error  // ErrDuplicateKey or ErrKeySpelling
}

func (e *KeyError) Error() string {
	if e.Err == ErrDuplicateKey {
		return fmt.Sprintf("key %q given twice, at byte %d", e.Name, e.Offset)
	}
	return fmt.Sprintf("a second spelling of key %q at byte %d", e.Name, e.Offset)
}

func (e *KeyError) Unwrap() error { return e.Err }

// Scanner reads one JSON document in place. Its zero value is ready; set
// its fields before Reset.
type Scanner struct {
	// Strict requires every string to be valid UTF-8 (RFC 8259, section
	// 8.1). Otherwise a string's invalid bytes are let through, as
	// encoding/json lets them (it reads each as U+FFFD).
	Strict bool
	// MaxDepth bounds how deep arrays and objects nest. Zero means
	// DefaultMaxDepth.
	MaxDepth int

	b     []byte
	i     int
	depth int
	err   error
	// Bit d of the containers open: whether the one at depth d+1 is an
	// object; past the first 64 in deep, so that a Scanner on the stack
	// reading a document of ordinary depth allocates nothing.
	objects uint64
	deep    []uint64
}

// Reset sets the scanner to read doc from its start.
func (s *Scanner) Reset(doc []byte) {
	s.b, s.i, s.depth, s.err = doc, 0, 0, nil
}

// Err returns the first fault found: a *SyntaxError or a *KeyError; nil
// while the document is read without one.
func (s *Scanner) Err() error { return s.err }

// Offset is how far the scanner has read.
func (s *Scanner) Offset() int { return s.i }

// Bytes returns the bytes of v, a span of the document being read.
func (s *Scanner) Bytes(v Span) []byte { return s.b[v.Lo:v.Hi] }

func (s *Scanner) fail(reason string) {
	if s.err == nil {
		s.err = &SyntaxError{Offset: s.i, Reason: reason}
	}
	s.i = len(s.b)
}

func (s *Scanner) failKey(name string, at int, err error) {
	if s.err == nil {
		s.err = &KeyError{Name: name, Offset: at, Err: err}
	}
	s.i = len(s.b)
}

// ws skips white space.
func (s *Scanner) ws() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return // most often: no space at all
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Next returns the kind of the value ahead, skipping white space before
// it; Invalid once the scanner has failed.
func (s *Scanner) Next() Kind {
	s.ws()
	if s.i >= len(s.b) || s.err != nil {
		return Invalid
	}
	return kinds[s.b[s.i]]
}

var kinds = func() (t [256]Kind) {
	t['{'], t['['], t['"'], t['t'], t['f'], t['n'] = Object, Array, String, True, False, Null
	t['-'] = Number
	for c := '0'; c <= '9'; c++ {
		t[c] = Number
	}
	return t
}()

// End reads the white space that may follow the document's value and
// reports whether the document ends there, as it must.
func (s *Scanner) End() bool {
	s.ws()
	if s.i != len(s.b) && s.err == nil {
		s.fail("data after the JSON value")
	}
	return s.err == nil
}

// push enters a container whose opening bracket is at s.i.
func (s *Scanner) push(object bool) bool {
	max := s.MaxDepth
	if max == 0 {
		max = DefaultMaxDepth
	}
	if s.depth == max {
		s.fail("nesting too deep")
		return false
	}
	s.i++
	word, bit := &s.objects, uint64(1)<<(s.depth%64)
	if s.depth >= 64 {
		w := s.depth/64 - 1
		for len(s.deep) <= w {
			s.deep = append(s.deep, 0)
		}
		word = &s.deep[w]
	}
	if object {
		*word |= bit
	} else {
		*word &^= bit
	}
	s.depth++
	return true
}

// inObject reports whether the innermost open container is an object.
func (s *Scanner) inObject() bool {
	d := s.depth - 1
	word := s.objects
	if d >= 64 {
		word = s.deep[d/64-1]
	}
	return word&(1<<(d%64)) != 0
}

// Skip reads the value ahead, whatever it is, checking it whole, and
// returns where it lies; the zero Span if it is not valid.
func (s *Scanner) Skip() Span {
	s.ws()
	lo, base := s.i, s.depth
	for s.err == nil {
		if s.i >= len(s.b) {
			s.fail("unexpected end")
			break
		}
		switch c := s.b[s.i]; kinds[c] {
		case Object, Array:
			if !s.push(c == '{') {
				return Span{}
			}
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == c+2 { // '}' and ']' are 2 past '{' and '['
				s.i++
				s.depth--
				break
			}
			if c == '{' {
				s.member()
			}
			continue
		case String:
			s.str()
		case True:
			s.word("true")
		case False:
			s.word("false")
		case Null:
			s.word("null")
		case Number:
			s.number()
		default:
			s.fail(fmt.Sprintf("unexpected %s", describe(c)))
		}
		if s.depth == base || !s.after(base) {
			break
		}
	}
	if s.err != nil {
		return Span{}
	}
	return Span{lo, s.i}
}

// after reads what follows a value inside the containers Skip opened
// above depth base: closing brackets, then a comma and what a member or
// element starts with. It reports whether another value is to be read.
func (s *Scanner) after(base int) bool {
	for s.depth > base && s.err == nil {
		s.ws()
		if s.i >= len(s.b) {
			s.fail("unexpected end")
			return false
		}
		obj := s.inObject()
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			s.ws()
			if obj {
				s.member()
			}
			return true
		case obj && c == '}', !obj && c == ']':
			s.i++
			s.depth--
		case obj:
			s.fail(`expected "," or "}"`)
		default:
			s.fail(`expected "," or "]"`)
		}
	}
	return false
}

// member reads a key and its colon, and returns the key's span and the
// flags of its string.
func (s *Scanner) member() (Span, uint8) {
	lo := s.i
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.fail("expected a key")
		return Span{}, 0
	}
	flags := s.str()
	k := Span{lo, s.i}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		s.fail(`expected ":" after a key`)
		return Span{}, 0
	}
	s.i++
	s.ws()
	return k, flags
}
