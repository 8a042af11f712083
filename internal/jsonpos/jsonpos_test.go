package jsonpos

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestErrorSaysTheLineAndColumnOfTheFault: a syntax error and a value of
// the wrong type are placed at the character encoding/json stopped on,
// columns counted in characters; an error with no offset is left as it is.
func TestErrorSaysTheLineAndColumnOfTheFault(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{"{\n  \"a\": 1,\n  \"b\": }\n", "line 3, column 8: invalid character '}' looking for beginning of value"},
		{`{"a":}`, "line 1, column 6: invalid character '}' looking for beginning of value"},
		{"{\"é\": 1,\n\"ü\": x}", "line 2, column 6: invalid character 'x' looking for beginning of value"},
		{"{\n\"a\": 1", "line 2, column 6: unexpected end of JSON input"},
		{"{\n  \"a\": \"text\"\n}", `line 2, column 13: json: cannot unmarshal string into Go struct field .A of type int`},
	} {
		var v struct{ A int }
		err := Error([]byte(c.data), json.Unmarshal([]byte(c.data), &v))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.data, err, c.want)
		}
	}
	other := errors.New(`json: unknown field "x"`)
	if got := Error([]byte(`{"x":1}`), other); got != other {
		t.Errorf("an error without an offset became %v", got)
	}
	var syntax *json.SyntaxError
	if err := Error([]byte("{"), json.Unmarshal([]byte("{"), new(any))); !errors.As(err, &syntax) {
		t.Errorf("%v does not wrap the *json.SyntaxError", err)
	}
}

// TestPositionClampsTheOffset: an offset outside the data is placed at
// its nearest end, never panics.
func TestPositionClampsTheOffset(t *testing.T) {
	for _, c := range []struct {
		offset       int64
		line, column int
	}{{-5, 1, 1}, {0, 1, 1}, {3, 1, 3}, {4, 2, 1}, {99, 2, 1}} {
		if l, col := Position([]byte("abc\nd"), c.offset); l != c.line || col != c.column {
			t.Errorf("offset %d: line %d column %d, want %d %d", c.offset, l, col, c.line, c.column)
		}
	}
}
