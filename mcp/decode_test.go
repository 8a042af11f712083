package reboundmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/rebound-go/rebound/internal/jsonscan"
	"github.com/rebound-go/rebound/internal/jsonscan/jsonscantest"
)

// decodeSeeds are messages of every kind, and the odd inputs on which a
// decoder built on encoding/json would part from the SDK's.
var decodeSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	`{"jsonrpc":"2.0","id":"abc","result":{"content":[{"type":"text","text":"hi"}]}}`,
	`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found","data":{"x":1}}}`,
	`{"jsonrpc":"2.0","id":7,"error":null}`,
	`{"jsonrpc":"2.0","id":7,"result":null}`,
	`{"jsonrpc":"2.0","id":7}`,
	`{"jsonrpc":"2.0","id":null,"method":"x"}`,
	`{"jsonrpc":"2.0","id":null,"result":1}`,
	`{"jsonrpc":"2.0","method":""}`,
	`{"jsonrpc":"2.0","method":null,"id":1}`,
	`{"jsonrpc":"2.0","method":1,"id":1}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"x"}`,
	`{"jsonrpc":"2.0","id":-0,"method":"x"}`,
	`{"jsonrpc":"2.0","id":1e3,"method":"x"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"x"}`,
	`{"jsonrpc":"2.0","id":9223372036854775807,"method":"x"}`,
	`{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"x"}`,
	`{"jsonrpc":"2.0","id":true,"method":"x"}`,
	`{"jsonrpc":"2.0","id":{"a":1},"method":"x"}`,
	`{"jsonrpc":"2.0","id":[1],"method":"x"}`,
	`{"jsonrpc":"2.0","id":"","method":"x"}`,
	`{"JSONRPC":"2.0","id":1,"method":"x"}`,
	`{"jsonrpc":"2.0","ID":1,"method":"x"}`,
	`{"jsonrpc":"2.0","id":1,"Method":"x"}`,
	`{"jsonrpc":"2.0","id":1,"method":"x","Params":{}}`,
	`{"jsonrpc":"2.0","id":1,"Result":{}}`,
	`{"jsonrpc":"2.0","id":1,"Error":{"code":1,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"Code":1,"MESSAGE":"m","Data":2}}`,
	`{"jsonrpc":"2.0","id":1,"methoD":"x","method":"y"}`,
	`{"json\u0072pc":"2.0","\u0069d":1,"method":"x"}`,
	`{"jſonrpc":"2.0","id":1,"method":"x"}`,
	`{"jsonrpc":"2.0","id":1,"method":"x","method":"y"}`,
	`{"jsonrpc":"2.0","id":1,"id":"two","method":"x"}`,
	`{"jsonrpc":"2.0","jsonrpc":null,"id":1,"method":"x"}`,
	`{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"x"}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":1},"error":{"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":1},"error":null}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":1e2,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"error":"boom"}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":null,"message":null,"data":null}}`,
	`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"x","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"x","params":[1,2]}`,
	`{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}`,
	`{"jsonrpc":"2.0","id":1,"method":"x"} trailing`,
	`{"jsonrpc":"2.0","id":1,"method":"x"}}`,
	`  {"jsonrpc":"2.0","id":1,"method":"x"}  `,
	`{"jsonrpc":"2.0","id":1,"method":"x"`,
	`{"jsonrpc":"2.0","id":1,"method":"\ud800"}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
	"{\"jsonrpc\":\"2.0\",\"id\":\"\xfe\",\"result\":1}",
	`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\u00e9"}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"x"}]`,
	`{"jsonrpc":2.0,"id":1,"method":"x"}`,
	`{}`,
	`null`,
	`1`,
	`"s"`,
	``,
	`{"jsonrpc":"2.0","id":1,"method":"x","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
	`{"jsonrpc":"2.0","id":1,"method":"x"}` + strings.Repeat("[", 1001),
}

// messagePaths are the names DecodeMessage decides by.
var messagePaths = jsonscantest.Paths{
	"":      {"jsonrpc", "id", "method", "params", "result", "error"},
	"error": {"code", "message", "data"},
}

// keyFault reports whether the first JSON value of data gives a member of
// a message twice, or spells one another way.
func keyFault(data []byte) bool {
	var first json.RawMessage
	if json.NewDecoder(bytes.NewReader(data)).Decode(&first) != nil {
		return false
	}
	return jsonscantest.KeyFault(first, messagePaths)
}

// FuzzDecodeMessageMatchesTheSDKs checks that DecodeMessage succeeds and
// fails where jsonrpc.DecodeMessage does, and returns what it returns;
// but a message that gives a member twice, or spells one another way,
// which the SDK reads, it refuses.
func FuzzDecodeMessageMatchesTheSDKs(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := jsonrpc.DecodeMessage(bytes.Clone(data))
		got, gotErr := DecodeMessage(bytes.Clone(data))
		fault := keyFault(data)
		if errors.Is(gotErr, jsonscan.ErrDuplicateKey) || errors.Is(gotErr, jsonscan.ErrKeySpelling) {
			if !fault && wantErr == nil { // invalid further on, it is refused either way
				t.Fatalf("%q: refused for a key (%v), which has no fault", data, gotErr)
			}
			return
		}
		if fault && gotErr == nil {
			t.Fatalf("%q: a key given twice or spelled another way, read as %#v", data, got)
		}
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: the SDK's error %v, ours %v", data, wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: the SDK decodes %#v, we %#v", data, want, got)
		}
		wantWire, err := jsonrpc.EncodeMessage(want)
		if err != nil {
			return // the SDK cannot encode what it decoded: nothing to compare
		}
		gotWire, err := jsonrpc.EncodeMessage(got)
		if err != nil || !bytes.Equal(gotWire, wantWire) {
			t.Fatalf("%q: the SDK's message encodes as %s, ours as %s (%v)", data, wantWire, gotWire, err)
		}
	})
}

// BenchmarkDecodeMessage decodes a tools/call request and its answer,
// with the SDK's decoder and with ours.
func BenchmarkDecodeMessage(b *testing.B) {
	msgs := [][]byte{
		[]byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`),
		[]byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"hello"}]}}`),
	}
	for _, d := range []struct {
		name   string
		decode func([]byte) (jsonrpc.Message, error)
	}{{"sdk", jsonrpc.DecodeMessage}, {"ours", DecodeMessage}} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := d.decode(msgs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRefusalAnswerReadsTheRequestAsDecodeMessageDoes: a server's refusal
// of a request becomes an error under the request's ID as DecodeMessage
// reads it, the server's own error if its body has one; a request whose ID
// two readers would read apart ("ID", an id given twice), a notification
// and an answer get none.
func TestRefusalAnswerReadsTheRequestAsDecodeMessageDoes(t *testing.T) {
	theirs := `{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"no such tool"}}`
	for _, c := range []struct{ sent, head, want string }{
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call"}`, theirs, `{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"no such tool"}}`},
		{`{"jsonrpc":"2.0","id":"a","method":"x"}`, "refused\n", `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"HTTP 400 Bad Request: refused"}}`},
		{`{"jsonrpc":"2.0","ID":4,"method":"tools/call"}`, theirs, ""},
		{`{"jsonrpc":"2.0","id":4,"id":5,"method":"tools/call"}`, theirs, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, theirs, ""},
		{`{"jsonrpc":"2.0","id":4,"result":{}}`, theirs, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(c.sent))
		resp := &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request"}
		if got := string(refusalAnswer(req, resp, []byte(c.head))); got != c.want {
			t.Errorf("%s refused with %s: answered %s, want %s", c.sent, c.head, got, c.want)
		}
	}
}
