package sse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// realStreams are stream shapes the providers send: OpenAI chat with
// usage, tool calls and two choices; the Responses API with a function
// call; Anthropic with text, tool input and thinking; Gemini; the plain
// dialect; and in-band errors.
var realStreams = []string{
	"data: {\"id\":\"chatcmpl-B9\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4.1\",\"system_fingerprint\":\"fp_1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-B9\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Caf\\u00e9 \\\"ok\\\" \\ud83d\\ude00\\n\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-B9\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-B9\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4.1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n" +
		"data: [DONE]\n\n",
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"}},{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"BB\"}}]}\n\n",
	"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n" +
		"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"hm\"}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"name\":\"f\"}}\n\n" +
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"a\\\"\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5}}}\n\n",
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"l\\\"\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
	"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 4},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n" +
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"f\",\"args\": {}}}],\"role\": \"model\"}}]}\r\n\r\n" +
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"lo\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}]}\r\n\r\n",
	"data: {\"error\":{\"code\":429,\"message\":\"Resource has been exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}\n\n",
	"data: {\"delta\":\"Hel\"}\n\ndata: {\"delta\":{\"x\":1}}\n\ndata: [DONE]\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\r: keep-alive\r\rdata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\r\r",
}

// oddEvents are events that read differently from what they seem unless
// read exactly as encoding/json reads them: keys in another case, escaped
// or given twice, values of the wrong type, nulls, bad JSON.
var oddEvents = []string{
	`{"Choices":[{"Delta":{"CONTENT":"a"},"Finish_Reason":"stop"}]}`,
	`{"choice\u0073":[{"delta":{"content":"\u0061\ud800b\udc00"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}],\"\u017fhoices\":[]}",
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","TEXT":"y"}}`,
	"{\"typ\xe2\x84\xaa\":1,\"type\":\"message_stop\"}",
	`{"choices":[{"finish_reason":"stop"},{"index":1,"finish_reason":"stop"},{"index":2}],"choices":[{}]}`,
	`{"choices":[{"finish_reason":"stop"},{"index":1},{"index":2,"finish_reason":"stop"}],"choices":[{},{}],"choices":[{},{},{},{}]}`,
	`{"choices":[{"finish_reason":"stop"}],"choices":null,"choices":[{}]}`,
	`{"choices":[{"finish_reason":"stop"}],"choices":[],"choices":[{}]}`,
	`{"choices":[{"finish_reason":"stop"}],"choices":5,"choices":[{}]}`,
	`{"choices":[{"finish_reason":"stop"}],"choices":[{"finish_reason":null}]}`,
	`{"choices":[{"finish_reason":"stop","delta":{"content":"a"}}],"choices":[{"finish_reason":7,"delta":5}]}`,
	`{"choices":{}}`, `{"choices":"x"}`, `{"candidates":true}`, `{"choices":[1,null,"x",[],{}]}`,
	`{"candidates":[{"content":{"parts":[{"text":"a"},{"text":"b"},{"text":"c"}]},"content":{"parts":[{}]}}]}`,
	`{"candidates":[{"content":{"parts":[{"text":"a"},{"text":"b"}]}}],"candidates":[{"content":{"parts":[{},{},{}]}},{"finishReason":"STOP"}]}`,
	`{"candidates":[{"content":{"parts":null}},{"content":5,"finishReason":""}]}`,
	`{"index":"1","type":"content_block_stop"}`, `{"index":1.0,"type":"content_block_stop"}`,
	`{"index":-0,"type":"content_block_start"}`, `{"index":9223372036854775808,"type":"content_block_start"}`,
	`{"index":-9223372036854775808,"type":"content_block_delta","delta":{"type":"text_delta"}}`,
	`{"type":"message_delta","delta":"x"}`, `{"type":"message_delta","delta":{"stop_reason":null}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"delta":{"type":"x"}}`,
	`{"type":"response.output_text.delta","delta":7}`, `{"type":"response.output_item.added","item":{"type":null}}`,
	`{"type":"response.output_item.added","item":{"type":"message"},"item":{"x":1}}`,
	`{"type":"response.output_item.added","item":"x"}`,
	`{"type":null,"delta":"x"}`, `{"type":5,"delta":[]}`, `{"type":"","delta":[ ]}`, `{"delta":{ }}`,
	`{"delta":"a"}x`, `{"delta":"a",}`, `{"delta":01}`, `{"delta":1.}`, `{"delta":-}`, `{"delta":1e}`, `{"delta":"\x"}`,
	"{\"delta\":\"a\tb\"}", `{"delta":"\u12"}`, `{"delta":tru}`, `[{"delta":"a"}]`, `"x"`, `null`, ``, `{"error":null,"delta":"a"}`,
	`{"error":{},"delta":"a"}`, `{"error":"","delta":"a"}`, `{"error":"x","delta":"a"}`, `{"type":"err\u006fr"}`,
	`{"id":"a\"b","created":[1],"choices":[]}`, `{"id":5,"created":1,"choices":[]}`,
	`{"usage":{"x":1},"choices":[]}`, `{"usage":{},"choices":[]}`,
	`{"choices":[{"index":3,"delta":{"refusal":"no"}},{"index":3,"delta":{"function_call":{"name":"f"}}}]}`,
	strings.Repeat("[", jsonscan.DefaultMaxDepth) + strings.Repeat("]", jsonscan.DefaultMaxDepth),
	strings.Repeat("[", jsonscan.DefaultMaxDepth+1) + strings.Repeat("]", jsonscan.DefaultMaxDepth+1),
	`{"delta":"a","x":` + strings.Repeat("[", jsonscan.DefaultMaxDepth-1) + strings.Repeat("]", jsonscan.DefaultMaxDepth-1) + `}`,
	`{"delta":"a","x":` + strings.Repeat("[", jsonscan.DefaultMaxDepth) + strings.Repeat("]", jsonscan.DefaultMaxDepth) + `}`,
}

