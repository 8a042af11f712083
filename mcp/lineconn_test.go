package reboundmcp

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestLineConnSkipsPastAnUnreadableLine(t *testing.T) {
	in := "this is not JSON\n\n{\"foo\":1}\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	c := NewLineConn(strings.NewReader(in), &bytes.Buffer{})
	for range 2 {
		var bad *lineError
		if _, err := c.Read(t.Context()); !errors.As(err, &bad) {
			t.Fatalf("Read = %v; want the bad line reported", err)
		}
	}
	msg, err := c.Read(t.Context())
	if req, ok := msg.(*jsonrpc.Request); err != nil || !ok || req.Method != "ping" {
		t.Fatalf("after the bad lines: %#v, %v; want the ping", msg, err)
	}
}

func TestLineConnReadsAValueThatSpansLinesAndALastLineWithoutNewline(t *testing.T) {
	in := "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {}\n}\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	c := NewLineConn(strings.NewReader(in), &bytes.Buffer{})
	if msg, err := c.Read(t.Context()); err != nil || msg.(*jsonrpc.Response).ID.Raw() != int64(1) {
		t.Fatalf("the pretty-printed answer: %#v, %v", msg, err)
	}
	if msg, err := c.Read(t.Context()); err != nil || msg.(*jsonrpc.Request).Method != "notifications/initialized" {
		t.Fatalf("the last line: %#v, %v", msg, err)
	}
	if _, err := c.Read(t.Context()); err == nil {
		t.Fatal("Read after the last line: no error")
	}
}

func TestLineConnAnswersABatchInOneLine(t *testing.T) {
	in := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n"
	var out bytes.Buffer
	c := NewLineConn(strings.NewReader(in), &out)
	var ids []jsonrpc.ID
	for range 3 {
		msg, err := c.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if req := msg.(*jsonrpc.Request); req.IsCall() {
			ids = append(ids, req.ID)
		}
	}
	for i := len(ids) - 1; i >= 0; i-- { // answered out of order
		if out.Len() != 0 {
			t.Fatalf("wrote %q before the batch was answered whole", out.String())
		}
		if err := c.Write(t.Context(), &jsonrpc.Response{ID: ids[i], Result: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	want := `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]` + "\n"
	if out.String() != want {
		t.Errorf("wrote %q, want %q", out.String(), want)
	}
}
