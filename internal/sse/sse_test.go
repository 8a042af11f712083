package sse

import (
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestKindOfEvent holds the Tracker to what each event of each dialect
// means before content, as the look ahead asks it (it reads on past a
// preamble or a finish) and a continuation's splice (it drops a
// preamble, hands on a finish).
func TestKindOfEvent(t *testing.T) {
	const (
		eventPreamble = Preamble
		eventContent  = Content
		eventError    = Error
		eventEnd      = End
		eventFinish   = Finish
	)
	for _, tc := range []struct {
		name, event, data string
		want              Kind
	}{
		{"openai role chunk", "", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, eventPreamble},
		{"openai empty delta", "", `{"choices":[{"index":0,"delta":{}}]}`, eventPreamble},
		{"openai usage chunk", "", `{"choices":[],"usage":{"prompt_tokens":5}}`, eventFinish},
		{"openai finish chunk", "", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`, eventFinish},
		{"openai text with its finish", "", `{"choices":[{"index":0,"delta":{"content":"."},"finish_reason":"stop"}]}`, eventContent},
		{"openai text", "", `{"choices":[{"delta":{"content":"Hel"}}]}`, eventContent},
		{"openai tool call", "", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"search"}}]}}]}`, eventContent},
		{"openai refusal", "", `{"choices":[{"delta":{"refusal":"I can't"}}]}`, eventContent},
		{"openai error chunk", "", `{"error":{"message":"The server had an error","type":"server_error"}}`, eventError},
		{"openai done", "", `[DONE]`, eventEnd},
		{"responses created", "response.created", `{"type":"response.created","sequence_number":0}`, eventPreamble},
		{"responses in progress", "response.in_progress", `{"type":"response.in_progress"}`, eventPreamble},
		{"responses item added", "response.output_item.added", `{"type":"response.output_item.added"}`, eventPreamble},
		{"responses text delta", "response.output_text.delta", `{"type":"response.output_text.delta","delta":"Hel"}`, eventContent},
		{"responses empty delta", "response.output_text.delta", `{"type":"response.output_text.delta","delta":""}`, eventPreamble},
		{"responses arguments delta", "response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","delta":"{\"q\""}`, eventContent},
		{"responses error", "error", `{"type":"error","code":"server_error","message":"boom"}`, eventError},
		{"responses failed", "response.failed", `{"type":"response.failed"}`, eventError},
		{"responses completed", "response.completed", `{"type":"response.completed"}`, eventEnd},
		{"anthropic message_start", "message_start", `{"type":"message_start","message":{"id":"m"}}`, eventPreamble},
		{"anthropic ping", "ping", `{"type":"ping"}`, eventPreamble},
		{"anthropic empty block start", "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, eventPreamble},
		{"anthropic delta", "content_block_delta", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hel"}}`, eventContent},
		{"anthropic overloaded", "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, eventError},
		{"anthropic block stop", "content_block_stop", `{"type":"content_block_stop","index":0}`, eventFinish},
		{"anthropic message delta", "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, eventFinish},
		{"anthropic stop", "message_stop", `{"type":"message_stop"}`, eventEnd},
		{"gemini text", "", `{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}]}`, eventContent},
		{"gemini empty", "", `{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"}}]}`, eventPreamble},
		{"gemini function call", "", `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f"}}]}}]}`, eventContent},
		{"gemini error", "", `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`, eventError},
		{"plain delta", "", `{"delta":"Hel"}`, eventContent},
		{"not json", "", `hello`, eventPreamble}, // of no dialect: Peek passes it on
	} {
		var tr Tracker
		got := Kind(255)
		tr.Each = func(_ int64, k Kind) { got = k }
		ev := "data: " + tc.data + "\n\n"
		if tc.event != "" {
			ev = "event: " + tc.event + "\n" + ev
		}
		tr.Write([]byte(ev))
		if got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPeekPassesOnWhatNoDialectHas: a stream nobody recognises is handed
// over at its first event, not read to its end and retried.
func TestPeekPassesOnWhatNoDialectHas(t *testing.T) {
	for _, s := range []string{"data: hello\n\n", "data: {\"foo\":1}\n\n", "event: x\ndata: 1\n\n"} {
		head, err := Peek(strings.NewReader(s+"data: more\n\n"), 1<<16, 1<<10)
		if err != nil || !strings.HasPrefix(string(head.Read), s) {
			t.Errorf("%q: %v after %q", s, err, head.Read)
		}
	}
	_, err := Peek(strings.NewReader("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{}}\n\ndata: [DONE]\n\n"), 1<<16, 1<<10)
	if err != ErrEnded {
		t.Errorf("a finish and [DONE] before content: %v, want ErrEnded", err)
	}
	_, err = Peek(strings.NewReader("event: response.failed\ndata: {\"type\":\"response.failed\"}\n\n"), 1<<16, 1<<10)
	var ev *ErrorEvent
	if !errors.As(err, &ev) || !strings.Contains(string(ev.Data), "response.failed") {
		t.Errorf("response.failed before content: %v", err)
	}
}

// TestPeekHeadGoesOn: the tracker a Head hands over is where a new tracker
// fed the head's bytes would be, its events are the ones that tracker would
// report, and it goes on from there as that one would.
func TestPeekHeadGoesOn(t *testing.T) {
	for _, s := range []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" there\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n",
	} {
		for _, limit := range []int{8, 60, 1 << 16} { // a head cut mid-event, and whole
			head, _ := Peek(strings.NewReader(s), limit, 1<<10)
			var fresh Tracker
			var want []Seen
			fresh.Each = func(end int64, k Kind) { want = append(want, Seen{end, k}) }
			fresh.Write(head.Read)
			if head.Tracker == nil || head.Tracker.Each != nil || !slices.Equal(head.Events, want) {
				t.Fatalf("limit %d, %.30q: events %v, want %v", limit, s, head.Events, want)
			}
			rest := s[len(head.Read):]
			var got []Seen
			want = want[:0]
			head.Tracker.Each = func(end int64, k Kind) { got = append(got, Seen{end, k}) }
			head.Tracker.Write([]byte(rest))
			fresh.Write([]byte(rest))
			if !slices.Equal(got, want) || head.Tracker.Complete() != fresh.Complete() || head.Tracker.Dialect() != fresh.Dialect() ||
				string(head.Tracker.Text()) != string(fresh.Text()) || head.Tracker.Errored() != fresh.Errored() || head.Tracker.Ended() != fresh.Ended() {
				t.Errorf("limit %d, %.30q: went on with %v, want %v", limit, s, got, want)
			}
		}
	}
}

// FuzzStreamTypeReadsAsMimeDoes: StreamType says what
// mime.ParseMediaType's media type and error say, for any Content-Type.
func FuzzStreamTypeReadsAsMimeDoes(f *testing.F) {
	for _, v := range []string{"text/event-stream", "Text/Event-Stream ", "text/event-stream; charset=utf-8",
		"application/json", "application/json; charset=utf-8", "", " ", "text", "text/", "/json", "a/b/c",
		"text/event-stream;", "text /event-stream", "\u00a0text/event-stream", "te\u212at/plain", "application/problem+json"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		stream, valid := StreamType(http.Header{"Content-Type": {v}})
		mt, _, err := mime.ParseMediaType(v)
		if stream != (mt == "text/event-stream") || valid != (err == nil) {
			t.Fatalf("%q: stream %v valid %v; mime: %q, %v", v, stream, valid, mt, err)
		}
	})
}

// TestStreamTypeOfPlainValuesAllocatesNothing: the Content-Types of
// answers, without parameters, are read without an allocation.
func TestStreamTypeOfPlainValuesAllocatesNothing(t *testing.T) {
	for _, v := range []string{"text/event-stream", "application/json"} {
		h := http.Header{"Content-Type": {v}}
		if n := testing.AllocsPerRun(100, func() { StreamType(h) }); n != 0 {
			t.Errorf("%s: %v allocations", v, n)
		}
	}
}
