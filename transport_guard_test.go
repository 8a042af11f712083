package rebound

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/firsttoken"
)

// A complete stream in each dialect: preamble, content, then its end.
var dialectStreams = []struct {
	name              string
	preamble, content string
	end               string
}{
	{"openai chat", openaiRole, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
	{"openai responses", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n"},
	{"anthropic", anthropicStart, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
	{"gemini", "", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"}}]}\r\n\r\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}]}\r\n\r\n"},
	{"plain", "", "data: {\"delta\":\"Hello\"}\n\n", "data: [DONE]\n\n"},
}

// readStream reads resp's body to its end in small reads, and returns what
// came and how it ended.
func readStream(r io.Reader) (string, error) {
	var b strings.Builder
	buf := make([]byte, 7)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), err
		}
	}
}

func streamOnce(t *testing.T, tr *Transport) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1", strings.NewReader(`{"stream":true}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readStream(resp.Body)
	resp.Body.Close()
	return resp, got, err
}

func TestTransportStreamsEndHonestly(t *testing.T) {
	for _, d := range dialectStreams {
		whole := d.preamble + d.content + d.content + d.end
		_, got, err := streamOnce(t, &Transport{Base: &sseTransport{streams: []string{whole}}})
		if got != whole || err != io.EOF {
			t.Errorf("%s whole: %v after %q", d.name, err, got)
		}
		half := d.preamble + d.content + d.content
		_, got, err = streamOnce(t, &Transport{Base: &sseTransport{streams: []string{half}}})
		var ie *IncompleteStreamError
		if got != half || !errors.As(err, &ie) || ie.Reason != IncompleteNoEnd || ie.Events != 2 || ie.Text != 10 || ie.Err != nil {
			t.Errorf("%s without its end: %v after %q", d.name, err, got)
		}
	}
}

func TestTransportFinishReasonEndsAChatStream(t *testing.T) {
	s := openaiRole + dialectStreams[0].content + "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	_, got, err := streamOnce(t, &Transport{Base: &sseTransport{streams: []string{s}}})
	if got != s || err != io.EOF {
		t.Fatalf("%v after %q", err, got)
	}
}

func TestTransportStreamEndingOnAnErrorIsIncomplete(t *testing.T) {
	// The error event is not handed on; the error carries it.
	s := anthropicStart + dialectStreams[2].content
	_, got, err := streamOnce(t, &Transport{Base: &sseTransport{streams: []string{s + anthropicOverload}}})
	var ie *IncompleteStreamError
	var se *StreamError
	if got != s || !errors.As(err, &ie) || ie.Reason != IncompleteErrorEvent || !errors.As(err, &se) || !strings.Contains(string(se.Data), "overloaded_error") {
		t.Fatalf("%v after %q", err, got)
	}
}

// brokenTransport answers with stream, read a byte at a time with its
// line ends as given, and then breaks with err.
type brokenTransport struct {
	stream string
	err    error
}

func (b brokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body := io.MultiReader(iotest.OneByteReader(strings.NewReader(b.stream)), iotest.ErrReader(b.err))
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(body), Request: req}, nil
}

func TestTransportNeverHandsOverHalfAnEvent(t *testing.T) {
	reset := errors.New("connection reset by peer")
	for _, d := range dialectStreams {
		for _, crlf := range []bool{false, true} {
			whole := d.preamble + d.content
			partial := d.content[:len(d.content)-3]
			if crlf {
				whole = strings.ReplaceAll(whole, "\r\n", "\n")
				whole = strings.ReplaceAll(whole, "\n", "\r\n")
			}
			b := &countingBreaker{}
			_, got, err := streamOnce(t, &Transport{Base: brokenTransport{whole + partial, reset}, Policy: Policy{Breaker: b}})
			var ie *IncompleteStreamError
			if got != whole || !errors.As(err, &ie) || ie.Reason != IncompleteCut || !errors.Is(err, reset) || ie.Events != 1 {
				t.Errorf("%s (CRLF %v): %v after %q", d.name, crlf, err, got)
			}
			if len(b.outcomes) != 1 || b.outcomes[0] != OutcomeFailure {
				t.Errorf("%s: breaker told %v, want a failure", d.name, b.outcomes)
			}
		}
	}
}

func TestTransportPassesUnknownStreamsAsTheyCome(t *testing.T) {
	s := "data: hello\n\ndata: world\n\ndata: half an ev"
	_, got, err := streamOnce(t, &Transport{Base: &sseTransport{streams: []string{s}}})
	if got != s || err != io.EOF {
		t.Fatalf("%v after %q", err, got)
	}
}

// step is one part of a scripted stream: wait, then send.
type step struct {
	wait time.Duration
	send string
}

// scriptTransport answers each request with the next script, played into
// a pipe; a script ending in a zero step holds the stream open until the
// reader closes it.
type scriptTransport struct {
	mu      sync.Mutex // guards scripts and calls
	scripts [][]step
	calls   int
}

