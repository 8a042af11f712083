package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzNames are names a fuzzed document's objects are read by: with
// letters that fold beyond ASCII (k to the Kelvin sign, s to the long s).
var fuzzNames = NewNames("model", "mcp_servers", "k", "Type", "a")

// walk reads any document through a Scanner, with fuzzNames at every
// object, and writes its tokens as tokens writes encoding/json's.
func walk(s *Scanner, out *strings.Builder) {
	switch s.Next() {
	case Object:
		out.WriteString("{")
		for m := s.Object(fuzzNames); m.Next(); {
			text, _ := AppendText(nil, s.Bytes(m.Key()))
			fmt.Fprintf(out, "%q:", text)
			walk(s, out)
		}
		out.WriteString("}")
	case Array:
		out.WriteString("[")
		for e := s.Array(); e.Next(); {
			walk(s, out)
		}
		out.WriteString("]")
	case String:
		if v, ok := s.Str(); ok {
			fmt.Fprintf(out, "%q,", s.Text(nil, v))
		}
	case Number:
		v := s.Skip()
		if !v.Set() {
			return
		}
		if n, ok := ParseInt(s.Bytes(v)); ok {
			fmt.Fprintf(out, "int %d,", n)
		} else {
			fmt.Fprintf(out, "%s,", s.Bytes(v))
		}
	default:
		v := s.Skip()
		if v.Set() {
			fmt.Fprintf(out, "%s,", s.Bytes(v))
		}
	}
}

// tokens writes doc's tokens as encoding/json's Decoder reads them, and
// reports whether an object gives one of fuzzNames twice or has a key
// that is not one of them but folds to one (as encoding/json matches a
// field) or is one cut at a NUL (as a C parser reads it).
func tokens(doc []byte, out *strings.Builder) (keyFault bool, err error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	type frame struct {
		object, key bool
		seen        map[string]bool
	}
	var stack []*frame
	for {
		t, err := d.Token()
		if err == io.EOF {
			return keyFault, nil
		}
		if err != nil {
			return keyFault, err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if t == json.Delim('}') {
				stack = stack[:len(stack)-1]
				out.WriteString("}")
				continue
			}
			k := t.(string)
			fmt.Fprintf(out, "%q:", k)
			top.key = false
			cut, _, _ := strings.Cut(k, "\x00")
			for _, name := range fuzzNames.names {
				switch {
				case k == name && top.seen[name]:
					keyFault = true
				case k == name:
					top.seen[name] = true
				case strings.EqualFold(cut, name):
					keyFault = true
				}
			}
			continue
		}
		if top != nil && top.object {
			top.key = true
		}
		switch t := t.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{object: true, key: true, seen: map[string]bool{}})
				out.WriteString("{")
			case '[':
				stack = append(stack, &frame{})
				out.WriteString("[")
			case ']':
				stack = stack[:len(stack)-1]
				out.WriteString("]")
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
			}
		case string:
			fmt.Fprintf(out, "%q,", t)
		case json.Number:
			if n, err := strconv.ParseInt(string(t), 10, 64); err == nil && !strings.ContainsAny(string(t), ".eE") {
				fmt.Fprintf(out, "int %d,", n)
			} else {
				fmt.Fprintf(out, "%s,", t)
			}
		case bool:
			fmt.Fprintf(out, "%v,", t)
		case nil:
			out.WriteString("null,")
		}
	}
}

// FuzzScannerReadsAsEncodingJSON holds a Scanner to encoding/json: the
// documents it accepts are those json.Valid accepts (and, strict, those
// that are also valid UTF-8), it reads their keys, strings and integers
// as encoding/json's Decoder does, and it refuses for a key exactly the
// documents with a name given twice in one object or a key that some
// parser reads as a name.
func FuzzScannerReadsAsEncodingJSON(f *testing.F) {
	for _, doc := range []string{
		`{"model":"gpt","messages":[{"role":"user","content":"hi"}],"stream":true,"n":1}`,
		`{"mod\u0065l":"x","Model":"y"}`, `{"k":1,"\u212a":2}`, `{"a":{"a":1,"a":2}}`,
		`{"model\u0000x":1}`, `[1,-0,2.5e-3,1e400,-9223372036854775808,9223372036854775808]`,
		`"\ud800\udc00\ud800"`, "{\"a\":\"\xff\"}", `{"a":1,}`, `[` + strings.Repeat(`[`, 20) + `]`,
		`{"type":"x","Type":"y"}`, `{"mcp_servers":[],"mcp_\u017fervers":[]}`, "\xef\xbb\xbf{}",
		`{"a":[{"a":1},{"a":2}]}`, ` {"a" : null } `, `tru`, `-`, `01`, `{"a":1}{"a":2}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		valid := json.Valid(doc)
		for _, strict := range []bool{false, true} {
			s := Scanner{Strict: strict}
			s.Reset(doc)
			var got strings.Builder
			walk(&s, &got)
			s.End()
			err := s.Err()
			var ke *KeyError
			if errors.As(err, &ke) {
				if !valid {
					continue // a key fault came first: the rest was not read
				}
				var want strings.Builder
				if fault, _ := tokens(doc, &want); !fault {
					t.Fatalf("strict %v: %q refused for %v, which encoding/json reads as no fault", strict, doc, err)
				}
				continue
			}
			wantValid := valid && (!strict || utf8.Valid(doc))
			if (err == nil) != wantValid {
				t.Fatalf("strict %v: %q: scanner says %v, encoding/json says valid %v", strict, doc, err, valid)
			}
			if err != nil {
				continue
			}
			var want strings.Builder
			fault, derr := tokens(doc, &want)
			if derr != nil {
				t.Fatalf("%q: the decoder failed on a valid document: %v", doc, derr)
			}
			if fault {
				t.Fatalf("strict %v: %q has a key fault the scanner let through", strict, doc)
			}
			if got.String() != want.String() {
				t.Fatalf("strict %v: %q read as\n%s\nencoding/json reads\n%s", strict, doc, got.String(), want.String())
			}
		}
	})
}
