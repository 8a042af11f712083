package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// How a text-mode stream is cut, as named in the HeaderCutHow header.
const (
	cutAbort = "abort" // the connection is aborted
	cutClose = "close" // the body ends cleanly, without the stream's end
	cutError = "error" // the profile's in-band error event, then the end of the body
)

// words is the vocabulary of text mode's answers. Changing it changes every
// answer, which tests comparing against AnswerText would not notice, but
// recorded expectations elsewhere would.
var words = [...]string{
	"the", "river", "quiet", "signal", "carries", "a", "lamp", "over",
	"stone", "bridges", "and", "every", "morning", "light", "returns", "to",
	"small", "harbors", "where", "patient", "engines", "hum", "beneath", "open",
	"windows", "while", "careful", "hands", "mend", "old", "nets", "near",
	"green", "hills", "slow", "clouds", "drift", "past", "bright", "towers",
	"of", "glass", "tomorrow", "seven", "letters", "arrive", "with", "maps",
	"for", "travelers", "who", "listen", "closely", "then", "write", "short",
	"notes", "about", "winter", "gardens", "in", "distant", "cities", "again",
}

// AnswerText returns the answer text mode gives to a request whose first
// user message says prompt, on a server with the given Config.Seed: 40 to
// 80 words of plain ASCII text in sentences, mostly separated by single
// spaces, some by two spaces or a newline. It is what a stream of the
// answer delivers when joined, piece after piece.
func AnswerText(seed uint64, prompt string) string {
	text, _ := answer(seed, prompt)
	return text
}

// answer returns the answer to prompt and the end offsets of its pieces, in
// increasing order, the last being len(text). A piece is one to three words
// with the separator before each and the punctuation after; so a stream cut
// after a piece has delivered text ending in a word.
func answer(seed uint64, prompt string) (text string, ends []int) {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	n := 40 + rng.IntN(41)
	var b strings.Builder
	sentenceLeft := 4 + rng.IntN(9) // words left in the sentence
	pieceLeft := 1 + rng.IntN(3)    // words left in the piece
	endedSentence := true
	for i := range n {
		if i > 0 {
			switch {
			case endedSentence && rng.IntN(4) == 0:
				b.WriteString("\n")
			case rng.IntN(12) == 0:
				b.WriteString("  ")
			default:
				b.WriteString(" ")
			}
		}
		w := words[rng.IntN(len(words))]
		if endedSentence {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		b.WriteString(w)
		sentenceLeft--
		last := i == n-1
		endedSentence = sentenceLeft == 0 || last
		switch {
		case endedSentence:
			b.WriteString(".")
			sentenceLeft = 4 + rng.IntN(9)
		case rng.IntN(8) == 0:
			b.WriteString(",")
		}
		pieceLeft--
		if pieceLeft == 0 || last {
			ends = append(ends, b.Len())
			pieceLeft = 1 + rng.IntN(3)
		}
	}
	return b.String(), ends
}

// textPlan is how the stream of a request in text mode is delivered; the
// answer it serves is the call's output. Offsets are absolute, in bytes of
// the full answer.
type textPlan struct {
	stream   bool   // whether the request asks for a stream
	cutAt    int    // HeaderCutAt, or -1 for none
	cutHow   string // HeaderCutHow: cutAbort, cutClose or cutError
	delay    time.Duration
	stallAt  int // HeaderStall's offset, or -1 for none
	stallFor time.Duration
}

// triggered reports whether a wait or cut at offset at (-1 for none) applies
// to a stream of text served from start: a continuation that starts at or
// beyond it is spared.
func triggered(at, start int) bool {
	return at >= 0 && (start == 0 || start < at)
}

// readTextHeaders reads the text-mode headers of r into c.text. It returns
// the rejection for a malformed one.
func (c *call) readTextHeaders(r *http.Request) *rejection {
	t := &textPlan{cutAt: -1, cutHow: cutAbort, stallAt: -1}
	c.text = t
	bad := func(typ, name, v, want string) *rejection {
		return &rejection{typ, v, fmt.Sprintf("chaos: %s %q is not %s", name, v, want)}
	}
	if v := r.Header.Get(HeaderCutAt); v != "" {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return bad("chaos_bad_cut_at", HeaderCutAt, v, "a whole number of bytes")
		}
		t.cutAt = int(n)
	}
	if v := r.Header.Get(HeaderCutHow); v != "" {
		if v != cutAbort && v != cutClose && v != cutError {
			return bad("chaos_bad_cut_how", HeaderCutHow, v, "abort, close or error")
		}
		t.cutHow = v
	}
	if v := r.Header.Get(HeaderFirstTokenDelay); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return bad("chaos_bad_first_token_delay", HeaderFirstTokenDelay, v, "a duration of zero or more, like 300ms")
		}
		t.delay = d
	}
	if v := r.Header.Get(HeaderStall); v != "" {
		at, dur, _ := strings.Cut(v, ":")
		n, err1 := strconv.ParseUint(at, 10, 31)
		d, err2 := time.ParseDuration(dur)
		if err1 != nil || err2 != nil || d < 0 {
			return bad("chaos_bad_stall", HeaderStall, v, "BYTES:DURATION, like 120:2s")
		}
		t.stallAt, t.stallFor = int(n), d
	}
	return nil
}

