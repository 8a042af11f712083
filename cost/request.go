package cost

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// What an HTTP attempt may use, and what it reports it used, in the
// dialects rebound.Transport speaks: OpenAI's Chat Completions and
// Responses, Anthropic's Messages, Gemini's generateContent, and the
// servers that copy them.

// bytesPerToken is the estimate of input: a token for every 4 bytes of
// the request body, a common rule for English text; the body's JSON only
// adds bytes to the text a provider counts.
const bytesPerToken = 4

// unknownBody is the size assumed for a body whose length is unknown and
// that cannot be read again.
const unknownBody = 1 << 20

// estimateRequest returns the target (the model) of req and the most it
// may use: its input, estimated from the body's size, and its output cap.
func estimateRequest(req *http.Request) (string, Usage) {
	var (
		body []byte
		size int64
	)
	switch {
	case req.GetBody != nil:
		if rc, err := req.GetBody(); err == nil {
			body, _ = io.ReadAll(io.LimitReader(rc, 64<<20))
			rc.Close()
		}
		size = int64(len(body))
	case req.Body != nil && req.Body != http.NoBody:
		// A body sent once, unread: its length is all there is.
		if size = req.ContentLength; size < 0 {
			size = unknownBody
		}
	}
	var fields struct {
		Model               string `json:"model"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
		GenerationConfig    struct {
			MaxOutputTokens *int64 `json:"maxOutputTokens"`
		} `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &fields) // a body that is not JSON is the provider's to refuse
	model := fields.Model
	if model == "" {
		model = geminiModel(req.URL.Path)
	}
	out := int64(DefaultMaxOutput)
	for _, n := range []*int64{fields.MaxTokens, fields.MaxCompletionTokens, fields.MaxOutputTokens, fields.GenerationConfig.MaxOutputTokens} {
		if n != nil && *n >= 0 {
			out = *n
			break
		}
	}
	return model, Usage{InputTokens: (size + bytesPerToken - 1) / bytesPerToken, OutputTokens: out}
}

// geminiModel returns the model of a Gemini path, ".../models/NAME:verb".
func geminiModel(path string) string {
	_, rest, ok := strings.Cut(path, "/models/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

// usageBody is a response body that reads the usage the response reports
// as the caller reads it, and settles its admission when it ends or is
// closed: with that usage, or, when none came, with what was held.
type usageBody struct {
	body io.ReadCloser
	a    *admission

	stream bool // an event stream, read a line at a time; else one JSON document

	mu    sync.Mutex // guards the fields below: Close may come from another goroutine
	line  []byte     // the stream's line so far, or the document so far
	usage Usage
	found bool
}

// maxUsageLine bounds a line of a stream, or a whole JSON document, kept to
// be read for its usage; past it, the usage it holds is not seen (and the
// attempt settles with its hold).
const maxUsageLine = 4 << 20

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.mu.Lock()
	b.take(p[:n])
	b.mu.Unlock()
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *usageBody) Close() error {
	err := b.body.Close()
	b.end()
	return err
}

// take reads p, the next bytes of the body. b.mu is held.
func (b *usageBody) take(p []byte) {
	if !b.stream {
		if len(b.line)+len(p) <= maxUsageLine {
			b.line = append(b.line, p...)
		} else {
			b.line = b.line[:0:0] // too long to keep: its usage is not seen
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.line)+len(p) <= maxUsageLine {
				b.line = append(b.line, p...)
			}
			return
		}
		b.line = append(b.line, p[:i]...)
		b.event(b.line)
		b.line, p = b.line[:0], p[i+1:]
	}
}

// event reads one line of an event stream.
func (b *usageBody) event(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if ok && bytes.Contains(data, []byte("sage")) { // usage, usageMetadata
		b.read(bytes.TrimSpace(data))
	}
}

// end settles the admission, once the body has ended or been closed.
func (b *usageBody) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stream && len(b.line) > 0 {
		b.read(b.line)
		b.line = nil
	}
	if b.found {
		b.a.settle(b.a.price.Of(b.usage))
	} else {
		b.a.settle(b.a.need)
	}
}

// read takes the usage a JSON document (a body, or an event's data)
// reports, in any of the dialects. Counts are cumulative in every dialect
// (Anthropic's message_delta, Gemini's chunks), so the largest seen is
// the attempt's.
func (b *usageBody) read(doc []byte) {
	var d usageDoc
	if json.Unmarshal(doc, &d) != nil {
		return
	}
	note := func(in, out int64) {
		b.usage.InputTokens = max(b.usage.InputTokens, in)
		b.usage.OutputTokens = max(b.usage.OutputTokens, out)
		b.found = true
	}
	for _, c := range []*usageCounts{d.Usage, d.Message.Usage, d.Response.Usage} {
		if c != nil {
			note(c.PromptTokens+c.InputTokens, c.CompletionTokens+c.OutputTokens)
		}
	}
	if m := d.UsageMetadata; m != nil {
		note(m.PromptTokenCount, m.CandidatesTokenCount+m.ThoughtsTokenCount)
	}
}

// usageDoc is where the dialects put a response's usage: OpenAI's and
// Anthropic's "usage", Anthropic's message_start "message", the Responses
// API's events' "response", Gemini's "usageMetadata".
type usageDoc struct {
	Usage   *usageCounts `json:"usage"`
	Message struct {
		Usage *usageCounts `json:"usage"`
	} `json:"message"`
	Response struct {
		Usage *usageCounts `json:"usage"`
	} `json:"response"`
	UsageMetadata *struct {
		PromptTokenCount     int64 `json:"promptTokenCount"`
		CandidatesTokenCount int64 `json:"candidatesTokenCount"`
		ThoughtsTokenCount   int64 `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
}

// usageCounts are the token counts of OpenAI's Chat Completions (prompt,
// completion) and of the Responses API and Anthropic (input, output).
type usageCounts struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
}
