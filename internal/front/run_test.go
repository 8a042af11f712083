package front

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/frontdoor"
)

// pipes is a listener in memory whose connections are net.Pipe pairs,
// so that a whole server runs in a synctest bubble while the fake clock
// moves.
type pipes struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipes() *pipes { return &pipes{conns: make(chan net.Conn), done: make(chan struct{})} }

func (p *pipes) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}
func (p *pipes) Close() error   { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipes) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }

func (p *pipes) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// running is a Run under way on pipes.
type running struct {
	ln     *pipes
	client *http.Client
	stop   context.CancelFunc
	err    chan error
}

func start(t *testing.T, c Config) *running {
	t.Helper()
	ln := newPipes()
	c.Listener = ln
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{ln: ln, stop: cancel, err: make(chan error, 1),
		client: &http.Client{Transport: &http.Transport{DialContext: ln.dial}}}
	go func() { r.err <- Run(ctx, c) }()
	t.Cleanup(func() { r.client.CloseIdleConnections() })
	return r
}

func TestRunLetsARequestInFlightFinishThenStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		var stopping atomic.Bool
		r := start(t, Config{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				close(started)
				time.Sleep(5 * time.Second) // the work, in the bubble's time
				io.WriteString(w, "done")
			}),
			Drain:    10 * time.Second,
			Stopping: func() { stopping.Store(true) },
		})
		answered := make(chan string, 1)
		go func() {
			resp, err := r.client.Get("http://127.0.0.1:8080/work")
			if err != nil {
				answered <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered <- string(b)
		}()
		<-started
		begun := time.Now()
		r.stop()
		synctest.Wait()
		if !stopping.Load() {
			t.Error("Stopping was not called once the context was done")
		}
		if _, err := r.ln.dial(context.Background(), "", ""); err == nil {
			t.Error("a new connection was accepted while draining")
		}
		if got := <-answered; got != "done" {
			t.Errorf("the request in flight got %q, want its answer", got)
		}
		if took := time.Since(begun); took != 5*time.Second {
			t.Errorf("the request in flight was answered %v after the stop, want 5s: when it finished", took)
		}
		if err := <-r.err; err != nil {
			t.Errorf("Run: %v", err)
		}
		// http.Server.Shutdown looks for idle connections at most every
		// 500ms: the drain ends then, long before its bound.
		if took := time.Since(begun); took > 5*time.Second+500*time.Millisecond {
			t.Errorf("Run returned %v after it was told to stop, want within 500ms of the last request's end", took)
		}
	})
}

func TestRunClosesWhatTheDrainLeavesUnfinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		var unfinished atomic.Bool
		r := start(t, Config{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				close(started)
				select {
				case <-time.After(time.Hour):
				case <-req.Context().Done():
				}
			}),
			Drain:      10 * time.Second,
			Unfinished: func(error) { unfinished.Store(true) },
		})
		failed := make(chan error, 1)
		go func() {
			resp, err := r.client.Get("http://127.0.0.1:8080/forever")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			failed <- err
		}()
		<-started
		begun := time.Now()
		r.stop()
		if err := <-r.err; err != nil {
			t.Errorf("Run: %v", err)
		}
		if took := time.Since(begun); took != 10*time.Second {
			t.Errorf("Run returned %v after it was told to stop, want the drain's 10s", took)
		}
		if !unfinished.Load() {
			t.Error("Unfinished was not told")
		}
		if err := <-failed; err == nil {
			t.Error("the request cut by the drain's end got an answer")
		}
	})
}

func TestRunServesWithTheFrontDoorsHeaderTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, Config{Handler: http.NotFoundHandler()})
		conn, err := r.ln.dial(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		begun := time.Now()
		go io.WriteString(conn, "GET / HTTP/1.1\r\nHost: localhost\r\n") // and no end of the header
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if took := time.Since(begun); took != frontdoor.HeaderTimeout {
			t.Errorf("a stalled header was given up after %v, want %v", took, frontdoor.HeaderTimeout)
		}
		if line != "" && !strings.Contains(line, "408") {
			t.Errorf("a stalled header was answered %q", line)
		}
		r.stop()
		<-r.err
	})
}

func TestRunCallsHangupAtEachSIGHUPAndGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hangups := make(chan os.Signal)
		var calls atomic.Int32
		c := Config{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }),
			Hangup:  func() { calls.Add(1) },
		}
		c.hangups = hangups
		r := start(t, c)
		hangups <- syscall.SIGHUP
		hangups <- syscall.SIGHUP
		synctest.Wait()
		if n := calls.Load(); n != 2 {
			t.Errorf("Hangup called %d times for 2 SIGHUPs", n)
		}
		resp, err := r.client.Get("http://127.0.0.1:8080/")
		if err != nil {
			t.Fatalf("after SIGHUP: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "up" {
			t.Errorf("after SIGHUP the server answered %q", b)
		}
		r.stop()
		if err := <-r.err; err != nil {
			t.Errorf("Run: %v", err)
		}
		select {
		case hangups <- syscall.SIGHUP:
			t.Error("a SIGHUP was still heard after Run returned")
		default:
		}
	})
}

func TestRunSaysWhereItListens(t *testing.T) {
	var out strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	ln := newPipes()
	cancel()
	if err := Run(ctx, Config{Listener: ln, Handler: http.NotFoundHandler(), Stdout: &out, Path: "/mcp"}); err != nil {
		t.Fatal(err)
	}
	if want := "listening on http://127.0.0.1:8080/mcp\n"; out.String() != want {
		t.Errorf("first line %q, want %q", out.String(), want)
	}
}
