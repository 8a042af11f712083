package rebound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/sse"
	"go.uber.org/goleak"
)

// Events of an Anthropic stream, for continuations spliced onto a cut one.
const (
	anthMessageStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"
	anthPing         = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	anthMessageStop  = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func anthBlockStart(i int, typ string) string {
	extra := `"text":""`
	switch typ {
	case "tool_use":
		extra = `"id":"toolu_1","name":"transfer_funds","input":{}`
	case "thinking":
		extra = `"thinking":""`
	}
	return fmt.Sprintf("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":%q,%s}}\n\n", i, typ, extra)
}

func anthDelta(i int, text string) string {
	return fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", i, text)
}

func anthBlockStop(i int) string {
	return fmt.Sprintf("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", i)
}

func anthMessageDelta(stop string) string {
	return fmt.Sprintf("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":%q,\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n", stop)
}

// anthropicShape checks that raw is one well-formed Anthropic message
// stream, as an SDK accumulates it: message_start first and once; content
// blocks numbered from 0 in order, each started, written and stopped in
// turn, none empty; all stopped before message_delta, which comes once;
// message_stop last. It returns the text and the stop reason.
func anthropicShape(raw string) (text, stop string, err error) {
	var (
		blocks            []string // each block's text
		open              = -1
		started, stopped  bool
		sawDelta, sawStop bool
	)
	for ev := range strings.SplitSeq(raw, "\n\n") {
		_, data, ok := strings.Cut(ev, "data: ")
		if !ok {
			continue
		}
		if sawStop {
			return "", "", fmt.Errorf("an event after message_stop: %s", ev)
		}
		var e struct {
			Type         string
			Index        int
			ContentBlock struct{ Type string } `json:"content_block"`
			Delta        struct {
				Text       string
				StopReason string `json:"stop_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return "", "", fmt.Errorf("%v: %s", err, ev)
		}
		switch e.Type {
		case "message_start":
			if started {
				return "", "", errors.New("a second message_start")
			}
			started = true
		case "content_block_start":
			if !started || open >= 0 || sawDelta || e.Index != len(blocks) {
				return "", "", fmt.Errorf("block %d started out of turn (%d blocks, block %d open)", e.Index, len(blocks), open)
			}
			open = e.Index
			blocks = append(blocks, "")
		case "content_block_delta":
			if e.Index != open {
				return "", "", fmt.Errorf("a delta for block %d while block %d is open", e.Index, open)
			}
			blocks[open] += e.Delta.Text
			text += e.Delta.Text
		case "content_block_stop":
			if e.Index != open {
				return "", "", fmt.Errorf("block %d stopped while block %d is open", e.Index, open)
			}
			if blocks[open] == "" {
				return "", "", fmt.Errorf("block %d is empty: the API refuses it when the answer is sent back", open)
			}
			open, stopped = -1, true
		case "message_delta":
			if open >= 0 || sawDelta {
				return "", "", fmt.Errorf("message_delta with block %d open, or a second one", open)
			}
			sawDelta, stop = true, e.Delta.StopReason
		case "message_stop":
			if !sawDelta {
				return "", "", errors.New("message_stop without message_delta")
			}
			sawStop = true
		case "ping":
		default:
			return "", "", fmt.Errorf("an event of type %q", e.Type)
		}
	}
	if !sawStop || !stopped {
		return "", "", errors.New("the stream did not end")
	}
	return text, stop, nil
}

// chatShape checks that raw is one well-formed chat completion stream:
// every chunk of one id, content before the finish reason, which comes
// once, and [DONE] last. It returns the text and the finish reason.
func chatShape(raw string) (text, finish string, err error) {
	id, done := "", false
	for ev := range strings.SplitSeq(raw, "\n\n") {
		_, data, ok := strings.Cut(ev, "data: ")
		if !ok {
			continue
		}
		if done {
			return "", "", fmt.Errorf("an event after [DONE]: %s", ev)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			ID      string
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return "", "", fmt.Errorf("%v: %s", err, ev)
		}
		if id == "" {
			id = c.ID
		} else if c.ID != id {
			return "", "", fmt.Errorf("a chunk of id %q in a stream of id %q", c.ID, id)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && finish != "" || ch.FinishReason != "" && finish != "" {
				return "", "", fmt.Errorf("a chunk after the finish reason %q: %s", finish, ev)
			}
			text += ch.Delta.Content
			finish += ch.FinishReason
		}
	}
	if !done {
		return "", "", errors.New("no [DONE]")
	}
	return text, finish, nil
}

// chatChunk is a continuation's chunk: its id is not the cut stream's.
func chatChunk(delta string) string { return chatChunkOf("c2", delta) }

func chatChunkOf(id, delta string) string {
	return `data: {"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

func chatFinish(reason string) string {
	return `data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}` + "\n\n"
}

const (
	chatRole  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	chatUsage = `data: {"id":"c2","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}` + "\n\n"
	chatDone  = "data: [DONE]\n\n"
)

// TestTransportContinuationWithoutTextEndsTheAnswer cuts an answer after
// its last text, at each place before its end: the continuation adds no
// text, or adds it in a block of its own. The caller's stream stays one
// well-formed answer, with the provider's stop reason or finish reason,
// after one continuation request.
func TestTransportContinuationWithoutTextEndsTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hello := anthMessageStart + anthBlockStart(0, "text") + anthPing + anthDelta(0, "Hello")
		blocks := anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, "One. ") + anthBlockStop(0) +
			anthBlockStart(1, "text") + anthDelta(1, "Two. ") + anthBlockStop(1) + anthBlockStart(2, "text") + anthDelta(2, "Hello")
		for _, c := range []struct {
			name, path, body string
			cut, cont        string
			text, end        string
		}{
			{"anthropic, cut in the block, continued with an empty block", "/v1/messages", anthropicRequest,
				hello, anthMessageStart + anthBlockStart(0, "text") + anthPing + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut in the block, continued with no block", "/v1/messages", anthropicRequest,
				hello, anthMessageStart + anthMessageDelta("max_tokens") + anthMessageStop,
				"Hello", "max_tokens"},
			{"anthropic, cut after the block, continued with an empty block", "/v1/messages", anthropicRequest,
				hello + anthBlockStop(0), anthMessageStart + anthBlockStart(0, "text") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut after the block, continued with no block", "/v1/messages", anthropicRequest,
				hello + anthBlockStop(0), anthMessageStart + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut after the block, continued with text", "/v1/messages", anthropicRequest,
				hello + anthBlockStop(0), anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello world", "end_turn"},
			{"anthropic, cut in the third block, continued with text", "/v1/messages", anthropicRequest,
				blocks, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"One. Two. Hello world", "end_turn"},
			{"anthropic, cut in the third block, continued with no text", "/v1/messages", anthropicRequest,
				blocks, anthMessageStart + anthBlockStart(0, "text") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"One. Two. Hello", "end_turn"},
			{"openai, continued with the finish and usage", "/v1/chat/completions", chatRequest,
				chatRole + chatChunkOf("c1", `{"content":"Hello"}`), chatRole + chatFinish("length") + chatUsage + chatDone,
				"Hello", "length"},
			{"openai, continued with the finish, not [DONE]", "/v1/chat/completions", chatRequest,
				chatRole + chatChunkOf("c1", `{"content":"Hello"}`), chatRole + chatFinish("stop"),
				"Hello", "stop"},
		} {
			st := &sseTransport{streams: []string{c.cut, c.cont}}
			got, err := readStreamOf(t, &Transport{Base: st, Continuations: 3}, c.path, c.body)
			var text, end string
			var shape error
			if c.path == "/v1/messages" {
				text, end, shape = anthropicShape(got)
			} else {
				// The finish without [DONE] ends the answer: [DONE] is added
				// only to check the rest.
				text, end, shape = chatShape(strings.TrimSuffix(got, chatDone) + chatDone)
			}
			if err != io.EOF || shape != nil || text != c.text || end != c.end || st.calls != 2 {
				t.Errorf("%s: %d calls, read %v, shape %v, text %q, end %q; want 2 calls, EOF, text %q, end %q\n%s", c.name, st.calls, err, shape, text, end, c.text, c.end, got)
			}
		}
	})
}

// TestTransportRefusesAContinuationThatIsNotText continues a cut text
// answer with a continuation that calls a tool, thinks, or ends saying it
// calls one, after some text or at once: the text reaches the caller,
// not one byte of the rest, and the stream ends with an
// *IncompleteStreamError (IncompleteNotText), with no further continuation.
func TestTransportRefusesAContinuationThatIsNotText(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chatTool := chatChunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"transfer_funds","arguments":""}}]}`) +
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"to\":\"mallory\"}"}}]}`)
		anthTool := anthBlockStart(1, "tool_use") +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"to\\\":\\\"mallory\\\"}\"}}\n\n" +
			anthBlockStop(1) + anthMessageDelta("tool_use") + anthMessageStop
		thinking := anthBlockStart(0, "thinking") +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"a secret plan\"}}\n\n" +
			anthBlockStop(0) + anthBlockStart(1, "text") + anthDelta(1, " world") + anthBlockStop(1) + anthMessageDelta("end_turn") + anthMessageStop
		chatCut := chatRole + chatChunkOf("c1", `{"content":"Hello"}`)
		anthCut := anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, "Hello")
		for _, c := range []struct {
			name, path, body string
			cut, cont, text  string
		}{
			{"openai tool call", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + chatTool + chatFinish("tool_calls") + chatDone, "Hello"},
			{"openai text, then a tool call", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + chatChunk(`{"content":" world"}`) + chatTool + chatFinish("tool_calls") + chatDone, "Hello world"},
			{"openai function call", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + chatChunk(`{"function_call":{"name":"transfer_funds","arguments":"{\"to\":\"mallory\"}"}}`) + chatFinish("function_call") + chatDone, "Hello"},
			{"openai text, then an end that names tool calls", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + chatChunk(`{"content":" world"}`) + chatFinish("tool_calls") + chatDone, "Hello world"},
			{"openai end that names tool calls, no text", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + chatFinish("tool_calls") + chatDone, "Hello"},
			{"anthropic tool use", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + strings.ReplaceAll(anthTool, `"index":1`, `"index":0`), "Hello"},
			{"anthropic text, then tool use", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthTool, "Hello world"},
			{"anthropic thinking", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + thinking, "Hello"},
			{"anthropic text, then an end that names tool use", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("tool_use") + anthMessageStop, "Hello world"},
			{"anthropic end that names tool use, no text", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + anthMessageDelta("tool_use") + anthMessageStop, "Hello"},
			{"anthropic thinking delta without its block", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"a secret plan\"}}\n\n" +
					anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop, "Hello"},
			{"anthropic tool use with an index of the wrong type", "/v1/messages", anthropicRequest,
				anthCut, anthMessageStart + strings.ReplaceAll(anthTool, `"index":1`, `"index":"1"`), "Hello"},
			{"openai tool call with an id of the wrong type", "/v1/chat/completions", chatRequest,
				chatCut, chatRole + strings.ReplaceAll(chatTool, `"id":"c2"`, `"id":2`) + chatDone, "Hello"},
			{"anthropic, continued in the Responses API's words", "/v1/messages", anthropicRequest,
				anthCut, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" world\"}\n\n" +
					"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n", "Hello"},
		} {
			st := &sseTransport{streams: []string{c.cut, c.cont}}
			got, err := readStreamOf(t, &Transport{Base: st, Continuations: 3}, c.path, c.body)
			var ie *IncompleteStreamError
			if !errors.As(err, &ie) || ie.Reason != IncompleteNotText || st.calls != 2 {
				t.Errorf("%s: %d calls, read %v; want 2 calls, an *IncompleteStreamError (%v)\n%s", c.name, st.calls, err, IncompleteNotText, got)
			}
			text := textOf(got)
			if c.path == "/v1/messages" {
				text = anthropicTextOf(got)
			}
			if text != c.text {
				t.Errorf("%s: the caller read %q, want %q", c.name, text, c.text)
			}
			for _, s := range []string{"transfer_funds", "mallory", "tool_use", "tool_calls", "function_call", "thinking", "secret"} {
				if strings.Contains(got, s) {
					t.Errorf("%s: %q reached the caller:\n%s", c.name, s, got)
				}
			}
		}
	})
}

