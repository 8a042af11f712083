package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// serveArg, as the first argument, makes the harness serve one of its own
// targets instead of measuring: "-serve upstream", "-serve hop URL" or
// "-serve relay URL". Each
// target runs in a process of its own, as the gateways do, so that no
// target shares the load generator's process and every figure pays for the
// same wake-ups between processes.
const serveArg = "-serve"

// serve listens on a free loopback port, says so on stdout in the form
// rebound proxy uses, and serves until interrupted.
func serve(args []string) {
	var h http.Handler
	switch {
	case len(args) == 1 && args[0] == "upstream":
		h = http.HandlerFunc(answer)
	case len(args) == 2 && args[0] == "hop":
		// A bare reverse proxy: no retries, no limits, no logs. What it
		// adds is what one more hop on the loopback costs on this machine,
		// the floor under any gateway's figure.
		u, err := url.Parse(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway: hop:", err)
			os.Exit(2)
		}
		// It keeps as many idle connections to the upstream as rebound
		// proxy does, so that neither opens connections the other reuses.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, Transport: t}
		// It reads the request body before forwarding it, as every gateway
		// that routes by model must. Streaming it instead cuts about one
		// streamed answer in a hundred: net/http's server closes the
		// inbound body when the answer's headers go out, and the transport,
		// still checking that body's end, then drops the upstream
		// connection mid-answer (golang/go#40747).
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			rp.ServeHTTP(w, r)
		})
	case len(args) == 2 && args[0] == "relay":
		u, err := url.Parse(args[1])
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "gateway: relay: bad URL %q\n", args[1])
			os.Exit(2)
		}
		ln := listen()
		go func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			ln.Close()
		}()
		relay(ln, u.Host)
		return
	default:
		fmt.Fprintf(os.Stderr, "gateway: %s takes upstream, or hop or relay and a URL; got %q\n", serveArg, args)
		os.Exit(2)
	}
	ln := listen()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// listen listens on a free loopback port and says so on stdout.
func listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	return ln
}

// relay copies bytes between each connection ln accepts and a connection
// of its own to upstream (HOST:PORT), until either side closes, and reads
// nothing of them: the least any process in the path can add, the floor
// under every HTTP proxy's figure. It returns when ln is closed, and goes
// on after any other error.
func relay(ln net.Listener, upstream string) {
	var pause time.Duration
	for {
		client, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors, say: as http.Server does, wait a
			// little longer each time and go on, rather than leave every
			// later request refused.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			fmt.Fprintln(os.Stderr, "gateway: relay:", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		go func() {
			defer client.Close()
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			copyThenSignal := func(dst, src net.Conn) {
				io.Copy(dst, src)
				done <- struct{}{}
			}
			go copyThenSignal(up, client)
			go copyThenSignal(client, up)
			<-done // either side gone: the deferred closes end the other copy
		}()
	}
}

// startServer runs "-serve kind args..." in a child process of this
// harness and returns its base URL and the child.
func startServer(ctx context.Context, kind string, args ...string) (string, *child, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{serveArg, kind}, args...)...)
	c, base, err := startListening(ctx, kind, cmd)
	if err != nil {
		return "", nil, err
	}
	return base, c, nil
}
