package reboundmcp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestToolCallNamingItsToolTwiceIsRefusedUnsent: a tools/call whose
// params give the tool's name twice, or under a second spelling, is
// answered -32600 by rebound and never reaches the server, which might
// run another tool than the one the rules judged ({"name":"write",
// "Name":"read"} was judged as the read-only read, and run as write,
// twice if cut by a crash). The next request goes through as usual.
func TestToolCallNamingItsToolTwiceIsRefusedUnsent(t *testing.T) {
	for i, params := range []string{
		`{"name":"write","Name":"read","arguments":{}}`,
		`{"Name":"read","name":"write","arguments":{}}`,
		`{"name":"read","name":"write","arguments":{}}`,
		`{"name":"write","n\u0061me":"read","arguments":{}}`,
		`{"name":"write","nam\u0065\u0000":"read","arguments":{}}`,
		`{"name":"write","_meta":{"progressToken":1,"ProgressToken":2}}`,
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScripted()
				conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
				defer conn.Close()
				sc := <-s.starts
				rawRequest(t, conn, 1, "tools/call", params)
				r := readResponse(t, conn)
				if r.Error == nil || r.ID.Raw() != int64(1) {
					t.Fatalf("%s: answered %+v, want an error", params, r)
				}
				var werr *jsonrpc.Error
				if !asWireError(r.Error, &werr) || werr.Code != jsonrpc.CodeInvalidRequest {
					t.Fatalf("%s: answered %v, want -32600", params, r.Error)
				}
				rawRequest(t, conn, 2, "ping", "{}")
				if got := sc.next(t); got["method"] != "ping" {
					t.Fatalf("%s: the server was sent %v first, want the ping", params, got)
				}
			})
		})
	}
}

func asWireError(err error, to **jsonrpc.Error) bool {
	e, ok := err.(*jsonrpc.Error)
	*to = e
	return ok
}

// TestListedToolWithAHintSpelledTwiceIsNotTrusted: a listed tool whose
// entry gives a name or a hint twice, or spells one another way, is left
// out of what rebound knows, so a call of it cut short is not sent again;
// a tool listed plainly keeps its hints.
func TestListedToolWithAHintSpelledTwiceIsNotTrusted(t *testing.T) {
	items := []json.RawMessage{
		json.RawMessage(`{"name":"plain","annotations":{"readOnlyHint":true}}`),
		json.RawMessage(`{"name":"escaped","annot\u0061tions":{"idempotentHint":true}}`),
		json.RawMessage(`{"name":"folded","annotations":{"readOnlyHint":false,"ReadOnlyHint":true}}`),
		json.RawMessage(`{"name":"twice","annotations":{"readOnlyHint":false,"readOnlyHint":true}}`),
		json.RawMessage(`{"name":"write","Name":"read","annotations":{"readOnlyHint":true}}`),
		json.RawMessage(`{"name":"typed","annotations":{"readOnlyHint":"yes"}}`),
		json.RawMessage(`{"name":"nulled","annotations":null}`),
	}
	got := annotations(items)
	if a := got["plain"]; a == nil || !a.ReadOnlyHint {
		t.Errorf("plain: %+v, want read-only", a)
	}
	if a := got["escaped"]; a == nil || !a.IdempotentHint {
		t.Errorf("escaped: %+v, want idempotent", a)
	}
	if a := got["nulled"]; a == nil || a.ReadOnlyHint || a.IdempotentHint {
		t.Errorf("nulled: %+v, want known, with no hint", a)
	}
	for _, name := range []string{"folded", "twice", "write", "read", "typed"} {
		if a, ok := got[name]; ok {
			t.Errorf("%s: known as %+v, want left out", name, a)
		}
	}
}

// TestLineGivingAMemberTwiceIsAnsweredInvalidRequest: over stdio, a
// client's line that gives a member of the message twice or spells one
// another way ({"id":1,"id":2}, "Method") is answered -32600 with a null
// ID, never sent on, and the next line is served as usual.
func TestLineGivingAMemberTwiceIsAnsweredInvalidRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		clientEnd, serveEnd := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- Serve(t.Context(), NewLineConn(serveEnd, serveEnd), New(s.upstream(), Options{})) }()
		sc := <-s.starts
		answers := bufio.NewScanner(clientEnd)
		for _, line := range []string{
			`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"write"}}`,
			`{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"write"}}`,
			`{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}`,
		} {
			io.WriteString(clientEnd, line+"\n")
			if !answers.Scan() {
				t.Fatal("no answer")
			}
			var r struct {
				ID    any `json:"id"`
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(answers.Bytes(), &r); err != nil || r.ID != nil || r.Error.Code != -32600 {
				t.Fatalf("%s: answered %s, want -32600 with a null ID", line, answers.Bytes())
			}
		}
		io.WriteString(clientEnd, `{"jsonrpc":"2.0","id":3,"method":"ping"}`+"\n")
		if got := sc.next(t); got["method"] != "ping" {
			t.Fatalf("the server was sent %v first, want the ping", got)
		}
		clientEnd.Close()
		sc.conn.Close()
		<-served
	})
}
