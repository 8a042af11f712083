package reboundmcp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

func TestServeRelaysAClientUntilItLeavesThenClosesTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		clientSide, serveSide := mcp.NewInMemoryTransports()
		conn, err := serveSide.Connect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- Serve(t.Context(), conn, New(f.upstream(), Options{})) }()
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), clientSide, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := callText(t, cs, "read"); err != nil || got != "read #1" {
			t.Fatalf("%q, %v", got, err)
		}
		cs.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, err := f.pipes[0].Write([]byte("\n")); err == nil {
			t.Error("the server's pipe is still open after Serve returned")
		}
	})
}

func TestObserverSeesEachAttemptOfARequestUnderItsTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			if run == 1 {
				return crashMidCall(ctx, f)
			}
			return "read #2", nil
		}
		var mu sync.Mutex
		var events []string
		obs := rebound.ObserverFunc(func(e rebound.Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Target == "mcp:fake/read" {
				events = append(events, fmt.Sprintf("%v %d %v", e.Type, e.Attempt, e.Err != nil))
			}
		})
		cs := connect(t, f, Options{Observer: obs}, true, nil)
		if _, err := callText(t, cs, "read"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(events); got != "[attempt 1 true retry 1 true attempt 2 false]" {
			t.Errorf("events %s", got)
		}
	})
}

func TestErrorAnswersAndToolErrorsGoBackAsTheyCame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.handlers = map[string]mcp.ToolHandler{"write": func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res := text("it broke")
			res.IsError = true
			return res, nil
		}}
		var logs logBuffer
		cs := connect(t, f, Options{Logger: logs.logger()}, true, nil)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{}})
		if err != nil || !res.IsError {
			t.Fatalf("res %+v, err %v; want the isError result", res, err)
		}
		if _, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "none"}); err == nil {
			t.Fatal("a prompt the server does not have: no error")
		}
		reqs := logs.requests(t)
		for _, r := range reqs[len(reqs)-2:] {
			if r["attempts"] != 1.0 {
				t.Errorf("%v: sent more than once", r)
			}
		}
		if reqs[len(reqs)-2]["outcome"] != "tool_error" || reqs[len(reqs)-1]["outcome"] != "error" {
			t.Errorf("outcomes in %v", reqs)
		}
	})
}

func TestServerRequestsReachTheClientAndItsAnswersTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.handlers = map[string]mcp.ToolHandler{"read": func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			roots, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, err
			}
			return text(roots.Roots[0].URI), nil
		}}
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		client.AddRoots(&mcp.Root{URI: "file:///work"})
		cs, err := client.Connect(t.Context(), New(f.upstream(), Options{}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if got, err := callText(t, cs, "read"); err != nil || got != "file:///work" {
			t.Fatalf("%q, %v; want the client's root, asked by the server", got, err)
		}
	})
}
