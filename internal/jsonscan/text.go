package jsonscan

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text returns the text of the string at v, a span the scanner read: its
// bytes in place when it has no escapes and is valid UTF-8, else its text
// appended to dst, as encoding/json decodes it (see AppendText).
func (s *Scanner) Text(dst []byte, v Span) []byte {
	q := s.b[v.Lo:v.Hi]
	if isPlain(q) {
		return q[1 : len(q)-1]
	}
	text, _ := AppendText(dst, q)
	return text
}

// isPlain reports whether a quoted string's text is its bytes.
func isPlain(q []byte) bool {
	ascii := true
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			return false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	return ascii || utf8.Valid(q)
}

// AppendText appends to dst the text of q, a string a Scanner read, with
// its quotes, as encoding/json decodes it: escapes resolved, a pair of
// escaped surrogates joined, and a lone surrogate or invalid UTF-8 read
// as U+FFFD. whole reports that there was no lone surrogate, which
// parsers read differently (Python's json keeps the surrogate itself).
func AppendText(dst, q []byte) (text []byte, whole bool) {
	q = q[1 : len(q)-1]
	whole = true
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\':
			r, next, lone := unescapeAt(q, i)
			whole = whole && !lone
			dst = utf8.AppendRune(dst, r)
			i = next
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(q) && q[j] != '\\' && q[j] < utf8.RuneSelf {
				j++
			}
			dst = append(dst, q[i:j]...)
			i = j
		default:
			r, n := utf8.DecodeRune(q[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst, whole
}

// unescapeAt reads the escape at q[i], valid as a Scanner checked it,
// and returns the rune it stands for and the index after it: after both
// halves of a surrogate pair. A lone surrogate is read as U+FFFD, and
// reported.
func unescapeAt(q []byte, i int) (r rune, next int, lone bool) {
	switch q[i+1] {
	case 'b':
		return '\b', i + 2, false
	case 'f':
		return '\f', i + 2, false
	case 'n':
		return '\n', i + 2, false
	case 'r':
		return '\r', i + 2, false
	case 't':
		return '\t', i + 2, false
	case 'u':
		r := hex4(q[i+2 : i+6])
		i += 6
		if !utf16.IsSurrogate(r) {
			return r, i, false
		}
		if i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' {
			if r2 := hex4(q[i+2 : i+6]); r2 >= 0 {
				if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
					return d, i + 6, false
				}
			}
		}
		return unicode.ReplacementChar, i, true
	}
	return rune(q[i+1]), i + 2, false // " \ /
}
