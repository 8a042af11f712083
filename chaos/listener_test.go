package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// listenerServer serves s on a listener from NewListener and counts the
// connections it accepts.
func listenerServer(t *testing.T, s *Server) (srv *httptest.Server, conns *atomic.Int64) {
	t.Helper()
	srv = httptest.NewUnstartedServer(s)
	srv.Listener = NewListener(srv.Listener)
	conns = new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// TestListener529 checks the status line of each answer on the wire, one
// connection carrying them all.
func TestListener529(t *testing.T) {
	srv, conns := listenerServer(t, newServer(t, Config{}))
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i, c := range []struct{ proto, mode, want string }{
		{"HTTP/1.1", ModeOverload, "HTTP/1.1 529 Site is overloaded"},
		{"HTTP/1.1", ModeOK, "HTTP/1.1 200 OK"},
		{"HTTP/1.1", ModeOverload, "HTTP/1.1 529 Site is overloaded"},
		{"HTTP/1.1", ModeDown, "HTTP/1.1 503 Service Unavailable"},
		// Last, as HTTP/1.0 closes the connection after its answer.
		{"HTTP/1.0", ModeOverload, "HTTP/1.0 529 Site is overloaded"},
	} {
		fmt.Fprintf(conn, "POST / %s\r\nHost: chaos\r\nX-Chaos-Mode: %s\r\nContent-Length: 0\r\n\r\n", c.proto, c.mode)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, c.mode, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Proto + " " + resp.Status; got != c.want || err != nil || len(body) == 0 {
			t.Errorf("request %d: %q, body %q %v; want %q and a body", i, got, body, err, c.want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestListenerClient checks what a Go client sees: the reason phrase, and
// one kept-alive connection for all its requests.
func TestListenerClient(t *testing.T) {
	srv, conns := listenerServer(t, newServer(t, Config{Mode: ModeOverload}))
	for i := range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 529 || resp.Status != "529 Site is overloaded" {
			t.Errorf("request %d: status %q", i, resp.Status)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestListenerReset checks that reset mode still resets the connection,
// rather than closing it cleanly, through the listener's connections.
func TestListenerReset(t *testing.T) {
	srv, _ := listenerServer(t, newServer(t, Config{Mode: ModeReset}))
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: chaos\r\n\r\n")
	if _, err := io.ReadAll(conn); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read %v, want a connection reset", err)
	}
}