// corpusStreams returns the event-stream bodies of the shared corpus of
// providers' answers.
func corpusStreams(tb testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "corpus", "*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no corpus: %v", err)
	}
	var streams []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		var cases []struct{ Body any }
		if err := json.Unmarshal(b, &cases); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		for _, c := range cases {
			if s, ok := c.Body.(string); ok && strings.Contains(s, "data:") {
				streams = append(streams, s)
			}
		}
	}
	return streams
}

// says is what a tracker tells of the stream fed so far, but its text.
type says struct {
	complete                          int64
	dialect                           Dialect
	ended, finished, errored          bool
	events, textBytes                 int
	kept, only                        bool
	blocks                            int
	open                              bool
	chatID, created, errName, errData string
	errOK                             bool
	createdNil, errDataNil            bool // a caller tells nil from empty
}

func trackerSays(t *Tracker) says {
	s := says{complete: t.Complete(), dialect: t.Dialect(), ended: t.Ended(), finished: t.Finished(), errored: t.Errored(),
		events: t.Events(), textBytes: t.TextBytes(), kept: t.TextKept(), only: t.TextOnly()}
	s.blocks, s.open = t.Blocks()
	var created, data []byte
	s.chatID, created = t.ChatID()
	s.errName, data, s.errOK = t.ErrorEvent()
	s.created, s.errData = string(created), string(data)
	s.createdNil, s.errDataNil = created == nil, data == nil
	return s
}

func oracleSays(t *oracle) says {
	s := says{complete: t.Complete(), dialect: t.Dialect(), ended: t.Ended(), finished: t.Finished(), errored: t.Errored(),
		events: t.Events(), textBytes: t.TextBytes(), kept: t.TextKept(), only: t.TextOnly()}
	s.blocks, s.open = t.Blocks()
	var created, data []byte
	s.chatID, created = t.ChatID()
	s.errName, data, s.errOK = t.ErrorEvent()
	s.created, s.errData = string(created), string(data)
	s.createdNil, s.errDataNil = created == nil, data == nil
	return s
}

// differ feeds stream to the tracker and to the oracle in pieces of split
// bytes, rewinding both to the last complete event once at rewind (if it
// falls within the stream), and returns how they first differ, if they do.
func differ(stream []byte, split, rewind int) string {
	var gotKinds, wantKinds []Seen
	got := &Tracker{Each: func(end int64, k Kind) { gotKinds = append(gotKinds, Seen{end, k}) }}
	want := &oracle{Each: func(end int64, k Kind) { wantKinds = append(wantKinds, Seen{end, k}) }}
	split = max(1, split)
	for off := 0; off < len(stream); off += split {
		p := stream[off:min(off+split, len(stream))]
		got.Write(p)
		want.Write(p)
		if g, w := trackerSays(got), oracleSays(want); g != w || !bytes.Equal(got.Text(), want.Text()) || !slices.Equal(gotKinds, wantKinds) {
			return fmt.Sprintf("after %d bytes:\nscanner %+v %q %v\ndecoder %+v %q %v", off+len(p), g, got.Text(), gotKinds, w, want.Text(), wantKinds)
		}
		if off <= rewind && rewind < off+split {
			got.Rewind(got.Complete())
			want.Rewind(want.Complete())
		}
	}
	return ""
}

