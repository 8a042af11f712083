package proxy

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects a body may have:
// encoding/json's own bound.
const maxDepth = 10000

// strictBody is what scanStrict found in a strict JSON document.
type strictBody struct {
	// modelKeys counts the top-level keys a common parser may take for
	// "model": the key itself, escaped or not, in any case, or cut at a
	// NUL (C parsers).
	modelKeys int
	// variant is set when one of them is not "model" once unescaped:
	// Go's encoding/json takes "Model" for a field Model, Python's json
	// does not.
	variant bool
	// start and end are the span of the last model key's value, -1 when
	// there is none; str reports whether that value is a string.
	start, end int
	str        bool
}

// syntaxError says where and why a body is not strict JSON.
type syntaxError struct {
	offset int
	reason string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("the request body is not strict JSON (RFC 8259): %s at byte %d", e.reason, e.offset)
}

// scanStrict checks that b is one JSON text as RFC 8259 has it, and
// nothing else: UTF-8 throughout, no NaN or Infinity, no leading zeros,
// no trailing commas or bytes, escapes and control characters as the
// grammar says, nesting at most maxDepth deep. It reads b in place,
// copying nothing, and notes the top-level keys a parser may take for
// "model" and the span of the value of the last one.
func scanStrict(b []byte) (strictBody, error) {
	sb := strictBody{start: -1, end: -1}
	var objects [maxDepth/64 + 1]uint64 // bit d set: the container at depth d+1 is an object
	depth := 0
	inObject := func() bool { return objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0 }
	fail := func(i int, reason string) (strictBody, error) {
		return strictBody{}, &syntaxError{offset: i, reason: reason}
	}
	modelValue := false // the value about to be read is a top-level model key's
	i := skipSpace(b, 0)
	value := true // a value comes next; otherwise what follows one
	for {
		if value {
			if i >= len(b) {
				return fail(i, "unexpected end")
			}
			start := i
			switch c := b[i]; {
			case c == '{' || c == '[':
				if modelValue {
					sb.start, sb.end, sb.str = start, start+1, false
					modelValue = false
				}
				if depth == maxDepth {
					return fail(i, "nesting too deep")
				}
				depth++
				bit := uint64(1) << ((depth - 1) % 64)
				objects[(depth-1)/64] &^= bit
				if c == '{' {
					objects[(depth-1)/64] |= bit
				}
				i = skipSpace(b, i+1)
				switch {
				case i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']'):
					depth--
					i++
					value = false
				case c == '{':
					var err error
					if i, modelValue, err = scanKey(b, i, depth, &sb); err != nil {
						return strictBody{}, err
					}
				}
				continue
			case c == '"':
				end, _, err := scanString(b, i)
				if err != nil {
					return strictBody{}, err
				}
				i = end
			case c == 't':
				if !bytes.HasPrefix(b[i:], []byte("true")) {
					return fail(i, "invalid literal")
				}
				i += 4
			case c == 'f':
				if !bytes.HasPrefix(b[i:], []byte("false")) {
					return fail(i, "invalid literal")
				}
				i += 5
			case c == 'n':
				if !bytes.HasPrefix(b[i:], []byte("null")) {
					return fail(i, "invalid literal")
				}
				i += 4
			case c == '-' || '0' <= c && c <= '9':
				end, err := scanNumber(b, i)
				if err != nil {
					return strictBody{}, err
				}
				i = end
			default:
				return fail(i, fmt.Sprintf("unexpected %s", describeByte(c)))
			}
			if modelValue {
				sb.start, sb.end, sb.str = start, i, b[start] == '"'
				modelValue = false
			}
			value = false
			continue
		}
		i = skipSpace(b, i)
		if depth == 0 {
			if i != len(b) {
				return fail(i, "data after the JSON value")
			}
			return sb, nil
		}
		if i >= len(b) {
			return fail(i, "unexpected end")
		}
		obj := inObject()
		switch c := b[i]; {
		case c == ',':
			i = skipSpace(b, i+1)
			if obj {
				var err error
				if i, modelValue, err = scanKey(b, i, depth, &sb); err != nil {
					return strictBody{}, err
				}
			}
			value = true
		case obj && c == '}', !obj && c == ']':
			depth--
			i++
		case obj:
			return fail(i, `expected "," or "}"`)
		default:
			return fail(i, `expected "," or "]"`)
		}
	}
}