// planText sets c's output from the request: the answer to its first user
// message, served from where it starts if it is a continuation, which it
// counts; and completes c.text.
func (c *call) planText(r *http.Request) {
	t := c.text
	req := c.req
	turns := req.turns()
	var prompt, prefill string
	for _, tn := range turns {
		if tn.role == "user" {
			prompt = tn.text
			break
		}
	}
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].role == "assistant" {
			prefill = turns[i].text
			break
		}
	}
	c.out = textOutput(answer(c.srv.cfg.Seed, prompt))
	prefill = strings.TrimRightFunc(prefill, unicode.IsSpace)
	if prefill != "" && strings.HasPrefix(c.out.full, prefill) {
		c.out.start = len(prefill)
		c.srv.countContinuation()
	}
	switch c.profile {
	case gemini:
		t.stream = strings.Contains(r.URL.Path, ":streamGenerateContent")
	case bedrock:
		t.stream = false
	default:
		t.stream = req.Stream
	}
}

// deliverText sends the pieces of c's text-mode stream with emit, waiting
// and cutting as the request asks. emit is told whether a piece is the
// stream's last, after which the stream ends normally. It reports whether
// the stream goes on to its end events: false if it was cut, in which case
// it has been ended with the in-band error event errName and errData() if
// the request asked for that, or if the client went away.
func (c *call) deliverText(s *eventStream, emit func(piece string, last bool), errName string, errData func() string) bool {
	t := c.text
	if t.delay > 0 && !sleep(c.ctx, t.delay) {
		return false
	}
	pieces := c.out.pieces()
	cut, stall := triggered(t.cutAt, c.out.start), triggered(t.stallAt, c.out.start)
	pos := c.out.start
	// after is called at pos, before the first piece and after each; it
	// reports whether the stream goes on.
	after := func() bool {
		if stall && pos >= t.stallAt {
			stall = false
			if !sleep(c.ctx, t.stallFor) {
				return false
			}
		}
		if cut && pos >= t.cutAt {
			c.cutText(s, errName, errData)
			return false
		}
		return true
	}
	if !after() {
		return false
	}
	for i, p := range pieces {
		pos += len(p)
		emit(p, i == len(pieces)-1 && !(cut && pos >= t.cutAt))
		if !after() {
			return false
		}
	}
	return true
}

// cutText cuts c's text-mode stream s as the request asks.
func (c *call) cutText(s *eventStream, errName string, errData func() string) {
	switch c.text.cutHow {
	case cutAbort:
		s.rc.Flush() // the header, should no event have sent it yet
		panic(http.ErrAbortHandler)
	case cutError:
		s.sendRaw(errName, errData())
	default:
		s.rc.Flush()
	}
}

// sleep waits for d and reports whether it elapsed before ctx was done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// countContinuation counts a text-mode request that continues an answer.
func (s *Server) countContinuation() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.continuations++
}

// A turn is one message of a conversation, as text mode reads it.
type turn struct {
	role string // "user", "assistant" (Gemini's "model"), or another as sent
	text string // the message's text parts, joined
}

// turns returns the conversation of req: its messages (chat completions,
// Anthropic, plain), input (the Responses API) or contents (Gemini). Parts
// other than text are left out.
func (req request) turns() []turn {
	var out []turn
	var msgs []struct {
		Role    string
		Content json.RawMessage
	}
	if json.Unmarshal(req.Messages, &msgs) == nil {
		for _, m := range msgs {
			out = append(out, turn{m.Role, contentText(m.Content)})
		}
	}
	var input string
	if json.Unmarshal(req.Input, &input) == nil {
		out = append(out, turn{"user", input})
	} else if json.Unmarshal(req.Input, &msgs) == nil {
		for _, m := range msgs {
			out = append(out, turn{m.Role, contentText(m.Content)})
		}
	}
	var contents []geminiContent
	if json.Unmarshal(req.Contents, &contents) == nil {
		for _, c := range contents {
			tn := turn{role: c.Role, text: c.text()}
			switch c.Role {
			case "model":
				tn.role = "assistant"
			case "":
				tn.role = "user" // Gemini takes a lone turn without a role as the user's
			}
			out = append(out, tn)
		}
	}
	return out
}

// contentText returns the text of a message's content: a string, or an
// array of parts whose text parts are joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct{ Type, Text string }
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "", "text", "input_text", "output_text":
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
