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

// The data of the in-band error event that ends a broken stream, in each
// profile's words. The Responses API's has the event's sequence number put
// in.
const (
	plainStreamError     = `{"error":{"message":"chaos: injected stream error","type":"chaos_injected"}}`
	chatStreamError      = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
	responseStreamError  = `{"type":"error","code":"server_error","message":"The server had an error while processing your request.","sequence_number":%d}`
	anthropicStreamError = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	geminiStreamError    = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
)

// content returns the pieces of text c's stream sends and whether the
// stream then breaks: all of them, or, for a stream that stream-cut mode
// breaks, the first cutAfter of them.
func (c *call) content() (pieces []string, broken bool) {
	pieces = c.out.pieces()
	if c.mishap == mishapNone {
		return pieces, false
	}
	return pieces[:min(c.cutAfter, len(pieces))], true
}

// breakOff ends s, c's broken stream, and counts it: with the in-band error
// event name (none if "") and data, or by aborting the handler, which makes
// the server end the connection without ending the body (or reset the
// stream, over HTTP/2).
func (c *call) breakOff(s *eventStream, name, data string) {
	c.srv.countStream(c.mishap)
	if c.mishap == mishapAbort {
		s.rc.Flush() // the header, should no event have sent it yet
		panic(http.ErrAbortHandler)
	}
	s.sendRaw(name, data)
}

// sendPieces sends the pieces of text of c's stream s with emit, which is
// told whether a piece is the last before the stream's normal end. It
// reports whether the stream goes on to its end events; if not, the stream
// has been broken off, with the in-band error event errName (none if "")
// and errData() where it ends with one, or its client has gone away.
func (c *call) sendPieces(s *eventStream, emitText func(piece string, last bool), errName string, errData func() string) bool {
	emit := func(piece string, last bool) {
		c.delivered += len(piece)
		emitText(piece, last)
	}
	if c.text != nil {
		return c.deliverText(s, emit, errName, errData)
	}
	pieces, broken := c.content()
	for i, piece := range pieces {
		emit(piece, !broken && i == len(pieces)-1)
	}
	if broken {
		c.breakOff(s, errName, errData())
		return false
	}
	return true
}

// inBand returns errData for an in-band error event that never changes.
func inBand(data string) func() string {
	return func() string { return data }
}

// completed counts c's stream, which ran to its end, if c is in stream-cut
// mode.
func (c *call) completed() {
	if c.mode == ModeStreamCut {
		c.srv.countStream(mishapNone)
	}
}

// streamPlain streams the plain profile's success: one {"delta":…} event per
// piece of text, then [DONE].
func streamPlain(w http.ResponseWriter, c *call) {
	s := startStream(w)
	emit := func(piece string, _ bool) { s.send("", object{"delta": piece}) }
	if !c.sendPieces(s, emit, "", inBand(plainStreamError)) {
		return
	}
	s.sendRaw("", "[DONE]")
	c.completed()
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
	c.answers = c.req.asks.answers
	choice := func(delta object, finish any) []object {
		choices := make([]object, c.answers)
		for i := range choices {
			choices[i] = object{"index": i, "delta": delta, "logprobs": nil, "finish_reason": finish}
		}
		return choices
	}
	s.send("", chunk(choice(object{"role": "assistant", "content": ""}, nil)))
	emit := func(piece string, _ bool) { s.send("", chunk(choice(object{"content": piece}, nil))) }
	if !c.sendPieces(s, emit, "", inBand(chatStreamError)) {
		return
	}
	s.send("", chunk(choice(object{}, c.finish("stop", "length"))))
	if usage {
		last := chunk([]object{})
		last["usage"] = openAIChatUsage(c)
		s.send("", last)
	}
	s.sendRaw("", "[DONE]")
	c.completed()
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
	delta := func(piece string, _ bool) {
		emit("response.output_text.delta", inPart(object{"delta": piece, "logprobs": []any{}}))
	}
	if !c.sendPieces(s, delta, "error", func() string { return fmt.Sprintf(responseStreamError, seq) }) {
		return
	}
	text, status := c.reply(), c.responseStatus()
	emit("response.output_text.done", inPart(object{"text": text, "logprobs": []any{}}))
	emit("response.content_part.done", inPart(object{"part": openAIOutputText(text)}))
	done := openAIMessage(c, status, text)
	emit("response.output_item.done", object{"output_index": 0, "item": done})
	emit("response."+status, object{"response": openAIResponse(c, model, status, []any{done})})
	c.completed()
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
	delta := func(piece string, _ bool) {
		emit("content_block_delta", object{"index": 0, "delta": object{"type": "text_delta", "text": piece}})
	}
	if !c.sendPieces(s, delta, "error", inBand(anthropicStreamError)) {
		return
	}
	emit("content_block_stop", object{"index": 0})
	emit("message_delta", object{
		"delta": object{"stop_reason": c.finish("end_turn", "max_tokens"), "stop_sequence": nil},
		"usage": object{"output_tokens": c.outputTokens()},
	})
	emit("message_stop", object{})
	c.completed()
}

// streamGemini streams a Gemini answer as one GenerateContentResponse per
// piece of text, the last with the finish reason and usage. In a broken
// stream none has them. An answer without text, as a continuation from the
// whole of it, is one response with an empty text.
func streamGemini(w http.ResponseWriter, c *call, model string) {
	s := startStream(w)
	ended := false
	emit := func(piece string, last bool) {
		s.send("", geminiResponse(c, model, piece, last))
		ended = last
	}
	if !c.sendPieces(s, emit, "", inBand(geminiStreamError)) {
		return
	}
	if !ended {
		s.send("", geminiResponse(c, model, "", true))
	}
	c.completed()
}