// anthropicTextOf is the text of an Anthropic stream's text deltas.
func anthropicTextOf(raw string) string {
	var b strings.Builder
	for ev := range strings.SplitSeq(raw, "\n\n") {
		_, data, _ := strings.Cut(ev, "data: ")
		var e struct{ Delta struct{ Text string } }
		json.Unmarshal([]byte(data), &e)
		b.WriteString(e.Delta.Text)
	}
	return b.String()
}

// TestTransportEmptyContinuationThatNeverEndsIsBounded continues a cut
// answer with continuations that send their opening and then keep-alives
// for hours, or end without a word: the stream ends with an
// *IncompleteStreamError within the stall bound of each continuation,
// after at most Continuations × MaxAttempts of them.
func TestTransportEmptyContinuationThatNeverEndsIsBounded(t *testing.T) {
	for _, c := range []struct {
		name string
		cont []step
	}{
		{"keep-alives", append([]step{{0, anthMessageStart}}, pings(2000, 10*time.Second)...)},
		{"no end", []step{{0, anthMessageStart + anthBlockStart(0, "text")}}},
	} {
		synctest.Test(t, func(t *testing.T) {
			st := &scriptTransport{scripts: [][]step{{{0, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, "Hello")}}, c.cont}}
			tr := &Transport{Base: cancelable{st}, Continuations: 2, StreamStall: time.Minute, Policy: Policy{BaseDelay: time.Second}}
			start := time.Now()
			got, err := readStreamOf(t, tr, "/v1/messages", anthropicRequest)
			took := time.Since(start)
			var ie *IncompleteStreamError
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			t.Logf("%s: %d calls, %v in the bubble's time, %v", c.name, calls, took, err)
			if !errors.As(err, &ie) || anthropicTextOf(got) != "Hello" || calls > 1+2*defaultMaxAttempts || took > 2*(time.Minute+time.Minute) {
				t.Errorf("%s: %d calls in %v, read %v after %q", c.name, calls, took, err, got)
			}
		})
	}
}

