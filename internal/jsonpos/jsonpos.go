// Package jsonpos says where in a file a JSON decoding error is, as the
// person editing the file counts: a line and a column. encoding/json
// gives a byte offset, which nobody can find in an editor; every config
// file rebound reads (the proxy's, rebound mcp's) reports its errors
// through this one package, so that they all point the same way.
package jsonpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Position returns the line and column, both from 1, of the byte that
// ends the first offset bytes of data: where encoding/json stopped, as
// its errors' Offset says. The column counts characters, not bytes.
func Position(data []byte, offset int64) (line, column int) {
	n := int(min(max(offset, 0), int64(len(data))))
	before := data[:n]
	start := bytes.LastIndexByte(before, '\n') + 1
	return 1 + bytes.Count(before, []byte("\n")), max(1, utf8.RuneCount(before[start:]))
}

// Error returns err, a decoding error from data, led by its line and
// column ("line 3, column 14: invalid character ..."), when it carries an
// offset (a *json.SyntaxError or a *json.UnmarshalTypeError); any other
// error is returned as it is. The result wraps err.
func Error(data []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var offset int64
	switch {
	case errors.As(err, &syntax):
		offset = syntax.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	default:
		return err
	}
	line, column := Position(data, offset)
	return fmt.Errorf("line %d, column %d: %w", line, column, err)
}
