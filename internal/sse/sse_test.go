package sse

import (
	"bufio"
	"bytes"
	"slices"
	"testing"
	"testing/iotest"
)

func TestKindOfEvent(t *testing.T) {
	for _, tc := range []struct {
		name, event, data string
		want              eventKind
	}{
		{"openai role chunk", "", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, eventPreamble},
		{"openai empty delta", "", `{"choices":[{"index":0,"delta":{}}]}`, eventPreamble},
		{"openai usage chunk", "", `{"choices":[],"usage":{"prompt_tokens":5}}`, eventPreamble},
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
		{"anthropic stop", "message_stop", `{"type":"message_stop"}`, eventEnd},
		{"gemini text", "", `{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}]}`, eventContent},
		{"gemini empty", "", `{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"}}]}`, eventPreamble},
		{"gemini function call", "", `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f"}}]}}]}`, eventContent},
		{"gemini error", "", `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`, eventError},
		{"plain delta", "", `{"delta":"Hel"}`, eventContent},
		{"not json", "", `hello`, eventContent},
	} {
		if got := kindOfEvent(tc.event, []byte(tc.data)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzLineReader checks the event-stream line reader against the
// specification's rule, written the simple way: a line ends at CRLF, LF or
// a bare CR, read through a buffer of any size.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("data: a\r\n\r\ndata: b\rdata: c\n\n"), uint8(1))
	f.Add([]byte("\r\r\n\n\r"), uint8(3))
	f.Fuzz(func(t *testing.T, in []byte, size uint8) {
		var want []string
		line := []byte{}
		for i := 0; i < len(in); i++ {
			switch in[i] {
			case '\r':
				if i+1 < len(in) && in[i+1] == '\n' {
					i++
				}
				fallthrough
			case '\n':
				want = append(want, string(line))
				line = line[:0]
			default:
				line = append(line, in[i])
			}
		}
		if len(line) > 0 {
			want = append(want, string(line))
		}
		r := lineReader{r: bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(in)), 16+int(size))}
		var got []string
		for {
			l, err := r.next()
			if err != nil && len(l) == 0 {
				break
			}
			got = append(got, string(l))
			if err != nil {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: got %q, want %q", in, got, want)
		}
	})
}
