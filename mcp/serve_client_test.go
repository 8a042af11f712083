package reboundmcp

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// scriptedClient is a client connection that sends msgs, then fails with
// end, and keeps what it is sent.
type scriptedClient struct {
	mu   sync.Mutex
	msgs []jsonrpc.Message
	end  error
	got  []jsonrpc.Message
}

func (c *scriptedClient) Read(ctx context.Context) (jsonrpc.Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.msgs) == 0 {
		return nil, c.end
	}
	m := c.msgs[0]
	c.msgs = c.msgs[1:]
	return m, nil
}

func (c *scriptedClient) Write(ctx context.Context, m jsonrpc.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, m)
	return nil
}
func (c *scriptedClient) Close() error      { return nil }
func (c *scriptedClient) SessionID() string { return "" }

// TestServeReportsWhyTheClientConnectionFailed: a client connection that
// fails with something other than its end (a line that is not JSON, a
// line over the SDK's limit) makes Serve return that error, so that
// "rebound mcp" says why it stopped and exits 1, rather than 0 and
// nothing.
func TestServeReportsWhyTheClientConnectionFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		boom := errors.New("invalid character 'g' looking for beginning of value")
		err := Serve(t.Context(), &scriptedClient{end: boom}, New(f.upstream(), Options{}))
		if !errors.Is(err, boom) {
			t.Fatalf("Serve: %v, want the client connection's error", err)
		}
	})
}

// TestServeAnswersWhatTheClientAskedBeforeItsInputEnded: a client that
// writes a request and closes its side (a script piping requests in, a
// client that shuts down) still gets the answer, as the reference
// servers give it, before Serve closes the server.
func TestServeAnswersWhatTheClientAskedBeforeItsInputEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		id, _ := jsonrpc.MakeID(float64(1))
		c := &scriptedClient{msgs: []jsonrpc.Message{&jsonrpc.Request{ID: id, Method: "ping", Params: []byte("{}")}}, end: io.EOF}
		if err := Serve(t.Context(), c, New(f.upstream(), Options{})); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.got {
			if r, ok := m.(*jsonrpc.Response); ok && r.ID == id {
				return
			}
		}
		t.Fatalf("the client got %v, not the answer to its ping", c.got)
	})
}
