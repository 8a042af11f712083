package jsonscan

import (
	"fmt"
	"unicode/utf8"
)

// The values a Scanner reads: strings, numbers and literals.

// String flags.
const (
	escaped = 1 << iota // holds a backslash escape
	high                // holds a byte beyond ASCII
)

// plain tells the bytes that stand for themselves in a string: printable
// ASCII but for the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string whose opening quote is at s.i, and returns its
// flags.
func (s *Scanner) str() (flags uint8) {
	b, i := s.b, s.i+1
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.fail("unterminated string")
			return 0
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return flags
		case c == '\\':
			flags |= escaped
			if i+1 >= len(b) {
				s.i = i
				s.fail("unterminated string")
				return 0
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					s.i = i
					s.fail(`invalid \u escape`)
					return 0
				}
				i += 6
			default:
				s.i = i
				s.fail("invalid escape")
				return 0
			}
		case c < 0x20:
			s.i = i
			s.fail("control character in a string")
			return 0
		case !s.Strict:
			flags |= high
			i++
		default:
			flags |= high
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				s.i = i
				s.fail("invalid UTF-8")
				return 0
			}
			i += n
		}
	}
}

func (s *Scanner) word(w string) {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		s.fail("invalid literal")
		return
	}
	s.i += len(w)
}

// number reads a number as JSON spells one.
func (s *Scanner) number() {
	lo := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !s.digits():
		s.i = lo
		s.fail("invalid number")
		return
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			s.i = lo
			s.fail("invalid number")
			return
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			s.i = lo
			s.fail("invalid number")
		}
	}
}

func (s *Scanner) digits() bool {
	lo := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > lo
}

// Str reads the value ahead: a string's span (with its quotes) and true,
// or, for any other value, skips it and returns false.
func (s *Scanner) Str() (Span, bool) {
	if s.Next() != String {
		s.Skip()
		return Span{}, false
	}
	lo := s.i
	s.str()
	if s.err != nil {
		return Span{}, false
	}
	return Span{lo, s.i}, true
}

// Int reads the value ahead: an integer in the range of int64, written
// without a fraction or an exponent, and true; for any other value
// (another number, a string, null) it skips it and returns false.
func (s *Scanner) Int() (int64, bool) {
	v := s.Skip()
	if !v.Set() {
		return 0, false
	}
	return ParseInt(s.b[v.Lo:v.Hi])
}

// ParseInt reads b as a JSON integer in the range of int64, as
// encoding/json decodes one into an int64: no fraction, no exponent.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true // -(1<<63) wraps to itself, as it should
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// describe names a byte for an error message.
func describe(c byte) string {
	if c >= 0x20 && c < utf8.RuneSelf {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
