package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// An eventStream writes server-sent events, flushing each as it goes. A
// write to a client that has gone away fails quietly, like the rest of the
// stream.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startStream sends the header of a successful event stream.
func startStream(w http.ResponseWriter) *eventStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

// send writes an event named name (none if "") with v as its JSON data.
func (s *eventStream) send(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // the server's own values always encode
	}
	s.sendRaw(name, string(data))
}

func (s *eventStream) sendRaw(name, data string) {
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.rc.Flush() // fails only where flushing is unsupported; the events still arrive
}

// streamChat streams an OpenAI chat completion: a chunk with the role, one
// per piece of text, one with the finish reason, the usage if asked for, and
// [DONE].
func streamChat(w http.ResponseWriter, c *call, model string, usage bool) {
	s := startStream(w)
	created := time.Now().Unix()
	chunk := func(choices []object) object {
		return object{
			"id":      "chatcmpl-chaos-" + strconv.FormatUint(c.n, 10),
			"object":  "chat.completion.chunk",
			"created": created,
			"model":   model,
			"choices": choices,
		}
	}
	choice := func(delta object, finish any) []object {
		return []object{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	}
	s.send("", chunk(choice(object{"role": "assistant", "content": ""}, nil)))
	for _, piece := range successChunks {
		s.send("", chunk(choice(object{"content": piece}, nil)))
	}
	s.send("", chunk(choice(object{}, "stop")))
	if usage {
		last := chunk([]object{})
		last["usage"] = openAIChatUsage()
		s.send("", last)
	}
	s.sendRaw("", "[DONE]")
}

// streamResponse streams an OpenAI Responses API response, numbering its
// events in sequence.
func streamResponse(w http.ResponseWriter, c *call, model string) {
	s := startStream(w)
	seq := 0
	emit := func(typ string, fields object) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		s.send(typ, fields)
	}
	itemID := "msg_chaos_" + strconv.FormatUint(c.n, 10)
	inPart := func(fields object) object {
		fields["item_id"] = itemID
		fields["output_index"] = 0
		fields["content_index"] = 0
		return fields
	}

	emit("response.created", object{"response": openAIResponse(c, model, "in_progress", []any{})})
	emit("response.in_progress", object{"response": openAIResponse(c, model, "in_progress", []any{})})
	emit("response.output_item.added", object{"output_index": 0, "item": openAIMessage(c, "in_progress", "")})
	emit("response.content_part.added", inPart(object{"part": openAIOutputText("")}))
	for _, piece := range successChunks {
		emit("response.output_text.delta", inPart(object{"delta": piece, "logprobs": []any{}}))
	}
	emit("response.output_text.done", inPart(object{"text": successText, "logprobs": []any{}}))
	emit("response.content_part.done", inPart(object{"part": openAIOutputText(successText)}))
	done := openAIMessage(c, "completed", successText)
	emit("response.output_item.done", object{"output_index": 0, "item": done})
	emit("response.completed", object{"response": openAIResponse(c, model, "completed", []any{done})})
}

// streamMessage streams an Anthropic message: its start, a text block
// delivered piece by piece, a ping, the stop reason and usage, and its stop.
func streamMessage(w http.ResponseWriter, c *call, model string) {
	s := startStream(w)
	emit := func(typ string, fields object) {
		fields["type"] = typ
		s.send(typ, fields)
	}
	emit("message_start", object{"message": anthropicMessage(c, model, []any{}, "", 1)})
	emit("content_block_start", object{"index": 0, "content_block": object{"type": "text", "text": ""}})
	emit("ping", object{})
	for _, piece := range successChunks {
		emit("content_block_delta", object{"index": 0, "delta": object{"type": "text_delta", "text": piece}})
	}
	emit("content_block_stop", object{"index": 0})
	emit("message_delta", object{
		"delta": object{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": object{"output_tokens": outputTokens},
	})
	emit("message_stop", object{})
}

// streamGemini streams a Gemini answer as one GenerateContentResponse per
// piece of text, the last with the finish reason and usage.
func streamGemini(w http.ResponseWriter, c *call, model string) {
	s := startStream(w)
	for i, piece := range successChunks {
		s.send("", geminiResponse(c, model, piece, i == len(successChunks)-1))
	}
}