func TestTrackerReadsEventsAsTheDecoderDid(t *testing.T) {
	streams := append(realStreams, corpusStreams(t)...)
	for _, e := range oddEvents {
		streams = append(streams, "event: x\ndata: "+e+"\n\n", "data: "+e+"\n\ndata: "+e+"\n\n")
	}
	for i, s := range streams {
		for _, split := range []int{1, 3, 64, len(s)} {
			if d := differ([]byte(s), split, len(s)/2); d != "" {
				t.Errorf("stream %d %.200q in pieces of %d: %s", i, s, split, d)
			}
		}
	}
}

// FuzzTrackerReadsEventsAsTheDecoderDid holds the scanner's tracker equal
// to the one that decoded every event with encoding/json, over the
// providers' real streams and events that only an exact reader reads
// right. Its seeds run with every go test.
func FuzzTrackerReadsEventsAsTheDecoderDid(f *testing.F) {
	for _, s := range append(realStreams, corpusStreams(f)...) {
		f.Add([]byte(s), 7, len(s)/2)
	}
	for _, e := range oddEvents {
		if len(e) < 1000 {
			f.Add([]byte("data: "+e+"\n\n"), 5, -1)
		}
	}
	f.Fuzz(func(t *testing.T, stream []byte, split, rewind int) {
		if split <= 0 || split > len(stream) {
			split = len(stream)
		}
		if d := differ(stream, split, rewind); d != "" {
			t.Fatalf("%q in pieces of %d: %s", stream, split, d)
		}
	})
}

// TestTrackerReadsWithoutAllocating checks what the scanner is for: no
// allocation an event once a stream is under way.
func TestTrackerReadsWithoutAllocating(t *testing.T) {
	for i, s := range realStreams {
		var tr Tracker
		tr.Write([]byte(s)) // warm: the tracker's buffers, the chat map
		stream := []byte(s)
		if cut := bytes.LastIndex(stream, []byte("data: [DONE]")); cut > 0 {
			stream = stream[:cut]
		}
		allocs := testing.AllocsPerRun(100, func() {
			tr.Rewind(tr.Complete())
			tr.text, tr.textN = tr.text[:0], 0
			tr.Write(stream)
		})
		if tr.Errored() {
			continue // the first error event's data is kept: a copy a stream
		}
		if allocs > 0 {
			t.Errorf("stream %d: %.1f allocations a pass", i, allocs)
		}
	}
}

// BenchmarkTrackerWrite is the tracker alone over each real stream, fed
// whole: ns and allocations an event.
func BenchmarkTrackerWrite(b *testing.B) {
	for i, s := range realStreams {
		var tr Tracker
		stream := []byte(s)
		tr.Write(stream)
		events := len(splitEvents(s))
		b.Run(fmt.Sprintf("%d-%s", i, tr.Dialect()), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				tr.Rewind(tr.Complete())
				tr.text, tr.textN = tr.text[:0], 0
				tr.Write(stream)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// splitEvents splits a stream at its blank lines, near enough to count
// its events.
func splitEvents(s string) []string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	return strings.Split(strings.TrimSpace(s), "\n\n")
}

// TestTrackerDropsTheStorageOfAHugeEvent checks that one event of
// thousands of choices, or a string of a megabyte with escapes, does not
// keep its storage for the rest of the stream.
func TestTrackerDropsTheStorageOfAHugeEvent(t *testing.T) {
	var tr Tracker
	huge := "data: {\"choices\":[" + strings.Repeat("{\"delta\":{\"content\":\"x\"}},", 5000) + "{}],\"type\":\"" + strings.Repeat("\\n", 1<<20) + "\"}\n\n"
	tr.Write([]byte(huge))
	tr.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\n"))
	if c := cap(tr.ev.choices); c > maxKeptElems {
		t.Errorf("%d choices kept", c)
	}
	if c := cap(tr.unquoted) + cap(tr.typ); c > 2*maxKeptBytes {
		t.Errorf("%d bytes of strings kept", c)
	}
	if tr.TextBytes() != 5001 {
		t.Errorf("text %d bytes, want 5001", tr.TextBytes())
	}
}
