package cost

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/rebound-go/rebound/internal/provider"
)

// What an HTTP attempt may use, and what it reports it used, in the
// dialects rebound.Transport speaks: OpenAI's Chat Completions and
// Responses, Anthropic's Messages, Gemini's generateContent, and the
// servers that copy them.

// bytesPerToken is the estimate of input: a token for every 4 bytes of
// the request body, a common rule for English text (scripts that take
// more tokens a byte, and the tools a provider adds on its side, can pass
// it: a cap is passed only by an attempt whose use passes its estimate).
const bytesPerToken = 4

// Defaults of what a request that does not say is held at: its output, with
// no output cap (the providers' defaults reach a model's maximum), and its
// input, when it refers to a conversation stored with the provider
// (previous_response_id, conversation), a model's context window.
const (
	defaultMaxOutput = 32768
	defaultMaxInput  = 200000
)

// mediaTokens is what a part of the prompt that refers to an image or a
// file is held at: a few bytes of URL or file id stand for a picture
// providers count in hundreds to thousands of tokens.
const mediaTokens = 2000

// unknownBody is the size assumed for a body whose length is unknown and
// that cannot be read again.
const unknownBody = 1 << 20

// request is what an HTTP attempt says of what it may use.
type request struct {
	model string
	input int64 // estimated from the body
	// output is its output cap, for all its answers; -1: it names none.
	output int64
	// stored says it continues a conversation kept by the provider, whose
	// size it does not show.
	stored bool
}

// mediaPart matches a part of a prompt that refers to an image or a file.
var mediaPart = regexp.MustCompile(`"type"\s*:\s*"(?:image|image_url|input_image|document|file|input_file)"|"(?:fileData|file_data)"`)

// readRequest reads what req may use: its model (the body's "model", else
// a Gemini or Azure path's, else the query's), its input, from the body's
// size (decoded, if it is gzip) and the media it refers to, and its output
// cap times the answers it asks for (n, candidateCount).
func readRequest(req *http.Request) request {
	var (
		body []byte
		size int64
	)
	switch {
	case req.GetBody != nil:
		if rc, err := req.GetBody(); err == nil {
			var r io.Reader = rc
			if strings.EqualFold(req.Header.Get("Content-Encoding"), "gzip") {
				if zr, err := gzip.NewReader(rc); err == nil {
					r = zr
				}
			}
			body, _ = io.ReadAll(io.LimitReader(r, 64<<20))
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
		N                   *int64 `json:"n"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
		PreviousResponseID  string `json:"previous_response_id"`
		Conversation        any    `json:"conversation"`
		GenerationConfig    struct {
			MaxOutputTokens *int64 `json:"maxOutputTokens"`
			CandidateCount  *int64 `json:"candidateCount"`
		} `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &fields) // a body that is not JSON is the provider's to refuse
	r := request{model: fields.Model, output: -1,
		input:  (size+bytesPerToken-1)/bytesPerToken + mediaTokens*int64(len(mediaPart.FindAllIndex(body, -1))),
		stored: fields.PreviousResponseID != "" || fields.Conversation != nil}
	if r.model == "" {
		r.model = pathModel(req.URL.Path)
	}
	if r.model == "" {
		r.model = req.URL.Query().Get("model")
	}
	for _, n := range []*int64{fields.MaxTokens, fields.MaxCompletionTokens, fields.MaxOutputTokens, fields.GenerationConfig.MaxOutputTokens} {
		if n != nil && *n >= 0 {
			r.output = *n
			break
		}
	}
	answers := int64(1)
	for _, n := range []*int64{fields.N, fields.GenerationConfig.CandidateCount} {
		if n != nil && *n > 1 {
			answers = *n
		}
	}
	if r.output >= 0 {
		r.output = min(r.output, math.MaxInt32) * min(answers, math.MaxInt16)
	} else if answers > 1 {
		r.output = -answers // no cap, several answers: -n times the default
	}
	return r
}

// most is the most r may use, priced by p's limits where r does not say.
func (r request) most(p Price) Usage {
	u := Usage{InputTokens: r.input, OutputTokens: r.output}
	if r.output < 0 {
		u.OutputTokens = -r.output * p.maxOutput()
	}
	if r.stored {
		u.InputTokens += p.maxInput()
	}
	return u
}

// pathModel returns the model of a Gemini path (".../models/NAME:verb") or
// an Azure OpenAI one (".../deployments/NAME/...").
func pathModel(path string) string {
	if name := provider.GeminiModel(path); name != "" {
		return name
	}
	if _, rest, ok := strings.Cut(path, "/deployments/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	return ""
}

// WatchUsage replaces resp.Body with one that reads the token usage the
// response reports as the caller reads it (a JSON body, or an event
// stream's usage events, in the dialects rebound.Transport speaks: OpenAI's
// Chat Completions and Responses, Anthropic's Messages, Gemini), and calls
// done once, when the body ends or is closed, with the largest counts seen
// (cache tokens are input) and whether they are final: a whole body's, or
// a stream's final usage event (OpenAI's usage chunk, Anthropic's
// message_delta, response.completed, a finished Gemini chunk). A stream
// cut short, or read only in part, has no final count. WithCaps settles an
// attempt so; rebound proxy logs the tokens of each request so.
func WatchUsage(resp *http.Response, done func(u Usage, final bool)) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &usageBody{body: resp.Body, done: done, stream: mt == "text/event-stream"}
}

// usageBody is a response body that reads the usage the response reports
// as the caller reads it, and tells done when it ends or is closed.
type usageBody struct {
	body   io.ReadCloser
	done   func(u Usage, final bool)
	stream bool // an event stream, read a line at a time; else one JSON document

	mu    sync.Mutex // guards the fields below: Close may come from another goroutine
	line  []byte     // the stream's line so far, or the document so far
	final bool       // a stream's final usage came
	usage Usage
	found bool
	ended bool // done was called
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
	if ok && bytes.Contains(data, []byte(`"usage`)) { // usage, usageMetadata
		b.read(bytes.TrimSpace(data))
	}
}

// usageKey begins every key usage is reported under ("usage",
// "usageMetadata"), nested or not.
var usageKey = []byte(`"usage`)

// end tells done of the usage, once the body has ended or been closed.
func (b *usageBody) end() {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return
	}
	b.ended = true
	if !b.stream && len(b.line) > 0 {
		b.read(b.line)
		b.final = b.found // a whole document's usage is its last word
		b.line = nil
	}
	u, final := b.usage, b.final
	b.mu.Unlock()
	b.done(u, final)
}

