package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
	"github.com/rebound-go/rebound/internal/usage"
)

// A rejection is a request the server cannot act on: it names an unknown
// mode or profile or has a malformed header.
type rejection struct {
	typ     string // error type in the plain profile
	culprit string // what the request named; the code in the plain profile
	message string
}

// A call is one request being answered.
type call struct {
	srv      *Server         // the server answering it
	ctx      context.Context // the request's, done when its client goes away
	n        uint64          // sequence number
	mode     string
	profile  *profile
	fault    fault
	mishap   mishap
	wait     int64     // seconds of the wait hint a failure carries, or noHint
	cutAfter int       // stream-cut mode: pieces of text a breaking stream sends, at most len(successChunks)
	text     *textPlan // text mode's delivery; nil in other modes
	req      request   // the request body
	input    int       // the input tokens of req
	tally    tallyID   // what the call is tallied under
	out      output    // the answer text a success serves
	answers  int       // how many answers a success serves, each out's text: 1 unless the request asks for more
	thoughts int       // the thought tokens a success is billed beyond its answers (Gemini's thinking budget)
	apiKey   string    // the key the request carries, "" for none
	quotas   *quotas   // what the answer announces of its key's limits; nil: the profile's defaults
	// dialect is the one c's usage is reported in, nil for none (plain);
	// cacheRead and cacheWrite are the input tokens of c billed as read
	// from the prompt cache and written into it (see useCache).
	dialect               *usage.Dialect
	cacheRead, cacheWrite int
	// delivered is how many bytes of answer text have gone to the client:
	// the whole text of an answer, or the pieces a stream sent.
	delivered int
}

// noHint is call.wait for a failure that carries no wait hint.
const noHint = -1

// newCall reads the mode, profile and wait hint of r. If r names something
// the server does not know, it returns the rejection to answer with and a
// call good enough to answer it in.
func (s *Server) newCall(r *http.Request) (*call, *rejection) {
	c := &call{srv: s, ctx: r.Context(), profile: plain, wait: noHint, req: readRequest(r), answers: 1, apiKey: apiKey(r)}
	c.input = c.req.inputTokens()
	c.out = textOutput(successText, successEnds)
	c.tally = tallyID{r.Header.Get(HeaderTally), c.req.Model}
	name := r.Header.Get(HeaderProfile)
	if name == "" {
		name = s.cfg.Profile
	}
	p := profileNamed(name)
	if p == nil {
		return c, &rejection{"chaos_unknown_profile", name, unknownProfileError(name).Error()}
	}
	c.profile = p
	if p.dialect != nil {
		c.dialect = p.dialect(r.URL.Path)
	}
	if p == gemini {
		c.tally.model = provider.GeminiModel(r.URL.Path)
	}

	c.mode = r.Header.Get(HeaderMode)
	if c.mode == "" {
		c.mode = r.URL.Query().Get(QueryMode)
	}
	if c.mode == "" {
		c.mode = s.cfg.Mode
	}
	if !knownMode(c.mode) {
		return c, &rejection{"chaos_unknown_mode", c.mode, unknownModeError(c.mode).Error()}
	}

	if v := r.Header.Get(HeaderRetryAfter); v != "" {
		secs, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			msg := fmt.Sprintf("chaos: %s %q is not a whole number of seconds", HeaderRetryAfter, v)
			return c, &rejection{"chaos_bad_retry_after", v, msg}
		}
		c.wait = int64(secs)
	} else if c.mode == ModeRetryAfter || s.cfg.HintEveryFailure {
		c.wait = s.retryAfter
	}

	if v := r.Header.Get(HeaderContextTokens); v != "" {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			msg := fmt.Sprintf("chaos: %s %q is not a whole number of tokens", HeaderContextTokens, v)
			return c, &rejection{"chaos_bad_context_tokens", v, msg}
		}
		if c.req.asks.kept {
			c.input += int(n)
		}
	}

	if c.mode == ModeStreamCut {
		c.cutAfter = min(s.cfg.CutAfter, len(successChunks))
		if v := r.Header.Get(HeaderCutAfter); v != "" {
			k, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				msg := fmt.Sprintf("chaos: %s %q is not a whole number of events", HeaderCutAfter, v)
				return c, &rejection{"chaos_bad_cut_after", v, msg}
			}
			c.cutAfter = int(min(k, uint64(len(successChunks))))
		}
	}
	if c.mode == ModeText {
		if rej := c.readTextHeaders(r); rej != nil {
			return c, rej
		}
	}
	return c, nil
}

