package rebound

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

type reviewStatusTransport struct {
	calls int
	first string
	then  func() *http.Response
}

func (z *reviewStatusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	z.calls++
	if z.calls == 1 {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(z.first)), Request: req}, nil
	}
	r := z.then()
	r.Request = req
	return r, nil
}

func TestTransportContinuationEdgeCases(t *testing.T) {
	cut := openaiRole + reviewChat("Hello")
	for _, tc := range []struct {
		name string
		then func() *http.Response
	}{
		{"200 json", func() *http.Response {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{}`))}
		}},
		{"429", func() *http.Response {
			return &http.Response{StatusCode: 429, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"error":{}}`))}
		}},
	} {
		z := &reviewStatusTransport{first: cut, then: tc.then}
		got, err := reviewDo(t, &Transport{Base: z, Continuations: 1, Policy: Policy{BaseDelay: NoDelay}}, "/v1/chat/completions", reviewChatBody)
		var ie *IncompleteStreamError
		t.Logf("%s: %d calls, %v", tc.name, z.calls, err)
		if !errors.As(err, &ie) || got != cut {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// tool calls then a cut: never continued
	tool := openaiRole + "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n"
	z := &reviewStatusTransport{first: reviewChat("x")[:0] + tool, then: func() *http.Response { panic("continued") }}
	_, err := reviewDo(t, &Transport{Base: z, Continuations: 1}, "/v1/chat/completions", reviewChatBody)
	t.Logf("tool calls: %d calls, %v", z.calls, err)
	// multi-line data in the continuation's first delta: the whitespace is not trimmed
	cutA := anthropicStart + reviewAnth("Hello") + reviewAnth(" ")
	contA := anthropicStart + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\ndata: \"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n" + reviewAnthStop
	got, err := reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cutA, contA}}, Continuations: 1}, "/v1/messages", reviewAnthBody)
	t.Logf("multi-line data: %v\n%s", err, got[strings.LastIndex(got, "Hello"):])
}
