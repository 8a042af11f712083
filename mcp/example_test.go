package reboundmcp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// A Go agent's MCP client over reboundmcp: the SDK's mcp.Client connects
// to a Transport instead of the server's own. Here the server runs
// in-process over streamable HTTP; a stdio server is
// reboundmcp.Command(exec.Command("my-mcp-server", "--flag")), restarted
// whenever it dies.
func Example() {
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "weather", Version: "1"}, nil)
	type where struct {
		City string `json:"city"`
	}
	mcp.AddTool(server, &mcp.Tool{
		Name:        "forecast",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}, // safe to send again after a crash
	}, func(_ context.Context, _ *mcp.CallToolRequest, w where) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: w.City + ": sunny"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer srv.Close()

	transport := reboundmcp.New(reboundmcp.HTTP(srv.URL, nil), reboundmcp.Options{
		DownWait: 5 * time.Second, // a call waits this long for a server that is down
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "forecast", Arguments: map[string]any{"city": "Lisbon"}})
	if err != nil {
		log.Fatal(err) // the server stayed down, or died while a side-effecting tool ran
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: Lisbon: sunny
}
