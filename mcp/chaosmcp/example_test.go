package chaosmcp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

func Example() {
	// Half the calls, in an order Seed fixes, fail with an isError result
	// and do not run.
	srv, err := chaosmcp.New(chaosmcp.Config{ErrorRate: 0.5, Seed: 7})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	go srv.Run(ctx, serverEnd)

	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil)
	cs, err := client.Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			log.Fatal(err)
		}
		a := tool.Annotations
		fmt.Printf("%s: readOnly=%v idempotent=%v\n", tool.Name, a.ReadOnlyHint, a.IdempotentHint)
	}
	for range 4 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "append", Arguments: map[string]any{"key": "k", "value": "x"}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("append: isError=%v %s\n", res.IsError, res.Content[0].(*mcp.TextContent).Text)
	}
	fmt.Println("runs:", srv.Counts())
	// Output:
	// append: readOnly=false idempotent=false
	// lookup: readOnly=true idempotent=true
	// set: readOnly=false idempotent=true
	// append: isError=true chaos: injected tool error; append did not run
	// append: isError=false x
	// append: isError=true chaos: injected tool error; append did not run
	// append: isError=false xx
	// runs: map[append:2]
}
