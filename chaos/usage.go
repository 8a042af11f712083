package chaos

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
)

// tokens is the server's tokenizer: ceil(n / 4) tokens for n bytes of
// text, the same for a prompt and an answer (see Token usage).
func tokens(n int) int {
	return (n + 3) / 4
}

// inputTokens returns the input tokens of req: those of its prompt text,
// counted on no more bytes than the body had, so that a client estimating
// ceil(body bytes / 4) never counts fewer. (Invalid UTF-8 in a JSON string
// decodes to U+FFFD, three bytes for one.)
func (req request) inputTokens() int {
	system, turns := req.prompt()
	n := len(system)
	for _, tn := range turns {
		n += len(tn.text)
	}
	return tokens(min(n, req.size))
}

// prompt returns the text of req's prompt that the tokenizer counts: the
// system's (Anthropic's system, the Responses API's instructions,
// Gemini's systemInstruction), and the conversation's.
func (req request) prompt() (system string, turns []turn) {
	system = contentText(req.System) + contentText(req.Instructions)
	var sys geminiContent
	if json.Unmarshal(req.SystemInstruction, &sys) == nil {
		system += sys.text()
	}
	return system, req.turns()
}

// maxAnswers is the most answers a request is given: OpenAI's bound on
// n. maxThoughts is the largest thinking budget spent: Gemini 2.5 Pro's.
const (
	maxAnswers  = 128
	maxThoughts = 32768
)

// asks is what a request body asks of its answer, read as the most
// generous of the servers that parse it would read it: keys matched
// whatever their case, as Go's encoding/json matches them, and a key named
// more than once, or in several spellings, taken at its largest, as the
// parser that keeps that one would.
type asks struct {
	// outputCap is the largest output cap named, in tokens of each answer
	// (max_tokens, max_completion_tokens, max_output_tokens,
	// generationConfig's maxOutputTokens); capped says one was named and
	// none was negative (a negative cap is none).
	outputCap        float64
	capped, uncapped bool
	// answers is the largest count of answers asked for (n,
	// generationConfig's candidateCount), 1 if none.
	answers int
	// thoughts is the largest thinking budget named (generationConfig's
	// thinkingConfig.thinkingBudget), 0 if none.
	thoughts int
	// kept says the request refers to context the provider keeps:
	// previous_response_id, conversation, a stored prompt (an object
	// "prompt"), Gemini's cachedContent.
	kept bool
}

// readAsks reads what body asks of its answer (see asks). A body that is
// not JSON asks nothing.
func readAsks(body []byte) asks {
	a := asks{answers: 1}
	if json.Valid(body) {
		a.members(body, topKeys)
	}
	return a
}

// The keys asks are read from, at the top of a body, in Gemini's
// generationConfig, and in its thinkingConfig; Gemini takes both the
// camelCase and the snake_case spelling of its fields.
var (
	topKeys = map[string]func(*asks, json.RawMessage){
		"max_tokens": (*asks).outputCapOf, "max_completion_tokens": (*asks).outputCapOf,
		"max_output_tokens": (*asks).outputCapOf, "n": (*asks).answersOf,
		"previous_response_id": (*asks).keptOf, "conversation": (*asks).keptOf,
		"cachedContent": (*asks).keptOf, "cached_content": (*asks).keptOf,
		"prompt":           func(a *asks, v json.RawMessage) { a.kept = a.kept || bytes.HasPrefix(v, []byte("{")) },
		"generationConfig": generationConfig, "generation_config": generationConfig,
	}
	generationKeys = map[string]func(*asks, json.RawMessage){
		"maxOutputTokens": (*asks).outputCapOf, "max_output_tokens": (*asks).outputCapOf,
		"candidateCount": (*asks).answersOf, "candidate_count": (*asks).answersOf,
		"thinkingConfig": thinkingConfig, "thinking_config": thinkingConfig,
	}
	thinkingKeys = map[string]func(*asks, json.RawMessage){
		"thinkingBudget": (*asks).thoughtsOf, "thinking_budget": (*asks).thoughtsOf,
	}
)

func generationConfig(a *asks, v json.RawMessage) { a.members(v, generationKeys) }
func thinkingConfig(a *asks, v json.RawMessage)   { a.members(v, thinkingKeys) }

// members reads the members of obj, a valid JSON object (anything else is
// passed over), whose keys match those of keys as Go matches a struct's
// fields.
func (a *asks) members(obj json.RawMessage, keys map[string]func(*asks, json.RawMessage)) {
	d := json.NewDecoder(bytes.NewReader(obj))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return
	}
	for d.More() {
		t, _ := d.Token()
		key, _ := t.(string)
		var v json.RawMessage
		if d.Decode(&v) != nil {
			return
		}
		for name, read := range keys {
			if strings.EqualFold(key, name) {
				read(a, v)
			}
		}
	}
}

// number returns v as a number, false if it is none.
func number(v json.RawMessage) (float64, bool) {
	var n float64
	return n, json.Unmarshal(v, &n) == nil && !bytes.Equal(v, []byte("null"))
}

func (a *asks) outputCapOf(v json.RawMessage) {
	switch n, ok := number(v); {
	case !ok:
	case n < 0:
		a.uncapped = true
	default:
		a.outputCap, a.capped = max(a.outputCap, n), true
	}
}

