package sse

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func track(stream string, split int) (*Tracker, []Kind) {
	var kinds []Kind
	t := &Tracker{Each: func(_ int64, k Kind) { kinds = append(kinds, k) }}
	for len(stream) > 0 {
		n := min(split, len(stream))
		t.Write([]byte(stream[:n]))
		stream = stream[n:]
	}
	return t, kinds
}

func TestTrackerInAnySplit(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		dialect      Dialect
		text         string
		textOnly     bool
		ended        bool
	}{
		{"chat", "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\ndata: [DONE]\n\n", Chat, "Hello", true, true},
		{"chat tool call", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n", Chat, "", false, false},
		{"responses", "event: response.created\ndata: {\"type\":\"response.created\"}\n\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\ndata: {\"type\":\"response.completed\"}\n\n", Responses, "Hi", true, true},
		{"responses incomplete", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\ndata: {\"type\":\"response.incomplete\"}\n\n", Responses, "Hi", true, false},
		{"anthropic tool input", "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", Anthropic, "", false, true},
		{"chat tool call with a field of the wrong type", "data: {\"id\":2,\"choices\":[{\"index\":\"0\",\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n", Chat, "", false, false},
		{"chat end naming tool calls", "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n", Chat, "Hi", false, true},
		{"chat end naming a function call", "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"function_call\"}]}\n\ndata: [DONE]\n\n", Chat, "", false, true},
		{"responses function call item", "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"name\":\"f\"}}\n\ndata: {\"type\":\"response.completed\"}\n\n", Responses, "", false, true},
		{"responses message and reasoning items", "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"reasoning\"}}\n\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\"}}\n\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\ndata: {\"type\":\"response.completed\"}\n\n", Responses, "Hi", true, true},
		{"anthropic end naming tool use", "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", Anthropic, "", false, true},
		{"anthropic end", "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", Anthropic, "", true, true},
		{"gemini", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]},\"finishReason\":\"STOP\"}]}\n\n", Gemini, "Hi", true, true},
		{"plain", "data: {\"delta\":\"Hi\"}\n\ndata: [DONE]\n\n", Plain, "Hi", true, true},
	} {
		for _, ends := range []string{"\n", "\r\n", "\r"} {
			stream := strings.ReplaceAll(tc.stream, "\n", ends)
			for _, split := range []int{1, 2, 7, len(stream)} {
				tr, _ := track(stream, split)
				if tr.Dialect() != tc.dialect || string(tr.Text()) != tc.text || tr.TextBytes() != len(tc.text) ||
					tr.TextOnly() != tc.textOnly || tr.Ended() != tc.ended || tr.Complete() != int64(len(stream)) {
					t.Errorf("%s (%q, split %d): %v, text %q, text only %v, ended %v, complete %d of %d", tc.name, ends, split,
						tr.Dialect(), tr.Text(), tr.TextOnly(), tr.Ended(), tr.Complete(), len(stream))
				}
			}
		}
	}
}

func TestTrackerCompleteStopsBeforeAPartialEvent(t *testing.T) {
	whole := "data: {\"delta\":\"Hi\"}\r\n\r\n"
	tr, kinds := track(whole+"data: {\"del", 3)
	if tr.Complete() != int64(len(whole)) || len(kinds) != 1 || kinds[0] != Content || tr.Events() != 1 {
		t.Fatalf("complete %d, want %d; kinds %v", tr.Complete(), len(whole), kinds)
	}
}

func TestTrackerClassifiesASecondStream(t *testing.T) {
	_, kinds := track("event: message_start\ndata: {\"type\":\"message_start\"}\n\n: keep-alive\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n"+
		"event: error\ndata: {\"type\":\"error\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 5)
	want := []Kind{Preamble, Preamble, Content, Error, End}
	if len(kinds) != len(want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("kinds %v, want %v", kinds, want)
		}
	}
}

func TestTrackerKeepsTextUpToItsBound(t *testing.T) {
	chunk := "data: {\"delta\":\"" + strings.Repeat("x", 1000) + "\"}\n\n"
	tr, _ := track(strings.Repeat(chunk, MaxText/1000+1), 4096)
	if tr.TextKept() || tr.Text() != nil || tr.TextBytes() != 1000*(MaxText/1000+1) {
		t.Fatalf("kept %v, %d bytes counted", tr.TextKept(), tr.TextBytes())
	}
}

// TestTrackerTellsTheAnswersEndAndBlocks checks the kinds of the events
// that end an answer ahead of its stream (a finish reason, usage; a
// block's stop, message_delta) and an Anthropic stream's blocks.
func TestTrackerTellsTheAnswersEndAndBlocks(t *testing.T) {
	_, kinds := track("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n"+
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"+
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
		"data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", 3)
	if want := []Kind{Preamble, Content, Finish, Finish, End}; !slices.Equal(kinds, want) {
		t.Errorf("chat kinds %v, want %v", kinds, want)
	}
	start := func(i int) string {
		return fmt.Sprintf("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", i)
	}
	delta := func(i int) string {
		return fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n", i)
	}
	stop := func(i int) string {
		return fmt.Sprintf("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", i)
	}
	for _, c := range []struct {
		stream string
		n      int
		open   bool
	}{
		{"event: message_start\ndata: {\"type\":\"message_start\"}\n\n", 0, false},
		{start(0), 1, true},
		{start(0) + delta(0), 1, true},
		{start(0) + delta(0) + stop(0), 1, false},
		{start(0) + delta(0) + stop(0) + start(1) + delta(1), 2, true},
		{delta(0), 1, true},
		{start(0) + delta(0) + stop(0) + delta(0), 1, false},
	} {
		tr, _ := track(c.stream, 5)
		if n, open := tr.Blocks(); n != c.n || open != c.open {
			t.Errorf("%s: blocks %d, open %v; want %d, %v", c.stream, n, open, c.n, c.open)
		}
	}
	_, kinds = track(start(0)+delta(0)+stop(0)+"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n", 5)
	if want := []Kind{Preamble, Content, Finish, Finish}; !slices.Equal(kinds, want) {
		t.Errorf("anthropic kinds %v, want %v", kinds, want)
	}
}
