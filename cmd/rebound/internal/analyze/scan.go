package analyze

import "unicode/utf8"

// parseInt parses a JSON number that strconv.ParseInt would accept.
func parseInt(v []byte) (int64, bool) {
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
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

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// String flags.
const (
	strEscaped = 1 << iota // holds a backslash escape
	strHigh                // holds a byte beyond ASCII
)

// scanString checks the string starting at b[i] == '"' and returns the
// index just past its closing quote.
func scanString(b []byte, i int) (end int, flags uint8, err error) {
	for i++; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, flags, nil
		case c < 0x20:
			return 0, 0, errSyntax
		case c >= utf8.RuneSelf:
			flags |= strHigh
		case c == '\\':
			flags |= strEscaped
			i++
			if i == len(b) {
				return 0, 0, errSyntax
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, 0, errSyntax
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, 0, errSyntax
					}
				}
				i += 4
			default:
				return 0, 0, errSyntax
			}
		}
	}
	return 0, 0, errSyntax
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipValue checks the value starting at b[i], at nesting depth depth
// (the enclosing object is depth 1), and returns the index just past it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i == len(b) {
		return 0, errSyntax
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '{' || c == '[':
		if depth+1 > maxDepth {
			return 0, errSyntax
		}
		return skipContainer(b, i, depth+1)
	case c == '-' || '0' <= c && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return 0, errSyntax
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// skipContainer checks the object or array starting at b[i].
func skipContainer(b []byte, i, depth int) (int, error) {
	obj := b[i] == '{'
	closer := byte(']')
	if obj {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1, nil
	}
	for {
		var err error
		if obj {
			if i == len(b) || b[i] != '"' {
				return 0, errSyntax
			}
			if i, _, err = scanString(b, i); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if i == len(b) || b[i] != ':' {
				return 0, errSyntax
			}
			i = skipSpace(b, i+1)
		}
		if i, err = skipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = skipSpace(b, i)
		if i == len(b) {
			return 0, errSyntax
		}
		if b[i] == closer {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, errSyntax
		}
		i = skipSpace(b, i+1)
	}
}

// scanNumber checks the number starting at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return 0, errSyntax
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, errSyntax
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, errSyntax
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, errSyntax
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
