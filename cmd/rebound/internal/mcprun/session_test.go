package mcprun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// TestSessionTimeout: a session with no request for the session timeout
// is ended, and its relay returns; a request still open (a GET's event
// stream) keeps it, and the timeout counts from when the last one ends.
// In virtual time; no server is ever started, since nothing is sent.
func TestSessionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		door, _ := frontdoor.New(frontdoor.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const timeout = time.Minute
		f := newFront(ctx, door, func() *reboundmcp.Transport {
			return reboundmcp.New(reboundmcp.Command(exec.Command("true")), reboundmcp.Options{})
		}, 4, timeout)
		defer f.closeAll()

		idle, err := f.start(jsonrpc.ID{}, proxy.MCPCaller{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout - time.Second)
		synctest.Wait()
		if isClosed(idle.done) {
			t.Fatal("the session ended before its timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !isClosed(idle.done) {
			t.Fatal("the session outlived its timeout")
		}

		busy, _ := f.start(jsonrpc.ID{}, proxy.MCPCaller{})
		getCtx, endGET := context.WithCancel(t.Context())
		get := httptest.NewRequestWithContext(getCtx, "GET", Path, nil)
		get.Header.Set("Accept", "text/event-stream")
		served := make(chan struct{})
		go func() { busy.serve(httptest.NewRecorder(), get); close(served) }()
		time.Sleep(3 * timeout)
		synctest.Wait()
		if isClosed(busy.done) {
			t.Fatal("a session with a request open was ended")
		}
		endGET()
		<-served
		time.Sleep(timeout + time.Second)
		synctest.Wait()
		if !isClosed(busy.done) {
			t.Fatal("the session outlived its timeout after its last request")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.sessions) != 0 {
			t.Errorf("%d sessions left", len(f.sessions))
		}
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pipeListener is a net.Listener of in-memory connections (net.Pipe),
// whose deadlines a synctest bubble's virtual clock drives.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "pipe"} }

// dial opens a connection to the server and returns the client's end,
// and a channel closed once the server has closed its end; what the
// server wrote is in got, once closed is.
func (l *pipeListener) dial() (c net.Conn, got *bytes.Buffer, closed chan struct{}) {
	client, server := net.Pipe()
	l.conns <- server
	got, closed = &bytes.Buffer{}, make(chan struct{})
	go func() {
		io.Copy(got, client)
		close(closed)
	}()
	return client, got, closed
}

// TestFrontLimitsWhatAClientHolds: the front keeps the proxy's limits,
// from the same code. In virtual time: a kept-alive connection that sends
// nothing more after a 401 is closed after IdleTimeout, not sooner; a
// header that stalls loses its connection after HeaderTimeout; a body that
// stalls is answered 408 after BodyStall (and a tenth), not sooner; one
// that trickles is answered 408 at BodyTimeout however it trickles.
func TestFrontLimitsWhatAClientHolds(t *testing.T) {
	const token = "Authorization: Bearer tok\r\n"
	request := func(length int, body string) string {
		return fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", token, length, body)
	}
	for _, c := range []struct {
		name  string
		send  func(c net.Conn)
		by    time.Duration // the server has closed the connection by then
		after time.Duration // and not before
		want  string        // the answer's status line, if any
	}{
		{"idle after a 401", func(c net.Conn) {
			io.WriteString(c, strings.Replace(request(len(initialize), initialize), token, "", 1))
		}, frontdoor.IdleTimeout, frontdoor.IdleTimeout, "HTTP/1.1 401"},
		{"refused, its body stalls", func(c net.Conn) {
			io.WriteString(c, strings.Replace(request(len(initialize), initialize[:10]), token, "", 1))
		}, frontdoor.BodyStall * 11 / 10, 0, "HTTP/1.1 401"},
		{"header stalls", func(c net.Conn) {
			io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n")
		}, frontdoor.HeaderTimeout, frontdoor.HeaderTimeout, ""},
		{"body stalls", func(c net.Conn) {
			io.WriteString(c, request(len(initialize), initialize[:10]))
		}, frontdoor.BodyStall * 11 / 10, frontdoor.BodyStall, "HTTP/1.1 408"},
		{"body trickles", func(c net.Conn) {
			io.WriteString(c, request(len(initialize), ""))
			for i := range len(initialize) {
				if _, err := io.WriteString(c, initialize[i:i+1]); err != nil {
					return // closed
				}
				time.Sleep(frontdoor.BodyStall / 2)
			}
		}, frontdoor.BodyTimeout, frontdoor.BodyTimeout - frontdoor.BodyStall, "HTTP/1.1 408"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				door, _ := frontdoor.New(frontdoor.Options{Tokens: []string{"tok"}})
				f := newFront(t.Context(), door, nil, 1, 0) // no session may start: nil would panic
				srv := frontdoor.Server(f, log.New(io.Discard, "", 0))
				ln := newPipeListener()
				go srv.Serve(ln)
				defer srv.Close()
				conn, got, closed := ln.dial()
				sent := make(chan struct{})
				go func() {
					c.send(conn)
					close(sent)
				}()
				defer func() {
					conn.Close()
					for !isClosed(sent) { // a sender that sleeps between its writes
						time.Sleep(frontdoor.BodyStall)
					}
				}()
				time.Sleep(c.after - time.Millisecond)
				synctest.Wait()
				if isClosed(closed) {
					t.Fatalf("closed before %v: %q", c.after, got)
				}
				time.Sleep(c.by - c.after + 2*time.Millisecond)
				synctest.Wait()
				if !isClosed(closed) {
					t.Fatalf("still open after %v: %q", c.by, got)
				}
				if !strings.HasPrefix(got.String(), c.want) || (c.want == "") != (got.Len() == 0) {
					t.Errorf("the server wrote %q; want %q", got, c.want)
				}
			})
		})
	}
}
