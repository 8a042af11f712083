package reboundmcp

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestWithLoggerTakesTheCallsLine: a request written to a Transport's
// connection with WithLogger's context has its line logged there, not to
// Options.Logger, which has the lines of the requests written without it,
// as a connection shared by several clients tells them apart.
func TestWithLoggerTakesTheCallsLine(t *testing.T) {
	var own, theirs logBuffer
	conn, err := New(newFake(t).upstream(), Options{Logger: own.logger()}).Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func(ctx context.Context, id float64, method, params string) {
		t.Helper()
		rid, _ := jsonrpc.MakeID(id)
		if err := conn.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: json.RawMessage(params)}); err != nil {
			t.Fatal(err)
		}
		if msg, err := conn.Read(t.Context()); err != nil {
			t.Fatal(err)
		} else if resp, ok := msg.(*jsonrpc.Response); !ok || resp.ID != rid || resp.Error != nil {
			t.Fatalf("%s: %+v", method, msg)
		}
	}
	ask(t.Context(), 1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)
	ask(WithLogger(t.Context(), theirs.logger().With("tenant", "a")), 2, "tools/list", `{}`)
	if got := own.requests(t); len(got) != 1 || got[0]["method"] != "initialize" {
		t.Errorf("Options.Logger's lines %v, want initialize's alone", got)
	}
	if got := theirs.requests(t); len(got) != 1 || got[0]["method"] != "tools/list" || got[0]["tenant"] != "a" {
		t.Errorf("WithLogger's lines %v, want tools/list's, with its tenant", got)
	}
}
