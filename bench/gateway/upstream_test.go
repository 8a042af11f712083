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

func TestRelayPassesBytesBothWays(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		relay(ln, srv.Listener.Addr().String())
		close(done)
	}()
	client := &http.Client{Transport: &http.Transport{}}
	for range 3 { // one connection, kept alive across requests
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(string(plain.body())))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != completion {
			t.Fatalf("through the relay: %q, %v", body, err)
		}
	}
	client.CloseIdleConnections()
	ln.Close()
	<-done
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

func TestRelaySurvivesAcceptError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		relay(&failOnce{Listener: ln}, srv.Listener.Addr().String())
		close(done)
	}()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second} // a relay that stopped accepting would leave the request waiting
	resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(string(plain.body())))
	if err != nil {
		t.Fatalf("after a failed accept: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != completion {
		t.Errorf("after a failed accept: %q", body)
	}
	client.CloseIdleConnections()
	ln.Close()
	<-done
}
