package rebound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
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
			{"anthropic, cut in the block, continued with an empty block", "/v1/messages", reviewAnthBody,
				hello, anthMessageStart + anthBlockStart(0, "text") + anthPing + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut in the block, continued with no block", "/v1/messages", reviewAnthBody,
				hello, anthMessageStart + anthMessageDelta("max_tokens") + anthMessageStop,
				"Hello", "max_tokens"},
			{"anthropic, cut after the block, continued with an empty block", "/v1/messages", reviewAnthBody,
				hello + anthBlockStop(0), anthMessageStart + anthBlockStart(0, "text") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut after the block, continued with no block", "/v1/messages", reviewAnthBody,
				hello + anthBlockStop(0), anthMessageStart + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello", "end_turn"},
			{"anthropic, cut after the block, continued with text", "/v1/messages", reviewAnthBody,
				hello + anthBlockStop(0), anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"Hello world", "end_turn"},
			{"anthropic, cut in the third block, continued with text", "/v1/messages", reviewAnthBody,
				blocks, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"One. Two. Hello world", "end_turn"},
			{"anthropic, cut in the third block, continued with no text", "/v1/messages", reviewAnthBody,
				blocks, anthMessageStart + anthBlockStart(0, "text") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop,
				"One. Two. Hello", "end_turn"},
			{"openai, continued with the finish and usage", "/v1/chat/completions", reviewChatBody,
				chatRole + chatChunkOf("c1", `{"content":"Hello"}`), chatRole + chatFinish("length") + chatUsage + chatDone,
				"Hello", "length"},
			{"openai, continued with the finish, not [DONE]", "/v1/chat/completions", reviewChatBody,
				chatRole + chatChunkOf("c1", `{"content":"Hello"}`), chatRole + chatFinish("stop"),
				"Hello", "stop"},
		} {
			st := &sseTransport{streams: []string{c.cut, c.cont}}
			got, err := reviewDo(t, &Transport{Base: st, Continuations: 3}, c.path, c.body)
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
			{"openai tool call", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + chatTool + chatFinish("tool_calls") + chatDone, "Hello"},
			{"openai text, then a tool call", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + chatChunk(`{"content":" world"}`) + chatTool + chatFinish("tool_calls") + chatDone, "Hello world"},
			{"openai function call", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + chatChunk(`{"function_call":{"name":"transfer_funds","arguments":"{\"to\":\"mallory\"}"}}`) + chatFinish("function_call") + chatDone, "Hello"},
			{"openai text, then an end that names tool calls", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + chatChunk(`{"content":" world"}`) + chatFinish("tool_calls") + chatDone, "Hello world"},
			{"openai end that names tool calls, no text", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + chatFinish("tool_calls") + chatDone, "Hello"},
			{"anthropic tool use", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + strings.ReplaceAll(anthTool, `"index":1`, `"index":0`), "Hello"},
			{"anthropic text, then tool use", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthTool, "Hello world"},
			{"anthropic thinking", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + thinking, "Hello"},
			{"anthropic text, then an end that names tool use", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + anthBlockStart(0, "text") + anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("tool_use") + anthMessageStop, "Hello world"},
			{"anthropic end that names tool use, no text", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + anthMessageDelta("tool_use") + anthMessageStop, "Hello"},
			{"anthropic thinking delta without its block", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"a secret plan\"}}\n\n" +
					anthDelta(0, " world") + anthBlockStop(0) + anthMessageDelta("end_turn") + anthMessageStop, "Hello"},
			{"anthropic tool use with an index of the wrong type", "/v1/messages", reviewAnthBody,
				anthCut, anthMessageStart + strings.ReplaceAll(anthTool, `"index":1`, `"index":"1"`), "Hello"},
			{"openai tool call with an id of the wrong type", "/v1/chat/completions", reviewChatBody,
				chatCut, chatRole + strings.ReplaceAll(chatTool, `"id":"c2"`, `"id":2`) + chatDone, "Hello"},
			{"anthropic, continued in the Responses API's words", "/v1/messages", reviewAnthBody,
				anthCut, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" world\"}\n\n" +
					"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n", "Hello"},
		} {
			st := &sseTransport{streams: []string{c.cut, c.cont}}
			got, err := reviewDo(t, &Transport{Base: st, Continuations: 3}, c.path, c.body)
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
			got, err := reviewDo(t, tr, "/v1/messages", reviewAnthBody)
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
	got, err := reviewDo(t, &Transport{Base: st, Continuations: 1}, "/v1/messages", reviewAnthBody)
	if err != io.EOF || got != cut || st.calls != 1 {
		t.Errorf("%d calls, read %v after\n%s\nwant 1 call, EOF after the cut stream", st.calls, err, got)
	}
}
