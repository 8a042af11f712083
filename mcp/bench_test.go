package reboundmcp

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkToolCallOverStdio is one tools/call of a read-only tool to the
// test binary as a stdio server: straight through the SDK's
// CommandTransport, and through a reboundmcp Transport.
func BenchmarkToolCallOverStdio(b *testing.B) {
	for _, tc := range []struct {
		name      string
		transport func(b *testing.B) mcp.Transport
	}{
		{"direct", func(b *testing.B) mcp.Transport {
			cmd, _ := childCommand(b, "serve")
			return &mcp.CommandTransport{Command: cmd}
		}},
		{"reboundmcp", func(b *testing.B) mcp.Transport {
			cmd, _ := childCommand(b, "serve")
			return New(Command(cmd), Options{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			cs, err := client.Connect(b.Context(), tc.transport(b), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			params := &mcp.CallToolParams{Name: "read", Arguments: map[string]any{}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cs.CallTool(b.Context(), params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
