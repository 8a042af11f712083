package reboundmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/rebound-go/rebound/internal/jsonscan"
)

// maxDepth is the nesting the SDK's JSON package refuses beyond.
const maxDepth = 1000

var (
	errTooDeep    = fmt.Errorf("a JSON value nested deeper than %d", maxDepth)
	errNotObject  = errors.New("a JSON-RPC message is a JSON object")
	errNoMethodID = errors.New("a message with neither a method nor an ID")
)

// messageNames are the members of a JSON-RPC message, and errorNames
// those of its error.
var (
	messageNames = jsonscan.NewNames("jsonrpc", "id", "method", "params", "result", "error")
	errorNames   = jsonscan.NewNames("code", "message", "data")
)

// DecodeMessage reads one JSON-RPC message, and is the one reader of
// messages on rebound's MCP side: NewLineConn reads each line with it, and
// rebound mcp's HTTP front each session's opening. It returns what the
// SDK's jsonrpc.DecodeMessage returns for data, the SDK's own types built
// the SDK's way, at a fraction of its cost: the SDK's JSON package makes
// a decoder with a 64 KB buffer for every message. Its keys are read by
// jsonscan's rules: a member given twice, or spelled another way ("ID",
// "jſonrpc"), is refused, where the SDK would take the last of them and
// another reader the first; otherwise it decodes as the SDK does, as FuzzDecodeMessageMatchesTheSDKs checks: what
// follows the first JSON value is ignored, and nesting deeper than 1000
// is refused anywhere in data.
func DecodeMessage(data []byte) (jsonrpc.Message, error) {
	w, err := readWire(data)
	if err != nil {
		return nil, err
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

// readWire reads data's members, whatever its version tag says.
func readWire(data []byte) (wire, error) {
	var w wire
	if tooDeep(data) {
		return w, errTooDeep
	}
	var s jsonscan.Scanner
	s.MaxDepth = maxDepth
	s.Reset(data)
	if s.Next() != jsonscan.Object {
		return w, errNotObject
	}
	for m := s.Object(messageNames); m.Next(); {
		v := s.Skip()
		if m.Name() == jsonscan.Other || !v.Set() {
			continue
		}
		if err := w.set(m.Name(), s.Bytes(v)); err != nil {
			return w, err
		}
	}
	if err := s.Err(); err != nil {
		return w, fmt.Errorf("not a JSON-RPC message: %w", err)
	}
	return w, nil
}

// wire is a message's members as the SDK's wireDecode holds them, the
// method still raw: present, even as "" or null, it makes a request.
type wire struct {
	version                string
	id                     jsonrpc.ID
	method, params, result json.RawMessage
	err                    *jsonrpc.Error
}

// set reads the member of messageNames' index i, of the valid JSON value
// value, into w as encoding/json would.
func (w *wire) set(i int, value []byte) (err error) {
	switch i {
	case 0: // jsonrpc
		if string(value) == `"2.0"` {
			w.version = "2.0"
			return nil
		}
		w.version, err = stringValue(value, w.version)
	case 1: // id
		w.id, err = idValue(value)
	case 2: // method
		w.method = bytes.Clone(value)
	case 3: // params
		w.params = bytes.Clone(value)
	case 4: // result
		w.result = bytes.Clone(value)
	case 5: // error
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
// would into a *jsonrpc.Error, its members read by jsonscan's rules.
func decodeWireError(value []byte, to **jsonrpc.Error) error {
	switch value[0] {
	case 'n':
		*to = nil
		return nil
	case '{':
	default:
		return fmt.Errorf("an error member that is not an object: %.20s", value)
	}
	e := &jsonrpc.Error{}
	*to = e
	var s jsonscan.Scanner
	s.Reset(value)
	for m := s.Object(errorNames); m.Next(); {
		v := s.Skip()
		var into any
		switch m.Name() {
		case 0:
			into = &e.Code
		case 1:
			into = &e.Message
		case 2:
			into = &e.Data
		default:
			continue
		}
		if err := json.Unmarshal(s.Bytes(v), into); err != nil {
			return err
		}
	}
	return s.Err()
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
