package cost

import (
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/rebound-go/rebound/internal/provider"
)

// What an HTTP attempt may use, and what it reports it used, in the
// dialects rebound.Transport speaks: OpenAI's Chat Completions and
// Responses, Anthropic's Messages, Gemini's generateContent, and the
// servers that copy them.
//
// The estimate of what a request may use must never be lower than what a
// server bills for it, whichever server reads it, and servers read a body
// differently: Python's and JavaScript's parsers match keys exactly and
// keep the last of a duplicate, Go's match them whatever their case, a
// lenient server ignores a field it does not know where a strict one
// refuses the request, and Gemini takes its fields in camelCase and
// snake_case alike. So a figure that can only raise the estimate (an
// answer count, a reference to kept context, an output cap larger than
// the default) is taken from any key that some server might read as it,
// in any case or spelling, named once or many times; while what lowers it
// (an output cap below the default, a thinking budget of 0) is taken only
// from the exact key, at the place the dialect has it, with a positive
// number, in a body that is JSON throughout.

// bytesPerToken is the estimate of input: a token for every 4 bytes of
// the request body, a common rule for English text (scripts that take
// more tokens a byte, and the tools a provider adds on its side, can pass
// it: a cap is passed only by an attempt whose use passes its estimate).
const bytesPerToken = 4

// defaultMaxOutput is what the output of a request that names no output
// cap is held at, for each answer: the providers' defaults reach a model's
// maximum.
const defaultMaxOutput = 32768

// The largest context window each dialect's provider serves: what the
// input of a request that refers to context the provider keeps is held at,
// beyond its body, when its Price does not say.
const (
	// Gemini 1.5 Pro's 2 097 152 tokens (ai.google.dev/gemini-api/docs/models,
	// "Input token limit"); the later models take 1 048 576.
	geminiWindow = 2097152
	// GPT-4.1's 1 047 576 tokens (platform.openai.com/docs/models/gpt-4.1,
	// "Context window").
	openAIWindow = 1047576
	// Claude's 1 000 000 tokens with the context-1m-2025-08-07 beta
	// (docs.anthropic.com/en/docs/build-with-claude/context-windows);
	// 200 000 without it, which a request cannot be held to, since a
	// header it does not send would lower its estimate.
	anthropicWindow = 1000000
	// Any other: the largest of them.
	otherWindow = geminiWindow
)

// mediaTokens is what a part of the prompt that refers to an image is held
// at: a few bytes of URL or file id stand for a picture providers count in
// hundreds to thousands of tokens.
const mediaTokens = 2000

// Bounds on what a request is held at, so that the product of absurd
// figures does not overflow: an output cap of each answer, and a count of
// answers.
const (
	maxFigure  = math.MaxInt32
	maxAnswers = math.MaxInt16
)

// request is what an HTTP attempt says of what it may use.
type request struct {
	// models are the models it names: the body's (every key a server
	// might take for "model") and its path's, else its query's.
	models  []string
	dialect dialect
	topCaps []string // the output caps its endpoint has at the top of a body
	input   int64    // estimated from the body
	// output is the output cap of each answer; thoughts Gemini's thinking
	// budget, spent beyond it; predicted the tokens of a predicted output,
	// which a provider bills as output where it rejects them.
	output, thoughts figure
	predicted        int64
	answers          int64 // the answers it asks for of each prompt, at least 1
	prompts          int64 // the prompts a list of them holds (0: one prompt)
	// kept says it refers to context the provider keeps, whose size it
	// does not show: a conversation, a stored prompt, cached content, a
	// file by id or a document, tools the provider runs.
	kept bool
}

// A figure is a number of tokens a request names, possibly in several
// fields: the largest named, and whether that is all (else the request is
// held at a default as well).
type figure struct {
	largest int64
	// own says the dialect's own field names it, with a positive number
	// (for a thinking budget, zero included), in a body that is JSON
	// throughout; open says some field names it with a value that may
	// mean no limit (zero, negative, not a number), or in a way not every
	// server reads.
	own, open bool
}

// or returns f's tokens, held at least at def unless the request's own
// field alone names them.
func (f figure) or(def int64) int64 {
	if !f.own || f.open {
		return max(f.largest, def)
	}
	return f.largest
}

// readRequest reads what req may use: its models (the body's "model" and
// a Gemini or Azure path's, else the query's), its input, from the body's
// size (decoded as its Content-Encoding says), the images it refers to and
// the context the provider keeps that it refers to, and its output (see
// readBody). It returns an error wrapping ErrUnreadBody for a body it
// cannot read.
func readRequest(req *http.Request) (request, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return request{}, fmt.Errorf("%w: it is sent once, unbuffered", ErrUnreadBody)
		}
		rc, err := req.GetBody()
		if err != nil {
			return request{}, fmt.Errorf("%w: %w", ErrUnreadBody, err)
		}
		body, err = decodedBody(rc, req.Header.Values("Content-Encoding"))
		rc.Close()
		if err != nil {
			return request{}, fmt.Errorf("%w: %w", ErrUnreadBody, err)
		}
	}
	r := request{dialect: dialectOf(req), answers: 1}
	r.topCaps = topCaps(r.dialect, req.URL.Path)
	media := r.readBody(body)
	r.input = (int64(len(body))+bytesPerToken-1)/bytesPerToken + mediaTokens*media
	// Gemini serves the model its path names, and Azure OpenAI its
	// deployment's, whatever the body says: it counts too.
	if m := provider.PathModel(req.URL.Path); m != "" && !slices.Contains(r.models, m) {
		r.models = append(r.models, m)
	}
	if m := req.URL.Query().Get("model"); m != "" && len(r.models) == 0 {
		r.models = []string{m}
	}
	return r, nil
}

// most is the most r may use, priced by p's limits where r does not say.
func (r request) most(p Price) Usage {
	each := r.output.or(p.maxOutput()) + r.predicted
	switch {
	case r.dialect == dialectGemini:
		// Gemini's documentation has thoughts beyond maxOutputTokens, and
		// a model that thinks by default: they are held at the budget
		// the request sets, else at the default output.
		each += r.thoughts.or(p.maxOutput())
	case r.thoughts.open:
		each += max(r.thoughts.largest, p.maxOutput())
	default:
		each += r.thoughts.largest
	}
	u := Usage{InputTokens: r.input, OutputTokens: min(each, 4*maxFigure)}
	// answers and prompts are bounded (by maxAnswers, and by the body's
	// size): their product fits, and the output saturates.
	if answers := r.answers * max(r.prompts, 1); u.OutputTokens > math.MaxInt64/answers {
		u.OutputTokens = math.MaxInt64
	} else {
		u.OutputTokens *= answers
	}
	if r.kept {
		u.InputTokens += p.maxInput(r.dialect)
	}
	return u
}

// most is what r may cost at p: its input at the dearest price input may
// be billed at in its dialect (a cache write, where the provider bills
// one), its output at the output price.
func (r request) cost(p Price) float64 {
	u := r.most(p)
	return (float64(u.InputTokens)*p.dearestInput(r.dialect) + float64(u.OutputTokens)*p.OutputPerMillion) / 1e6
}