func (a *asks) answersOf(v json.RawMessage) {
	if n, ok := number(v); ok && n > 1 {
		a.answers = max(a.answers, int(min(n, maxAnswers)))
	}
}

func (a *asks) thoughtsOf(v json.RawMessage) {
	if n, ok := number(v); ok && n > 0 {
		a.thoughts = max(a.thoughts, int(min(n, maxThoughts)))
	}
}

func (a *asks) keptOf(v json.RawMessage) {
	switch string(v) {
	case "null", `""`, "false":
	default:
		a.kept = true
	}
}

// outputCap returns the most output tokens of each answer req allows, the
// largest of the caps it names, and whether it names one: a negative cap
// is none.
func (req request) outputCap() (int, bool) {
	a := req.asks
	if !a.capped || a.uncapped {
		return 0, false
	}
	return int(min(a.outputCap, math.MaxInt32)), true
}

// An output is the answer text a success serves: the part of a full answer
// from start to stop, sent in a stream as the answer's pieces.
type output struct {
	full  string // the whole answer
	ends  []int  // end offsets of its pieces, in increasing order, the last len(full)
	start int    // where the text served begins: after a continuation's prefix, else 0
	stop  int    // where it ends: len(full), or sooner under the request's output cap
}

// text returns the text served.
func (o *output) text() string { return o.full[o.start:o.stop] }

// truncated reports whether the request's output cap cut the text short.
func (o *output) truncated() bool { return o.stop < len(o.full) }

// pieces returns the pieces of the text served: those of the full answer
// from start to stop, the first and last cut short where start and stop
// fall inside them.
func (o *output) pieces() []string {
	var out []string
	from := o.start
	for _, end := range o.ends {
		end = min(end, o.stop)
		if end > from {
			out = append(out, o.full[from:end])
			from = end
		}
	}
	return out
}

// limit cuts the text served to at most maxTokens output tokens, 4 bytes
// each. Answers are ASCII, so any byte is a place to cut.
func (o *output) limit(maxTokens int) {
	o.stop = min(o.stop, o.start+4*maxTokens)
}

// textOutput returns the output of a full answer with pieces ending at ends.
func textOutput(full string, ends []int) output {
	return output{full: full, ends: ends, stop: len(full)}
}

// A geminiContent is a Gemini Content: a turn's or the system's parts.
type geminiContent struct {
	Role  string
	Parts []struct{ Text string }
}

// text returns the text parts of c, joined.
func (c geminiContent) text() string {
	var s string
	for _, p := range c.Parts {
		s += p.Text
	}
	return s
}

// Tally bounds: how long a tally key or model may be, and how many
// distinct pairs of them a server keeps apart.
const (
	// MaxTallyKey is the longest tally key or model, in bytes, that a
	// [Server] tallies under its own name; a request with a longer one is
	// tallied under TallyOverflow.
	MaxTallyKey = 256
	// MaxTallies is how many distinct (tally key, model) pairs a [Server]
	// keeps since it was created or last reset; a request that would add
	// another is tallied under TallyOverflow.
	MaxTallies = 10000
	// TallyOverflow is the tally key, with the model "", of the requests
	// beyond MaxTallyKey and MaxTallies. A request that names it in its
	// HeaderTally header is counted with them.
	TallyOverflow = "chaos-overflow"
)

// A Tally counts the requests of one tally key and model and what the server
// billed them (see Token usage), by how a provider bills them: input read
// afresh, read from the prompt cache and written into it (left out of the
// JSON while zero), and output. At prices p of the cost package, the bill
// is p.Of(cost.Usage{InputTokens: in, CacheReadTokens: read,
// CacheWriteTokens: write, OutputTokens: out}).
type Tally struct {
	Requests         int `json:"requests"`
	InputTokens      int `json:"input_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
	OutputTokens     int `json:"output_tokens"`
}

// A tallyID names a tally: the request's HeaderTally and model.
type tallyID struct{ key, model string }

// tallyOf returns the tally of id in tallies, adding it if there is room,
// or the overflow's.
func tallyOf(tallies map[tallyID]*Tally, id tallyID) *Tally {
	if len(id.key) > MaxTallyKey || len(id.model) > MaxTallyKey {
		id = tallyID{key: TallyOverflow}
	}
	if t, ok := tallies[id]; ok {
		return t
	}
	if len(tallies) >= MaxTallies {
		id = tallyID{key: TallyOverflow}
		if t, ok := tallies[id]; ok {
			return t
		}
	}
	t := &Tally{}
	tallies[id] = t
	return t
}

// bill adds what c was billed to the totals and to c's tally: for a request
// counted as 200, its input tokens, by how they were billed, and the
// tokens of the answer text it sent; nothing for any other.
func (s *Server) bill(c *call) {
	if c.fault != faultNone {
		return
	}
	in, out := c.input-c.cacheRead-c.cacheWrite, c.answers*tokens(c.delivered)+c.thoughts
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inputTokens += in
	s.cacheRead += c.cacheRead
	s.cacheWrite += c.cacheWrite
	s.outputTokens += out
	t := tallyOf(s.tallies, c.tally)
	t.InputTokens += in
	t.CacheReadTokens += c.cacheRead
	t.CacheWriteTokens += c.cacheWrite
	t.OutputTokens += out
}
