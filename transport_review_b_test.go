package rebound

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/continuation"
)

// Found in review, and fixed: Structured output whose schema names a property "text" is continued.
func TestContinuationRefusesStructuredOutput(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"reply","schema":{"type":"object","properties":{"text":{"type":"string"}}}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"text","schema":{}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","description":"give \"text\""}}`,
	} {
		_, err := continuation.Continue(continuation.OpenAIChat, []byte(body), `{"text":"hal`)
		if err == nil {
			t.Errorf("structured output request continued: %s", body)
		}
	}
}

// Found in review, and fixed: An Anthropic answer cut after a tool_use block began is continued as text.
func TestTransportDoesNotContinueAfterAToolUseBlock(t *testing.T) {
	cut := anthropicStart + reviewAnth("Let me look that up.") +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search\",\"input\":{}}}\n\n"
	cont := anthropicStart + reviewAnth(" Done.") + reviewAnthStop
	st := &sseTransport{streams: []string{cut, cont}}
	got, err := reviewDo(t, &Transport{Base: st, Continuations: 1}, "/v1/messages", reviewAnthBody)
	t.Logf("calls %d, err %v\n%s", st.calls, err, got)
	if st.calls != 1 {
		t.Errorf("a tool_use block had begun, yet the answer was continued as text (%d calls)", st.calls)
	}
}

// Found in review, and fixed: An event that never ends grows memory without bound.
type reviewEndless struct{ n, limit int }

func (e *reviewEndless) Read(p []byte) (int, error) {
	if e.n >= e.limit {
		return 0, io.EOF
	}
	for i := range p {
		p[i] = 'x'
	}
	n := min(len(p), e.limit-e.n)
	e.n += n
	return n, nil
}
func (e *reviewEndless) Close() error { return nil }

type reviewBodyTransport struct{ body func() io.ReadCloser }

func (z reviewBodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: z.body(), Request: req}, nil
}

func TestTransportBoundsAnEventThatNeverEnds(t *testing.T) {
	const size = 64 << 20
	tr := &Transport{Base: reviewBodyTransport{func() io.ReadCloser {
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(strings.NewReader(anthropicStart+anthropicDelta+"data: "), &reviewEndless{limit: size}), io.NopCloser(nil)}
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(`{}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 32<<10)
	var got int
	for {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			t.Logf("after %d bytes: %v", got, err)
			break
		}
	}
	runtime.ReadMemStats(&after)
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	t.Logf("heap in use after the stream ended, body not yet closed: %d MiB", live.HeapInuse>>20)
	resp.Body.Close()
	t.Logf("a %d MiB unfinished line: %d MiB allocated while reading, %d bytes handed to the caller", size>>20, (after.TotalAlloc-before.TotalAlloc)>>20, got)
	if after.TotalAlloc-before.TotalAlloc > 4*size {
		t.Errorf("memory grows with the event: %d MiB for a %d MiB line", (after.TotalAlloc-before.TotalAlloc)>>20, size>>20)
	}
}

// Found in review, and fixed: A continuation cut again: the reason and counts describe the wrong thing.
func TestTransportReportsAContinuationsOwnEnd(t *testing.T) {
	cut := anthropicStart + reviewAnth("Hello")
	cont := anthropicStart + reviewAnth(" world") // ends without message_stop, cleanly
	_, err := reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/messages", reviewAnthBody)
	var ie *IncompleteStreamError
	if !errors.As(err, &ie) {
		t.Fatalf("%v", err)
	}
	t.Logf("%v", err)
	if ie.Reason != IncompleteNoEnd {
		t.Errorf("the continuation ended cleanly without message_stop; reason %v, want %v", ie.Reason, IncompleteNoEnd)
	}
}

func textOf(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, `"content":"`); i >= 0 {
			rest := line[i+len(`"content":"`):]
			b.WriteString(rest[:strings.Index(rest, `"`)])
		}
	}
	return b.String()
}

// Found in review, and fixed: Secrets: an error event after content, and a read error mid-stream.
type reviewErrBody struct {
	io.Reader
	err error
}

func (z *reviewErrBody) Read(p []byte) (int, error) {
	n, err := z.Reader.Read(p)
	if err == io.EOF {
		return n, z.err
	}
	return n, err
}
func (z *reviewErrBody) Close() error { return nil }

func TestTransportScrubsTheCutOfAStream(t *testing.T) {
	const key = "sk-ant-api03-SECRETSECRETSECRET0123456789"
	for _, tc := range []struct {
		name string
		body func() io.ReadCloser
	}{
		{"error event", func() io.ReadCloser {
			return io.NopCloser(strings.NewReader(anthropicStart + reviewAnth("Hello") +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"bad key " + key + "\"}}\n\n"))
		}},
		{"read error", func() io.ReadCloser {
			return &reviewErrBody{strings.NewReader(anthropicStart + reviewAnth("Hello")), fmt.Errorf("proxy: upstream rejected x-api-key %s", key)}
		}},
	} {
		tr := &Transport{Base: reviewBodyTransport{tc.body}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(`{}`))
		req.Header.Set("x-api-key", key)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s: %v", tc.name, err)
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "SECRETSECRET") {
			t.Errorf("%s: the key is in the IncompleteStreamError: %v", tc.name, err)
		}
		var se *StreamError
		if errors.As(err, &se) && strings.Contains(string(se.Data), "SECRETSECRET") {
			t.Errorf("%s: key in StreamError.Data", tc.name)
		}
	}
}