// scanKey reads an object's key at b[i] and the colon after it, and
// returns where its value starts. At depth 1 (the top-level object) it
// counts the key in sb if a parser may take it for "model", and reports
// whether it did.
func scanKey(b []byte, i, depth int, sb *strictBody) (next int, model bool, err error) {
	if i >= len(b) || b[i] != '"' {
		return 0, false, &syntaxError{offset: i, reason: "expected a key"}
	}
	end, escaped, err := scanString(b, i)
	if err != nil {
		return 0, false, err
	}
	if depth == 1 {
		if like, exact := modelKey(b[i+1:end-1], escaped); like {
			model = true
			sb.modelKeys++
			sb.variant = sb.variant || !exact
		}
	}
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return 0, false, &syntaxError{offset: i, reason: `expected ":" after a key`}
	}
	return skipSpace(b, i+1), model, nil
}

// modelKey reports whether a key, as it is written between its quotes,
// may be taken for "model" by a common parser: unescaped, it is "model"
// in any case (Go's encoding/json folds case), or that cut at a NUL (C
// parsers); exact reports that it is "model" itself.
func modelKey(raw []byte, escaped bool) (like, exact bool) {
	if !escaped {
		return len(raw) == 5 && bytes.EqualFold(raw, []byte("model")), string(raw) == "model"
	}
	if len(raw) > 5*len(`\uffff`) {
		return false, false // five runes, each escaped, are at most this long
	}
	var buf [5 * len(`\uffff`)]byte
	key, _ := unescape(buf[:0], raw)
	exact = string(key) == "model"
	if n := bytes.IndexByte(key, 0); n >= 0 {
		key = key[:n]
	}
	return bytes.EqualFold(key, []byte("model")), exact
}

// plain marks the bytes a string holds as they are: printable ASCII but
// for the quote and the backslash.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString reads the string whose opening quote is b[i], and returns
// the index after its closing quote and whether it holds escapes.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
	start := i
	for i++; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			switch c {
			case '"':
				return i + 1, escaped, nil
			case '\\':
				escaped = true
				if i+1 >= len(b) {
					return 0, false, &syntaxError{offset: i, reason: "unterminated string"}
				}
				switch b[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i += 2
				case 'u':
					if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
						return 0, false, &syntaxError{offset: i, reason: `invalid \\u escape`}
					}
					i += 6
				default:
					return 0, false, &syntaxError{offset: i, reason: "invalid escape"}
				}
			default:
				return 0, false, &syntaxError{offset: i, reason: "control character in a string"}
			}
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, false, &syntaxError{offset: i, reason: "invalid UTF-8"}
		}
		i += size
	}
	return 0, false, &syntaxError{offset: start, reason: "unterminated string"}
}

// scanNumber reads the number at b[i] and returns the index after it.
func scanNumber(b []byte, i int) (int, error) {
	start := i
	digits := func() bool {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return 0, &syntaxError{offset: start, reason: "invalid number"}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, &syntaxError{offset: start, reason: "invalid number"}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, &syntaxError{offset: start, reason: "invalid number"}
		}
	}
	return i, nil
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func hexValue(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unescape appends to dst the text of a string scanString has checked,
// as written between its quotes; whole reports that it held no lone
// surrogate (\ud800 alone), which parsers read differently (Go's as
// U+FFFD, Python's as the surrogate itself).
func unescape(dst, raw []byte) (text []byte, whole bool) {
	whole = true
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hexValue(raw[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r = utf16.DecodeRune(r, hexValue(raw[i+2:i+6])); r != utf8.RuneError {
						i += 6
					}
				} else {
					r = utf8.RuneError
				}
				if r == utf8.RuneError {
					whole = false
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst, whole
}

// describeByte names a byte for an error message.
func describeByte(c byte) string {
	if c >= 0x20 && c < utf8.RuneSelf {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
