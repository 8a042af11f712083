package rebound

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/firsttoken"
)

const (
	reviewChatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	reviewAnthBody = `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
)

func reviewChat(s string) string {
	return "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + s + "\"}}]}\n\n"
}

const reviewChatFinishLength = "data: {\"id\":\"c2\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
const reviewChatUsage = "data: {\"id\":\"c2\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":7}}\n\n"

func reviewAnth(s string) string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + s + "\"}}\n\n"
}

const reviewAnthStop = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":50}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func reviewDo(t *testing.T, tr *Transport, path, body string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test"+path, strings.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readStream(resp.Body)
}

// Found in review, and fixed: A continued answer loses the provider's finish_reason / stop_reason and usage.
func TestTransportContinuationKeepsTheEnd(t *testing.T) {
	cut := openaiRole + reviewChat("Hello")
	cont := openaiRole + reviewChat(" world") + reviewChatFinishLength + reviewChatUsage + "data: [DONE]\n\n"
	got, err := reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/chat/completions", reviewChatBody)
	t.Logf("openai err=%v\n%s", err, got)
	if !strings.Contains(got, `"finish_reason":"length"`) || !strings.Contains(got, `"usage"`) {
		t.Errorf("openai: the continuation's finish_reason/usage chunk never reached the caller")
	}
	cutA := anthropicStart + reviewAnth("Hello")
	contA := anthropicStart + "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" + reviewAnth(" world") + reviewAnthStop
	got, err = reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cutA, contA}}, Continuations: 1}, "/v1/messages", reviewAnthBody)
	t.Logf("anthropic err=%v\n%s", err, got)
	if !strings.Contains(got, `"stop_reason":"max_tokens"`) || !strings.Contains(got, "content_block_stop") {
		t.Errorf("anthropic: the continuation's message_delta (stop_reason, usage) / content_block_stop never reached the caller")
	}
}

// Found in review, and fixed: n=2: one choice's finish_reason makes a cut stream look whole.
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

// Found in review, and fixed: Close from another goroutine while Read is blocked makes a continuation request.
func TestTransportCloseDoesNotContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &scriptTransport{scripts: [][]step{
			{{0, anthropicStart + reviewAnth("Hello")}, {}}, // held open
			{{0, anthropicStart + reviewAnth(" world") + reviewAnthStop}},
		}}
		var continued atomic.Int32
		tr := &Transport{Base: st, Continuations: 1, Policy: Policy{Observer: ObserverFunc(func(e Event) {
			if e.Type == EventContinue {
				continued.Add(1)
			}
		})}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(reviewAnthBody))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		resp.Body.Read(buf)
		done := make(chan error)
		go func() {
			_, err := io.ReadAll(resp.Body)
			done <- err
		}()
		synctest.Wait() // Read is blocked on the provider
		resp.Body.Close()
		err = <-done
		st.mu.Lock()
		calls := st.calls
		st.mu.Unlock()
		t.Logf("read after Close: %v; provider calls %d; EventContinue %d", err, calls, continued.Load())
		if calls != 1 || continued.Load() != 0 {
			t.Errorf("the caller closed the stream, yet a continuation was requested (%d calls, %d EventContinue)", calls, continued.Load())
		}
	})
}

// Found in review, and fixed: The breaker is told a cut stream succeeded when it was continued.
func TestTransportBreakerHearsTheCut(t *testing.T) {
	b := &countingBreaker{}
	cut := anthropicStart + reviewAnth("Hello")
	cont := anthropicStart + reviewAnth(" world") + reviewAnthStop
	_, err := reviewDo(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1, Policy: Policy{Breaker: b}}, "/v1/messages", reviewAnthBody)
	t.Logf("err=%v breaker outcomes=%v", err, b.outcomes)
	for _, o := range b.outcomes {
		if o == OutcomeFailure {
			return
		}
	}
	t.Errorf("the provider cut a stream mid-answer, the breaker heard only %v", b.outcomes)
}

// Found in review, and fixed: Close while a continuation is being opened: -race.
type reviewGateTransport struct {
	mu    sync.Mutex
	calls int
	first string
	gate  chan struct{}
	rest  string
}

func (g *reviewGateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	body := g.first
	if n > 1 {
		select {
		case <-g.gate:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		body = g.rest
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

func TestTransportCloseEndsAContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &reviewGateTransport{first: anthropicStart + reviewAnth("Hello"), rest: anthropicStart + reviewAnth(" world") + reviewAnthStop, gate: make(chan struct{})}
		tr := &Transport{Base: g, Continuations: 1}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(reviewAnthBody))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := io.ReadAll(resp.Body)
			done <- err
		}()
		synctest.Wait() // the continuation's request is waiting on the gate
		closed := make(chan struct{})
		go func() { resp.Body.Close(); close(closed) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Logf("Read ended after Close: %v", err)
		default:
			t.Errorf("Close returned, but Read is still blocked on the continuation's request, which Close did not cancel")
			close(g.gate)
			t.Logf("after the gate: %v", <-done)
		}
		<-closed
	})
}

// Found in review, and fixed: Adaptive first-token bound never relearns: a target 4x slower is locked out for ever.
func TestTransportAdaptiveBoundRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mk := func(d time.Duration) []step {
			return []step{{0, anthropicStart}, {d, anthropicDelta + anthropicEnd}}
		}
		st := &scriptTransport{}
		tr := &Transport{Base: st, FirstTokenAdaptive: true, DisableRetryBudget: true, Policy: Policy{BaseDelay: NoDelay}}
		for range firsttoken.MinSamples {
			st.scripts, st.calls = [][]step{mk(time.Second)}, 0
			streamOnce2(t, tr)
		}
		// The provider is now 4 s to first token, for good.
		fails := 0
		for range 50 {
			st.scripts, st.calls = [][]step{mk(4 * time.Second)}, 0
			if err := streamOnce2(t, tr); err != nil {
				fails++
			}
		}
		t.Logf("bound now %v; %d of 50 calls failed", tr.firstTokenBound("provider.test"), fails)
		if fails == 50 {
			t.Errorf("adaptive bound stuck at %v: every call to a target now 4x slower fails, and no sample is ever learnt again", tr.firstTokenBound("provider.test"))
		}
	})
}

func streamOnce2(t *testing.T, tr *Transport) error {
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

var _ = context.Background
