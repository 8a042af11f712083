package reboundmcp_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// A connection in the SDK's stdio framing, read on the caller's
// goroutine: a line that is not JSON-RPC is reported, and the next line
// read as if it had not come.
func ExampleNewLineConn() {
	in := strings.NewReader("not JSON at all\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	conn := reboundmcp.NewLineConn(in, os.Stdout)
	ctx := context.Background()
	if _, err := conn.Read(ctx); err != nil {
		fmt.Println("bad line:", err != nil)
	}
	msg, _ := conn.Read(ctx)
	req := msg.(*jsonrpc.Request)
	fmt.Println("read:", req.Method)
	conn.Write(ctx, &jsonrpc.Response{ID: req.ID, Result: []byte(`{}`)})
	// Output:
	// bad line: true
	// read: ping
	// {"jsonrpc":"2.0","id":1,"result":{}}
}