func (s *scriptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	script := s.scripts[min(s.calls, len(s.scripts)-1)]
	s.calls++
	s.mu.Unlock()
	pr, pw := io.Pipe()
	body := &pipeBody{PipeReader: pr, closed: make(chan struct{})}
	go func() {
		for _, st := range script {
			if st == (step{}) {
				<-body.closed // held open until the reader closes it
				return
			}
			select { // the server's pace, in the bubble's time
			case <-time.After(st.wait):
			case <-body.closed:
				return
			}
			if _, err := io.WriteString(pw, st.send); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body, Request: req}, nil
}

// pipeBody is the reading end of a scripted stream.
type pipeBody struct {
	*io.PipeReader
	once   sync.Once
	closed chan struct{}
}

func (p *pipeBody) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.PipeReader.CloseWithError(errors.New("body closed"))
}

func pings(n int, every time.Duration) []step {
	var s []step
	for range n {
		s = append(s, step{every, "event: ping\ndata: {\"type\":\"ping\"}\n\n"})
	}
	return s
}

var (
	anthropicDelta = dialectStreams[2].content
	anthropicEnd   = dialectStreams[2].end
)

func TestTransportRetriesALateFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := append(append([]step{{0, anthropicStart}}, pings(10, time.Second)...), step{0, anthropicDelta + anthropicEnd})
		st := &scriptTransport{scripts: [][]step{slow, {{0, anthropicStart + anthropicDelta + anthropicEnd}}}}
		tr := &Transport{Base: st, FirstTokenTimeout: 5 * time.Second, Policy: Policy{BaseDelay: NoDelay}}
		start := time.Now()
		_, got, err := streamOnce(t, tr)
		if err != io.EOF || got != anthropicStart+anthropicDelta+anthropicEnd || st.calls != 2 || time.Since(start) != 5*time.Second {
			t.Fatalf("%d calls after %v: %v after %q", st.calls, time.Since(start), err, got)
		}
	})
}

func TestTransportAdaptsTheFirstTokenBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := append(append([]step{{0, anthropicStart}}, pings(1, time.Second)...), step{0, anthropicDelta + anthropicEnd})
		slow := append(append([]step{{0, anthropicStart}}, pings(10, time.Second)...), step{0, anthropicDelta + anthropicEnd})
		st := &scriptTransport{}
		tr := &Transport{Base: st, FirstTokenAdaptive: true, Policy: Policy{BaseDelay: NoDelay}}
		for range firsttoken.MinSamples - 1 {
			st.scripts, st.calls = [][]step{fast}, 0
			streamOnce(t, tr)
		}
		// Too few samples yet: no bound.
		st.scripts, st.calls = [][]step{slow, fast}, 0
		start := time.Now()
		if _, _, err := streamOnce(t, tr); err != io.EOF || st.calls != 1 || time.Since(start) != 10*time.Second {
			t.Fatalf("before %d samples: %d calls after %v, %v", firsttoken.MinSamples, st.calls, time.Since(start), err)
		}
		// Now 3 × the 90th percentile (1 s).
		st.scripts, st.calls = [][]step{slow, fast}, 0
		start = time.Now()
		if _, _, err := streamOnce(t, tr); err != io.EOF || st.calls != 2 || time.Since(start) != 4*time.Second {
			t.Fatalf("adaptive: %d calls after %v, %v; want the slow stream cut at 3s and a fast one", st.calls, time.Since(start), err)
		}
	})
}

func TestTransportCutsAStalledStreamAfterContent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &scriptTransport{scripts: [][]step{{{0, anthropicStart + anthropicDelta}, {time.Second, anthropicDelta}, {}}}}
		b := &countingBreaker{}
		tr := &Transport{Base: st, StreamStall: 10 * time.Second, Policy: Policy{Breaker: b}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1", strings.NewReader(`{}`))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		resp.Body.Read(buf)
		time.Sleep(time.Minute) // the caller's own time between reads is no stall
		resp.Body.Read(buf)
		start := time.Now()
		n, err := resp.Body.Read(buf)
		var ie *IncompleteStreamError
		if n != 0 || !errors.As(err, &ie) || ie.Reason != IncompleteStalled || ie.Events != 2 || time.Since(start) != 10*time.Second {
			t.Fatalf("%v after %v", err, time.Since(start))
		}
		if len(b.outcomes) != 1 || b.outcomes[0] != OutcomeFailure {
			t.Fatalf("breaker told %v", b.outcomes)
		}
	})
}

func TestTransportCutsATrickle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		trickle := []step{{0, anthropicStart + anthropicDelta}}
		for range 100 {
			trickle = append(trickle, step{2 * time.Second, anthropicDelta})
		}
		st := &scriptTransport{scripts: [][]step{trickle}}
		tr := &Transport{Base: st, StreamMinRate: 1, StreamRateWindow: 10 * time.Second}
		start := time.Now()
		_, got, err := streamOnce(t, tr)
		var ie *IncompleteStreamError
		if !errors.As(err, &ie) || ie.Reason != IncompleteTooSlow || time.Since(start) != 10*time.Second || strings.Count(got, "content_block_delta\n") != 6 {
			t.Fatalf("%v after %v, %d events", err, time.Since(start), strings.Count(got, "content_block_delta\n"))
		}
		// At the floor, not below it: whole.
		steady := []step{{0, anthropicStart}}
		for range 30 {
			steady = append(steady, step{time.Second, anthropicDelta})
		}
		st.scripts, st.calls = [][]step{append(steady, step{0, anthropicEnd})}, 0
		if _, _, err := streamOnce(t, tr); err != io.EOF {
			t.Fatalf("a stream at the floor: %v", err)
		}
	})
}

