// Package jsonscantest holds readers built on jsonscan to encoding/json:
// KeyFault tells, by encoding/json's own reading, whether a document has
// a key fault jsonscan refuses, so that a differential test of a reader
// against the encoding/json decoding it replaced can set those documents
// aside.
package jsonscantest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Paths are the names a reader decides by, by where they lie in a
// document: "" for the top-level object, a member's path and its name
// joined by a dot ("message.usage"), and "[]" after an array's path for
// its elements ("choices[].delta").
type Paths map[string][]string

// KeyFault reports whether doc, valid JSON, has in an object at one of
// paths one of its names twice, or a key that is not one of them but
// which encoding/json takes for one (another case, a Unicode fold) or a
// C parser does (cut at a NUL). A document that is not JSON has none.
func KeyFault(doc []byte, paths Paths) bool {
	if !json.Valid(doc) {
		return false
	}
	return faultAt(json.NewDecoder(bytes.NewReader(doc)), "", paths)
}

// unread is a path no name is read at.
const unread = "\x00"

// faultAt reads the value ahead in d, at path, for a key fault.
func faultAt(d *json.Decoder, path string, paths Paths) bool {
	t, err := d.Token()
	if err != nil {
		return false
	}
	fault := false
	switch t {
	case json.Delim('{'):
		names := paths[path]
		seen := map[string]bool{}
		for d.More() {
			k, _ := d.Token()
			key := k.(string)
			cut, _, _ := strings.Cut(key, "\x00")
			child := unread
			for _, name := range names {
				switch {
				case key == name && seen[name]:
					fault = true
				case key == name:
					seen[name] = true
					child = strings.TrimPrefix(path+"."+name, ".")
				case strings.EqualFold(cut, name):
					fault = true
				}
			}
			fault = faultAt(d, child, paths) || fault
		}
		d.Token()
	case json.Delim('['):
		next := unread
		if path != unread {
			next = path + "[]"
		}
		for d.More() {
			fault = faultAt(d, next, paths) || fault
		}
		d.Token()
	}
	return fault
}
