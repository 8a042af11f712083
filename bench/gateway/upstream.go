package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
)

// completion is the canned answer to a plain chat completion: the size and
// shape of a short real one, so that a gateway parsing it does real work.
const completion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}`

// streamChunks are the events of a streamed answer, each flushed on its own
// as a provider does, then the stream's end.
var streamChunks = []string{
	`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello!"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" How can I"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" help you today?"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}`,
	`[DONE]`,
}

// streamFlag is how a request asks for a streamed answer. The harness
// writes its own request bodies, so a byte search is exact here and keeps
// the upstream as cheap as it can be.
var streamFlag = []byte(`"stream":true`)

// answer is the upstream's only handler: it reads the whole request, as a
// provider does, and answers every path with the canned completion, streamed
// when the request asks for it.
func answer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !bytes.Contains(body, streamFlag) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(completion)))
		io.WriteString(w, completion)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	for _, chunk := range streamChunks {
		io.WriteString(w, "data: "+chunk+"\n\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
}