// BenchmarkStreamRead measures reading a handed-over stream, per event:
// a recognised dialect (tracked, whole events) against an unknown one
// (passed through as before).
func BenchmarkStreamRead(b *testing.B) {
	const events = 1000
	for _, tc := range []struct{ name, preamble, event string }{
		{"tracked", openaiRole, dialectStreams[0].content},
		{"passthrough", "", "data: " + strings.Repeat("x", len(dialectStreams[0].content)-8) + "\n\n"},
	} {
		stream := tc.preamble + strings.Repeat(tc.event, events) + "data: [DONE]\n\n"
		b.Run(tc.name, func(b *testing.B) {
			tr := &Transport{Base: &sseTransport{streams: []string{stream}}}
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				resp.Body.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// With n=2, one choice's finish_reason does not make a stream cut in the
// other look whole.
func TestTransportOneFinishedChoiceIsNotTheEnd(t *testing.T) {
	s := openaiRole +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"}},{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"BB\"}}]}\n\n"
	b := &countingBreaker{}
	_, got, err := streamOnce(t, &Transport{Base: &sseTransport{streams: []string{s}}, Policy: Policy{Breaker: b}})
	var ie *IncompleteStreamError
	if !errors.As(err, &ie) {
		t.Errorf("choice 1 was cut mid-answer (no finish_reason, no [DONE]), yet Read ended with %v; breaker %v; got %d bytes", err, b.outcomes, len(got))
	}
}

// The adaptive first-token bound relearns: a target grown 4x slower is not
// locked out for ever.
func TestTransportAdaptiveBoundRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mk := func(d time.Duration) []step {
			return []step{{0, anthropicStart}, {d, anthropicDelta + anthropicEnd}}
		}
		st := &scriptTransport{}
		tr := &Transport{Base: st, FirstTokenAdaptive: true, DisableRetryBudget: true, Policy: Policy{BaseDelay: NoDelay}}
		for range firsttoken.MinSamples {
			st.scripts, st.calls = [][]step{mk(time.Second)}, 0
			streamErr(t, tr)
		}
		// The provider is now 4 s to first token, for good.
		fails := 0
		for range 50 {
			st.scripts, st.calls = [][]step{mk(4 * time.Second)}, 0
			if err := streamErr(t, tr); err != nil {
				fails++
			}
		}
		t.Logf("bound now %v; %d of 50 calls failed", tr.firstTokenBound("provider.test"), fails)
		if fails == 50 {
			t.Errorf("adaptive bound stuck at %v: every call to a target now 4x slower fails, and no sample is ever learnt again", tr.firstTokenBound("provider.test"))
		}
	})
}

func streamErr(t *testing.T, tr *Transport) error {
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1", strings.NewReader(`{}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return errors.New(resp.Status)
	}
	_, err = readStream(resp.Body)
	resp.Body.Close()
	if err == io.EOF {
		return nil
	}
	return err
}

// endlessLine is a body that sends one line, never ended, of limit bytes.
type endlessLine struct{ n, limit int }

func (e *endlessLine) Read(p []byte) (int, error) {
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

func (e *endlessLine) Close() error { return nil }

type bodyTransport struct{ body func() io.ReadCloser }

func (z bodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: z.body(), Request: req}, nil
}

func TestTransportBoundsAnEventThatNeverEnds(t *testing.T) {
	const size = 64 << 20
	tr := &Transport{Base: bodyTransport{func() io.ReadCloser {
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(strings.NewReader(anthropicStart+anthropicDelta+"data: "), &endlessLine{limit: size}), io.NopCloser(nil)}
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

// failingBody ends its reader with err in place of io.EOF.
type failingBody struct {
	io.Reader
	err error
}

func (z *failingBody) Read(p []byte) (int, error) {
	n, err := z.Reader.Read(p)
	if err == io.EOF {
		return n, z.err
	}
	return n, err
}

func (z *failingBody) Close() error { return nil }

func TestTransportScrubsTheCutOfAStream(t *testing.T) {
	const key = "sk-ant-api03-SECRETSECRETSECRET0123456789"
	for _, tc := range []struct {
		name string
		body func() io.ReadCloser
	}{
		{"error event", func() io.ReadCloser {
			return io.NopCloser(strings.NewReader(anthropicStart + anthropicDeltaOf("Hello") +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"bad key " + key + "\"}}\n\n"))
		}},
		{"read error", func() io.ReadCloser {
			return &failingBody{strings.NewReader(anthropicStart + anthropicDeltaOf("Hello")), fmt.Errorf("proxy: upstream rejected x-api-key %s", key)}
		}},
	} {
		tr := &Transport{Base: bodyTransport{tc.body}}
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
