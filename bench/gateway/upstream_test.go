package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestUpstreamAnswersPlainAndStreamed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(plain.body())))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Object string `json:"object"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.Object != "chat.completion" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("plain: object %q, content type %q, error %v", got.Object, resp.Header.Get("Content-Type"), err)
	}

	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(streamed.body())))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(events) != len(streamChunks) || events[len(events)-1] != "data: [DONE]" {
		t.Errorf("streamed: content type %q, %d events ending %q, want %d ending with [DONE]", resp.Header.Get("Content-Type"), len(events), events[len(events)-1], len(streamChunks))
	}
}

// failOnce is a listener whose first Accept fails, as one out of file
// descriptors does.
type failOnce struct {
	net.Listener
	failed bool
}

func (l *failOnce) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, errors.New("accept: too many open files")
	}
	return l.Listener.Accept()
}

// TestRelay: requests through the relay get the upstream's answers, over
// one connection kept alive, and after an accept that failed.
func TestRelay(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()
	for _, c := range []struct {
		name string
		wrap func(net.Listener) net.Listener
	}{
		{"plain", func(ln net.Listener) net.Listener { return ln }},
		{"after a failed accept", func(ln net.Listener) net.Listener { return &failOnce{Listener: ln} }},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			relay(c.wrap(ln), srv.Listener.Addr().String())
			close(done)
		}()
		// Bounded: a relay that stopped accepting would leave a request waiting.
		client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		for range 3 {
			resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(string(plain.body())))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != completion {
				t.Fatalf("%s: %q, %v", c.name, body, err)
			}
		}
		client.CloseIdleConnections()
		ln.Close()
		<-done
	}
}