// answer writes c's success or failure.
func (c *call) answer(w http.ResponseWriter, r *http.Request) {
	p := c.profile
	h := w.Header()
	c.setID(h)
	if p.limits != nil {
		switch {
		case c.quotas != nil:
			p.limits(h, *c.quotas)
		case c.fault == faultNone:
			q := p.quotas
			q.reset = time.Second
			p.limits(h, q)
		case c.mode == ModeRetryAfter:
			q := p.exhausted
			q.reset = time.Duration(c.wait) * time.Second
			p.limits(h, q)
		}
	}
	if c.fault == faultNone {
		if maxTokens, ok := c.req.outputCap(); ok {
			c.out.limit(maxTokens)
		}
		c.useCache()
		p.success(w, r, c)
		return
	}
	if c.wait != noHint && p.hint != nil {
		p.hint(h, c.wait)
	}
	e := p.errors[c.fault]
	if p.errorHeaders != nil {
		p.errorHeaders(h, e)
	}
	writeJSON(w, e.status, p.errorBody(e, c))
}

// reject answers c with rej: in the plain profile in the server's own
// words, in the others as the provider's invalid request. It carries no wait
// hint.
func (c *call) reject(w http.ResponseWriter, rej rejection) {
	p := c.profile
	e := apiError{status: http.StatusBadRequest, typ: rej.typ, code: rej.culprit, message: rej.message}
	if p != plain {
		e = p.errors[faultBadRequest]
		e.message = rej.message
	}
	c.wait = noHint
	c.setID(w.Header())
	if p.errorHeaders != nil {
		p.errorHeaders(w.Header(), e)
	}
	writeJSON(w, e.status, p.errorBody(e, c))
}

// requestID returns the request id the openai and anthropic profiles send.
func (c *call) requestID() string {
	return "req_chaos_" + strconv.FormatUint(c.n, 10)
}

func (c *call) setID(h http.Header) {
	if c.profile.idHeader != "" {
		h.Set(c.profile.idHeader, c.requestID())
	}
}

// What every success outside text mode says, and the pieces a stream sends
// it in.
const successText = "Hello from chaos."

var successChunks = []string{"Hello", " from", " chaos."}

// successEnds are the end offsets of successChunks in successText.
var successEnds = func() []int {
	var ends []int
	n := 0
	for _, piece := range successChunks {
		n += len(piece)
		ends = append(ends, n)
	}
	return ends
}()

// reply returns the text of c's success, whole.
func (c *call) reply() string {
	return c.out.text()
}

// deliver records that the whole text of c's success goes to the client in
// one answer, and returns it.
func (c *call) deliver() string {
	c.delivered = len(c.out.text())
	return c.out.text()
}

// outputTokens returns the output tokens of c's success, whole: its
// answers' and its thoughts.
func (c *call) outputTokens() int {
	return c.answers*tokens(len(c.out.text())) + c.thoughts
}

// finish returns the finish reason of c's success: stopped, or cut short
// by the request's output cap.
func (c *call) finish(stopped, capped string) string {
	if c.out.truncated() {
		return capped
	}
	return stopped
}

// A request is what the server reads from a request body.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	// The conversation (see request.turns) and the system's text.
	Messages          json.RawMessage `json:"messages"`          // chat completions, Anthropic, plain
	Input             json.RawMessage `json:"input"`             // the Responses API
	Contents          json.RawMessage `json:"contents"`          // Gemini
	System            json.RawMessage `json:"system"`            // Anthropic: a string or text blocks
	Instructions      json.RawMessage `json:"instructions"`      // the Responses API
	SystemInstruction json.RawMessage `json:"systemInstruction"` // Gemini: a Content

	// The tools offered, part of a prompt's cached prefix.
	Tools      json.RawMessage `json:"tools"`      // OpenAI, Anthropic, Gemini
	ToolConfig json.RawMessage `json:"toolConfig"` // Bedrock's tools, Gemini's way of calling them

	asks asks // its output caps, answers, thinking budget and kept context
	size int  // the bytes of the body read
}

// maxBody is how much of a request body readRequest looks at.
const maxBody = 1 << 20

// readRequest reads the JSON body of r, at most maxBody bytes of it. A body
// it cannot read or parse is the zero request; one that is JSON with a
// field of the wrong type has no prompt, but what it asks of the answer
// (see readAsks) stands.
func readRequest(r *http.Request) request {
	var req request
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return request{}
	}
	if json.Unmarshal(data, &req) != nil {
		req = request{} // a field of the wrong type: the body has no prompt, but may still cap or multiply its answers
	} else {
		req.size = len(data)
	}
	req.asks = readAsks(data)
	return req
}
