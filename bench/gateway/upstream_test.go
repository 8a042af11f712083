package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
