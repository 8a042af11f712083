package sse

import (
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
