package reboundmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxDepth is the nesting the SDK's JSON package refuses beyond.
const maxDepth = 1000

var (
	errTooDeep    = fmt.Errorf("a JSON value nested deeper than %d", maxDepth)
	errNotObject  = errors.New("a JSON-RPC message is a JSON object")
	errNoMethodID = errors.New("a message with neither a method nor an ID")
)

// decodeMessage returns what jsonrpc.DecodeMessage returns for data, the
// SDK's own types built the SDK's way, at a fraction of its cost: the
// SDK's JSON package makes a decoder with a 64 KB buffer for every
// message. Its rules are the SDK's, as FuzzDecodeMessageMatchesTheSDKs
// checks: keys match case-sensitively (encoding/json's case-insensitive
// matching is bypassed by reading the object's members here), the last
// of a repeated key wins, what follows the first JSON value is ignored,
// and nesting deeper than 1000 is refused anywhere in data.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	if tooDeep(data) {
		return nil, errTooDeep
	}
	obj, err := firstObject(data)
	if err != nil {
		return nil, err
	}
	var w wire
	for m := (members{b: obj}); m.next(); {
		if err := w.set(m.key(), m.value); err != nil {
			return nil, err
		}
	}
	if w.version != "2.0" {
		return nil, fmt.Errorf(`invalid message version tag %q; expected "2.0"`, w.version)
	}
	if len(w.method) > 0 {
		name, err := stringValue(w.method, "")
		if err != nil {
			return nil, err
		}
		return &jsonrpc.Request{ID: w.id, Method: name, Params: w.params}, nil
	}
	if !w.id.IsValid() {
		return nil, errNoMethodID
	}
	resp := &jsonrpc.Response{ID: w.id, Result: w.result}
	if w.err != nil {
		resp.Error = w.err
	}
	return resp, nil
}

// wire is a message's members as the SDK's wireDecode holds them, the
// method still raw: present, even as "" or null, it makes a request.
type wire struct {
	version                string
	id                     jsonrpc.ID
	method, params, result json.RawMessage
	err                    *jsonrpc.Error
}

// set reads the member key: value into w as encoding/json would, the
// last of a repeated key winning; keys the SDK does not know are
// ignored.
func (w *wire) set(key, value []byte) (err error) {
	switch string(key) {
	case "jsonrpc":
		if string(value) == `"2.0"` {
			w.version = "2.0"
			return nil
		}
		w.version, err = stringValue(value, w.version)
	case "id":
		w.id, err = idValue(value)
	case "method":
		w.method = bytes.Clone(value)
	case "params":
		w.params = bytes.Clone(value)
	case "result":
		w.result = bytes.Clone(value)
	case "error":
		err = decodeWireError(value, &w.err)
	}
	return err
}

// stringValue reads a JSON string as encoding/json would into a string
// holding prev (which a null leaves as it was).
func stringValue(value []byte, prev string) (string, error) {
	if plain(value) {
		return string(value[1 : len(value)-1]), nil
	}
	s := prev
	err := json.Unmarshal(value, &s)
	return s, err
}

// plain says whether value is a JSON string of printable ASCII without
// escapes: its bytes between the quotes are its text.
func plain(value []byte) bool {
	if len(value) < 2 || value[0] != '"' {
		return false
	}
	for _, c := range value[1 : len(value)-1] {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// idValue reads an ID as the SDK does: encoding/json's reading into an
// any (a number a float64) given to jsonrpc.MakeID.
func idValue(value []byte) (jsonrpc.ID, error) {
	switch c := value[0]; {
	case c == 'n':
		return jsonrpc.ID{}, nil
	case c == '"':
		s, err := stringValue(value, "")
		if err != nil {
			return jsonrpc.ID{}, err
		}
		return jsonrpc.MakeID(s)
	case c == '-' || c >= '0' && c <= '9':
		f, err := strconv.ParseFloat(string(value), 64)
		if err != nil {
			return jsonrpc.ID{}, fmt.Errorf("an ID out of range: %.40s", value)
		}
		return jsonrpc.MakeID(f)
	}
	return jsonrpc.ID{}, fmt.Errorf("an ID neither a string nor a number: %.40s", value)
}

// decodeWireError reads an "error" member into *to as encoding/json
// would into a *jsonrpc.Error, its keys matched case-sensitively.
func decodeWireError(value []byte, to **jsonrpc.Error) error {
	switch value[0] {
	case 'n':
		*to = nil
		return nil
	case '{':
	default:
		return fmt.Errorf("an error member that is not an object: %.20s", value)
	}
	if *to == nil {
		*to = &jsonrpc.Error{}
	}
	e := *to
	for m := (members{b: value}); m.next(); {
		var into any
		switch string(m.key()) {
		case "code":
			into = &e.Code
		case "message":
			into = &e.Message
		case "data":
			into = &e.Data
		default:
			continue
		}
		if err := json.Unmarshal(m.value, into); err != nil {
			return err
		}
	}
	return nil
}

// tooDeep says whether data nests objects and arrays deeper than
// maxDepth, counted as the SDK's JSON package counts: over all of data,
// strings skipped.
func tooDeep(data []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}

// firstObject returns the JSON object data starts with, checked valid;
// what follows it is ignored.
func firstObject(data []byte) ([]byte, error) {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return nil, errNotObject
	}
	obj := data[:skipValue(data, 0)]
	if !json.Valid(obj) {
		return nil, fmt.Errorf("not a JSON object: %.40q", obj)
	}
	return obj, nil
}

// members walks the members of a valid JSON object b.
type members struct {
	b     []byte
	i     int
	k     []byte // the key, quoted
	value []byte
}

// next moves to the next member, and says whether there is one.
func (m *members) next() bool {
	if m.i == 0 {
		m.i = 1 // past '{'
	}
	m.i = skipSpace(m.b, m.i)
	if m.b[m.i] == ',' {
		m.i = skipSpace(m.b, m.i+1)
	}
	if m.b[m.i] == '}' {
		return false
	}
	end := skipString(m.b, m.i)
	m.k = m.b[m.i:end]
	m.i = skipSpace(m.b, end)
	m.i = skipSpace(m.b, m.i+1) // past ':'
	end = skipValue(m.b, m.i)
	m.value = m.b[m.i:end]
	m.i = end
	return true
}

// key returns the member's key, unquoted.
func (m *members) key() []byte {
	if bytes.IndexByte(m.k, '\\') < 0 {
		return m.k[1 : len(m.k)-1]
	}
	var s string
	_ = json.Unmarshal(m.k, &s) // valid: checked with the object
	return []byte(s)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the JSON value that starts at b[i],
// or, for what is not valid JSON, some index json.Valid then refuses.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && bytes.IndexByte([]byte(",}] \t\r\n"), b[i]) < 0 {
		i++
	}
	return i
}
