package chaos

import (
	"encoding/json"
	"math"
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
	n := len(contentText(req.System)) + len(contentText(req.Instructions))
	for _, tn := range req.turns() {
		n += len(tn.text)
	}
	var sys geminiContent
	if json.Unmarshal(req.SystemInstruction, &sys) == nil {
		n += len(sys.text())
	}
	return tokens(min(n, req.size))
}

// outputCap returns the most output tokens req allows, the least of the
// caps it names, and whether it names one. A negative cap is no cap.
func (req request) outputCap() (int, bool) {
	least, capped := math.MaxInt32, false
	for _, v := range []*float64{req.MaxTokens, req.MaxCompletionTokens, req.MaxOutputTokens, req.GenerationConfig.MaxOutputTokens} {
		if v != nil && *v >= 0 {
			least, capped = min(least, int(min(*v, math.MaxInt32))), true
		}
	}
	return least, capped
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
// billed them (see Token usage).
type Tally struct {
	Requests     int `json:"requests"`
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
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
// counted as 200, its input tokens and the tokens of the answer text it
// sent; nothing for any other.
func (s *Server) bill(c *call) {
	if c.fault != faultNone {
		return
	}
	in, out := c.input, tokens(c.delivered)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inputTokens += in
	s.outputTokens += out
	t := tallyOf(s.tallies, c.tally)
	t.InputTokens += in
	t.OutputTokens += out
}