// cancelable closes the body of each response of rt when its request's
// context ends, as http.Transport does.
type cancelable struct{ rt http.RoundTripper }

func (c cancelable) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		context.AfterFunc(req.Context(), func() { resp.Body.Close() })
	}
	return resp, err
}

// TestTransportAnthropicStopReasonEndsTheAnswer cuts an Anthropic stream
// after its message_delta, before message_stop: the stop reason says the
// answer is whole, as a chat stream's finish_reason does, so the stream
// ends with io.EOF and is not continued (a continuation would only send a
// second message_delta).
func TestTransportAnthropicStopReasonEndsTheAnswer(t *testing.T) {
	cut := anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, "Hello") + anthBlockStop(0) + anthMessageDelta("max_tokens")
	st := &sseTransport{streams: []string{cut, anthMessageStart + anthMessageDelta("end_turn") + anthMessageStop}}
	got, err := readStreamOf(t, &Transport{Base: st, Continuations: 1}, "/v1/messages", anthropicRequest)
	if err != io.EOF || got != cut || st.calls != 1 {
		t.Errorf("%d calls, read %v after\n%s\nwant 1 call, EOF after the cut stream", st.calls, err, got)
	}
}

const (
	chatRequest      = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	anthropicRequest = `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
)

func chatText(s string) string {
	return "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + s + "\"}}]}\n\n"
}

const chatFinishLength = "data: {\"id\":\"c2\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
const chatUsageChunk = "data: {\"id\":\"c2\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":7}}\n\n"

func anthropicDeltaOf(s string) string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + s + "\"}}\n\n"
}

const anthropicStop = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":50}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func readStreamOf(t *testing.T, tr *Transport, path, body string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test"+path, strings.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readStream(resp.Body)
}

// A continued answer keeps the provider's end: finish_reason or stop_reason,
// and usage.
func TestTransportContinuationKeepsTheEnd(t *testing.T) {
	cut := openaiRole + chatText("Hello")
	cont := openaiRole + chatText(" world") + chatFinishLength + chatUsageChunk + "data: [DONE]\n\n"
	got, err := readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/chat/completions", chatRequest)
	t.Logf("openai err=%v\n%s", err, got)
	if !strings.Contains(got, `"finish_reason":"length"`) || !strings.Contains(got, `"usage"`) {
		t.Errorf("openai: the continuation's finish_reason/usage chunk never reached the caller")
	}
	cutA := anthropicStart + anthropicDeltaOf("Hello")
	contA := anthropicStart + "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" + anthropicDeltaOf(" world") + anthropicStop
	got, err = readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cutA, contA}}, Continuations: 1}, "/v1/messages", anthropicRequest)
	t.Logf("anthropic err=%v\n%s", err, got)
	if !strings.Contains(got, `"stop_reason":"max_tokens"`) || !strings.Contains(got, "content_block_stop") {
		t.Errorf("anthropic: the continuation's message_delta (stop_reason, usage) / content_block_stop never reached the caller")
	}
}

// Close from another goroutine while Read is blocked makes no
// continuation request.
func TestTransportCloseDoesNotContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &scriptTransport{scripts: [][]step{
			{{0, anthropicStart + anthropicDeltaOf("Hello")}, {}}, // held open
			{{0, anthropicStart + anthropicDeltaOf(" world") + anthropicStop}},
		}}
		var continued atomic.Int32
		tr := &Transport{Base: st, Continuations: 1, Policy: Policy{Observer: ObserverFunc(func(e Event) {
			if e.Type == EventContinue {
				continued.Add(1)
			}
		})}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(anthropicRequest))
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

// The breaker hears that the provider cut a stream, even when it was
// continued.
func TestTransportBreakerHearsTheCut(t *testing.T) {
	b := &countingBreaker{}
	cut := anthropicStart + anthropicDeltaOf("Hello")
	cont := anthropicStart + anthropicDeltaOf(" world") + anthropicStop
	_, err := readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1, Policy: Policy{Breaker: b}}, "/v1/messages", anthropicRequest)
	t.Logf("err=%v breaker outcomes=%v", err, b.outcomes)
	for _, o := range b.outcomes {
		if o == OutcomeFailure {
			return
		}
	}
	t.Errorf("the provider cut a stream mid-answer, the breaker heard only %v", b.outcomes)
}

// gatedTransport answers its first request at once, and the later ones
// when gate is closed.
type gatedTransport struct {
	mu    sync.Mutex
	calls int
	first string
	gate  chan struct{}
	rest  string
}

func (g *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
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
		g := &gatedTransport{first: anthropicStart + anthropicDeltaOf("Hello"), rest: anthropicStart + anthropicDeltaOf(" world") + anthropicStop, gate: make(chan struct{})}
		tr := &Transport{Base: g, Continuations: 1}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(anthropicRequest))
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

var _ = context.Background

// An Anthropic answer cut after a tool_use block began is not continued
// as text.
func TestTransportDoesNotContinueAfterAToolUseBlock(t *testing.T) {
	cut := anthropicStart + anthropicDeltaOf("Let me look that up.") +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search\",\"input\":{}}}\n\n"
	cont := anthropicStart + anthropicDeltaOf(" Done.") + anthropicStop
	st := &sseTransport{streams: []string{cut, cont}}
	got, err := readStreamOf(t, &Transport{Base: st, Continuations: 1}, "/v1/messages", anthropicRequest)
	t.Logf("calls %d, err %v\n%s", st.calls, err, got)
	if st.calls != 1 {
		t.Errorf("a tool_use block had begun, yet the answer was continued as text (%d calls)", st.calls)
	}
}

// A continuation cut in its turn ends with its own reason.
func TestTransportReportsAContinuationsOwnEnd(t *testing.T) {
	cut := anthropicStart + anthropicDeltaOf("Hello")
	cont := anthropicStart + anthropicDeltaOf(" world") // ends without message_stop, cleanly
	_, err := readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/messages", anthropicRequest)
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

// silentTransport answers its first request, and never the later ones.
type silentTransport struct {
	mu    sync.Mutex
	calls int
	first string
}

func (h *silentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	if n > 1 {
		<-req.Context().Done() // a server that accepted and never answers
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(h.first)), Request: req}, nil
}

func TestTransportBoundsAContinuationThatNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := &silentTransport{first: anthropicStart + anthropicDeltaOf("Hello")}
		tr := &Transport{Base: h, Continuations: 1, StreamStall: 10 * time.Second, FirstTokenTimeout: 10 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(anthropicRequest))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(resp.Body); done <- err }()
		time.Sleep(24 * time.Hour) // virtual time: a day passes in the bubble
		resp.Body.Close()
		time.Sleep(time.Hour) // and an hour more
		select {
		case err := <-done:
			t.Logf("Read ended: %v", err)
		default:
			t.Errorf("24 h with StreamStall 10s, then Close, and an hour more: Read still blocked on the continuation's request")
			cancel()
			t.Logf("after cancelling the caller's context: %v", <-done)
		}
	})
}

// The caller's context cancelled mid-stream: no continuation is begun or
// reported.
func TestTransportDoesNotContinueACanceledCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		st := &scriptTransport{scripts: [][]step{{{0, anthropicStart + anthropicDeltaOf("Hello")}, {}}, {{0, anthropicStart + anthropicDeltaOf(" world") + anthropicStop}}}}
		var cont atomic.Int32
		upstream := make(chan io.Closer, 1) // the first stream's body, as net/http holds it
		base := attemptFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := st.RoundTrip(req)
			select {
			case upstream <- resp.Body:
			default:
			}
			return resp, err
		})
		tr := &Transport{Base: base, Continuations: 1, Policy: Policy{Observer: ObserverFunc(func(e Event) {
			if e.Type == EventContinue {
				cont.Add(1)
			}
		})}}
		// the attempt's context ends the scripted stream, as net/http's would
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(anthropicRequest))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		go func() { <-ctx.Done(); (<-upstream).Close() }() // net/http closes the body when the context ends
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(resp.Body); done <- err }()
		synctest.Wait()
		cancel()
		err = <-done
		resp.Body.Close()
		t.Logf("read: %v; EventContinue %d; provider calls %d", err, cont.Load(), st.calls)
		if cont.Load() != 0 {
			t.Errorf("the caller cancelled, yet a continuation was reported (EventContinue)")
		}
	})
}

// An Anthropic prefill's repeated whitespace is trimmed end to end, with
// LF, CRLF and CR line ends.
func TestTransportTrimsTheRepeatedWhitespace(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		fix := func(s string) string { return strings.ReplaceAll(s, "\n", eol) }
		cut := fix(anthropicStart + anthropicDeltaOf("Hello") + anthropicDeltaOf(" \\n"))
		cont := fix(anthropicStart + anthropicDeltaOf(" ") + anthropicDeltaOf("\\nWorld") + anthropicStop)
		got, err := readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cut, cont}}, Continuations: 1}, "/v1/messages", anthropicRequest)
		var tk sse.Tracker
		tk.Write([]byte(got))
		if err != io.EOF || string(tk.Text()) != "Hello \nWorld" || !tk.Ended() {
			t.Errorf("eol %q: %v, text %q, ended %v\n%q", eol, err, tk.Text(), tk.Ended(), got)
		}
	}
}

// Close racing the swap of the body for the continuation's (for -race).
func TestTransportCloseRacesAContinuation(t *testing.T) {
	for i := range 300 {
		st := &sseTransport{streams: []string{anthropicStart + anthropicDeltaOf("Hello"), anthropicStart + anthropicDeltaOf(" world") + anthropicStop}}
		tr := &Transport{Base: st, Continuations: 1}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader(anthropicRequest))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); io.ReadAll(resp.Body) }()
		go func() {
			defer wg.Done()
			for range i % 50 {
				_ = i
			}
			resp.Body.Close()
		}()
		wg.Wait()
	}
}

// attemptFunc adapts a function to http.RoundTripper.
type attemptFunc func(*http.Request) (*http.Response, error)

func (f attemptFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Continued streams over a real connection leave no goroutine behind.
func TestTransportContinuationsLeakNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		k := n.Add(1)
		switch k % 3 {
		case 1: // cut: abort after content
			io.WriteString(w, anthropicStart+anthropicDeltaOf("Hello"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case 2: // continuation, whole
			io.WriteString(w, anthropicStart+anthropicDeltaOf(" world")+anthropicStop)
		case 0: // unused
		}
	}))
	defer srv.Close()
	tr := &Transport{Continuations: 1, Base: &http.Transport{}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i := range 20 {
		n.Store(0)
		resp, err := c.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(anthropicRequest))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || !strings.Contains(string(b), "world") {
			t.Fatalf("%d: %v %q", i, err, b)
		}
		if i%2 == 0 {
			resp.Body.Close() // careless callers don't
		}
	}
	tr.CloseIdleConnections() // goleak waits for what is closing
}

type thenTransport struct {
	calls int
	first string
	then  func() *http.Response
}

func (z *thenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	z.calls++
	if z.calls == 1 {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(z.first)), Request: req}, nil
	}
	r := z.then()
	r.Request = req
	return r, nil
}

func TestTransportContinuationThatFailsLeavesTheCut(t *testing.T) {
	cut := openaiRole + chatText("Hello")
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
		z := &thenTransport{first: cut, then: tc.then}
		got, err := readStreamOf(t, &Transport{Base: z, Continuations: 1, Policy: Policy{BaseDelay: NoDelay}}, "/v1/chat/completions", chatRequest)
		var ie *IncompleteStreamError
		t.Logf("%s: %d calls, %v", tc.name, z.calls, err)
		if !errors.As(err, &ie) || got != cut {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// tool calls then a cut: never continued
	tool := openaiRole + "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n"
	z := &thenTransport{first: chatText("x")[:0] + tool, then: func() *http.Response { panic("continued") }}
	_, err := readStreamOf(t, &Transport{Base: z, Continuations: 1}, "/v1/chat/completions", chatRequest)
	t.Logf("tool calls: %d calls, %v", z.calls, err)
	// multi-line data in the continuation's first delta: the whitespace is not trimmed
	cutA := anthropicStart + anthropicDeltaOf("Hello") + anthropicDeltaOf(" ")
	contA := anthropicStart + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\ndata: \"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n" + anthropicStop
	got, err := readStreamOf(t, &Transport{Base: &sseTransport{streams: []string{cutA, contA}}, Continuations: 1}, "/v1/messages", anthropicRequest)
	t.Logf("multi-line data: %v\n%s", err, got[strings.LastIndex(got, "Hello"):])
}
