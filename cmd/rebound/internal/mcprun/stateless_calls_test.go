package mcprun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"testing"
)

// TestStatelessClientCannotCancelAnotherClientsCall: a stateless client
// cannot end another's call: the IDs the shared upstream gives are a
// counter (the first call after initialize is 2), and a call whose method
// is notifications/cancelled, naming that ID, must not reach the server
// as a cancellation of the other client's call.
func TestStatelessClientCannotCancelAnotherClientsCall(t *testing.T) {
	_, url, next, _ := serveBlockServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan string, 1)
	go func() {
		_, body := postStateless(t, ctx, url, call("block"))
		done <- body
	}()
	next("started")
	status, body := postStateless(t, t.Context(), url, `{"jsonrpc":"2.0","id":1,"method":"notifications/cancelled","params":{"requestId":2,"reason":"not yours",`+statelessMeta("2026-07-28")+`}}`)
	t.Logf("the cancelling call: %d %s", status, body)
	// The hello call's answer comes after anything the server did with
	// the cancellation, which it reads first.
	if status, body := postStateless(t, t.Context(), url, call("hello")); status != 200 {
		t.Fatalf("hello: %d %s", status, body)
	}
	select {
	case body := <-done:
		t.Errorf("another client's call was ended: %s", body)
	default:
	}
	cancel()
	<-done
	next("cancelled") // by its own client
}

// TestStatelessCallsAcrossRenewalsAreServed: stateless calls made while
// SIGHUPs renew the shared upstream (renewStateless, here after every
// fourth call answered, so as many as a busy reload would see) are all
// served, by the upstream before or the one after: a renewal must not
// close an upstream between a request taking it and the request being
// sent.
func TestStatelessCallsAcrossRenewalsAreServed(t *testing.T) {
	f, url, _, _ := serveBlockServer(t)
	if status, body := postStateless(t, t.Context(), url, call("hello")); status != 200 {
		t.Fatalf("hello: %d %s", status, body)
	}
	const clients, calls = 8, 20
	failed := make(chan string, clients*calls)
	var wg sync.WaitGroup
	var answered, renewed atomic.Int32
	for range clients {
		wg.Go(func() {
			for range calls {
				if status, body := postStateless(t, t.Context(), url, call("hello")); status != 200 || !strings.Contains(body, "hello") {
					failed <- fmt.Sprintf("%d %s", status, body)
				}
				if answered.Add(1)%4 == 0 {
					f.renewStateless()
					renewed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	var fails []string
	for s := range failed {
		fails = append(fails, s)
	}
	if len(fails) > 0 {
		t.Errorf("%d of %d calls failed across %d renewals, the first: %s", len(fails), clients*calls, renewed.Load(), fails[0])
	}
}

// serveDrainedBlockServer is serveBlockServer, its stderr's lines read
// on all along (a server that writes to a pipe no one reads would hang
// at its exit): the function it returns waits for the next one.
func serveDrainedBlockServer(t *testing.T) (*endpoint, string, func() string) {
	stderr, w := io.Pipe()
	t.Cleanup(func() { stderr.Close() })
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), blockServerEnv+"=1")
	cmd.Stderr = w
	f, url := serveFrontTo(t, frontdoor.Options{}, func() reboundmcp.Upstream { return reboundmcp.Command(cmd) }, 4)
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return f, url, func() string { return <-lines }
}

// TestShutdownGraceEndsASessionsCallThatNeverEnds: a session's tool call
// that never ends (block) holds Shutdown only until its context is done:
// then the Handler closes, the call's POST is answered or cut, and
// Shutdown returns.
func TestShutdownGraceEndsASessionsCallThatNeverEnds(t *testing.T) {
	f, url, next := serveDrainedBlockServer(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
		called <- err
	}()
	if l := next(); l != "started" {
		t.Fatal(l)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no grace at all
	shut := make(chan struct{})
	go func() { f.Shutdown(ctx); close(shut) }()
	<-shut
	t.Logf("the call: %v", <-called)
}

// TestShutdownGraceEndsAStatelessCallThatNeverEnds is the same for a
// stateless client's call.
func TestShutdownGraceEndsAStatelessCallThatNeverEnds(t *testing.T) {
	f, url, next := serveDrainedBlockServer(t)
	done := make(chan string, 1)
	go func() {
		status, body := postStateless(t, t.Context(), url, call("block"))
		done <- fmt.Sprint(status, " ", body)
	}()
	if l := next(); l != "started" {
		t.Fatal(l)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f.Shutdown(ctx)
	t.Logf("the call: %s", <-done)
}