// read takes the usage a JSON document (a body, or an event's data)
// reports, in any of the dialects. Counts are cumulative in every dialect
// (Anthropic's message_delta, Gemini's chunks), so the largest seen is
// the attempt's; cache tokens are input. A document with a count that is
// negative, or too large to add up, says nothing.
func (b *usageBody) read(doc []byte) {
	if !bytes.Contains(doc, usageKey) {
		return // most of a stream's events: not worth decoding
	}
	var d usageDoc
	if json.Unmarshal(doc, &d) != nil {
		return
	}
	var in, out []int64
	for _, c := range []*usageCounts{d.Usage, d.Message.Usage, d.Response.Usage} {
		if c != nil {
			in = append(in, c.PromptTokens, c.InputTokens, c.CacheCreationInputTokens, c.CacheReadInputTokens)
			out = append(out, c.CompletionTokens, c.OutputTokens)
		}
	}
	if m := d.UsageMetadata; m != nil {
		in = append(in, m.PromptTokenCount)
		out = append(out, m.CandidatesTokenCount, m.ThoughtsTokenCount)
	}
	if len(in) == 0 {
		return
	}
	sumIn, okIn := sum(in)
	sumOut, okOut := sum(out)
	if !okIn || !okOut {
		return
	}
	b.usage.InputTokens = max(b.usage.InputTokens, sumIn)
	b.usage.OutputTokens = max(b.usage.OutputTokens, sumOut)
	b.found = true
	finished := false
	for _, c := range d.Candidates {
		finished = finished || c.FinishReason != ""
	}
	b.final = b.final || d.Usage != nil || d.Response.Usage != nil || d.UsageMetadata != nil && finished
}

// sum adds counts, false if one is negative or the sum would not fit.
func sum(counts []int64) (int64, bool) {
	var total int64
	for _, n := range counts {
		if n < 0 || total > math.MaxInt64/2-n {
			return 0, false
		}
		total += n
	}
	return total, true
}

// usageDoc is where the dialects put a response's usage: OpenAI's and
// Anthropic's "usage" (final: the chunk or message_delta that ends a
// stream), Anthropic's message_start "message" (not final), the Responses
// API's events' "response" (final: response.completed), Gemini's
// "usageMetadata" (final in the chunk that finishes a candidate).
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
	Candidates []struct {
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
}

// usageCounts are the token counts of OpenAI's Chat Completions (prompt,
// completion) and of the Responses API and Anthropic (input, output, and
// Anthropic's cache writes and reads).
type usageCounts struct {
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}
