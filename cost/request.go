package cost

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"

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

// A dialect is the API a request's path addresses: it says where the
// request's own output cap and thinking budget are, and the largest
// context window its provider serves.
type dialect uint8

const (
	dialectOther dialect = iota // a path rebound does not know: read as any of the others
	dialectOpenAI
	dialectAnthropic
	dialectGemini
)

// dialectOf returns the dialect of req, from its path (Gemini's names its
// model and a verb of generating content, as in
// ".../models/NAME:generateContent"; Vertex AI's paths to other
// publishers' models have verbs of their own) and, for Anthropic, its
// anthropic-version header.
func dialectOf(req *http.Request) dialect {
	path := req.URL.Path
	switch {
	case provider.GeminiModel(path) != "" && strings.Contains(strings.ToLower(path), "generatecontent"):
		return dialectGemini
	case strings.HasSuffix(path, "/completions"), strings.HasSuffix(path, "/responses"),
		strings.Contains(path, "/responses/"), strings.Contains(path, "/deployments/"):
		return dialectOpenAI
	case strings.HasSuffix(path, "/messages"), req.Header.Get("anthropic-version") != "":
		return dialectAnthropic
	}
	return dialectOther
}

// topCaps returns the output caps a request to path in dialect d has at
// the top of its body: those of its endpoint, where rebound knows it
// (a server that does not know a field may ignore it, and a cap it
// ignores must not lower the estimate), else any of them.
func topCaps(d dialect, path string) []string {
	switch {
	case d == dialectGemini:
		return nil
	case d == dialectAnthropic, strings.HasSuffix(path, "/completions") && !strings.HasSuffix(path, "/chat/completions"):
		return topOutput[:1] // max_tokens
	case strings.HasSuffix(path, "/chat/completions"):
		return topOutput[:2] // max_tokens, max_completion_tokens
	case strings.HasSuffix(path, "/responses"):
		return topOutput[2:] // max_output_tokens
	}
	return topOutput
}

// window returns the largest context window d's provider serves.
func (d dialect) window() int64 {
	switch d {
	case dialectOpenAI:
		return openAIWindow
	case dialectAnthropic:
		return anthropicWindow
	case dialectGemini:
		return geminiWindow
	}
	return otherWindow
}

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

// maxBody is the most of a request body that is read for what it may
// cost; a larger one cannot be.
const maxBody = 64 << 20

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
	if m := pathModel(req.URL.Path); m != "" && !slices.Contains(r.models, m) {
		r.models = append(r.models, m)
	}
	if m := req.URL.Query().Get("model"); m != "" && len(r.models) == 0 {
		r.models = []string{m}
	}
	return r, nil
}

// decodedBody reads a request body encoded in turn by the codings of
// encodings, the values of its Content-Encoding headers, and returns it
// decoded: up to maxBody bytes, the codings HTTP names for gzip and
// deflate (zlib) alone.
func decodedBody(rc io.Reader, encodings []string) ([]byte, error) {
	var codings []string
	for _, v := range encodings {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	r := rc
	for _, c := range slices.Backward(codings) { // the last applied is undone first
		var err error
		switch c {
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(r)
		case "deflate":
			r, err = zlib.NewReader(r)
		default:
			return nil, fmt.Errorf("it is encoded as %q", c)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding it as %s: %w", c, err)
		}
	}
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading it: %w", err)
	case len(body) > maxBody:
		return nil, fmt.Errorf("it is larger than %d MiB", maxBody>>20)
	}
	return body, nil
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

// A place is where in a body a value is: it says which exact keys are the
// dialect's own fields there, and whether its numbers can be settings.
type place uint8

const (
	placeTop        place = iota // the body's own members
	placeGeneration              // Gemini's generationConfig
	placeThinking                // Gemini's generationConfig.thinkingConfig
	placeSettings                // any other object that is not content
	placeContent                 // what the model reads: messages, a prompt, a predicted output
	placeTools                   // the tools the request offers, and their members
	placeSchema                  // data of the caller's: schemas, tools' insides, a tool call's arguments or result
)

// The dialects' own fields: an output cap at the top of a body (OpenAI's
// and Anthropic's), or in Gemini's generationConfig, whose thinkingConfig
// has the thinking budget. Gemini takes both spellings of its fields.
var (
	topOutput        = []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} // see topCaps
	generationKeys   = []string{"generationConfig", "generation_config"}
	generationOutput = []string{"maxOutputTokens", "max_output_tokens"}
	thinkingKeys     = []string{"thinkingConfig", "thinking_config"}
	thinkingBudget   = []string{"thinkingBudget", "thinking_budget"}
)

// contentKeys name, folded (see fold), the members whose values are what
// the model reads, not settings: in them only the parts that refer to an
// image, a document or a file count. schemaKeys name those whose values
// are the caller's data, in which nothing counts: schemas, a tool call's
// arguments and a tool's result (Gemini's functionCall and
// functionResponse, Anthropic's tool_use input), in which a key named
// file_id or a "type": "file" is the caller's, not a reference.
var (
	contentKeys = map[string]bool{
		"messages": true, "input": true, "contents": true, "system": true, "systeminstruction": true,
		"instructions": true, "prompt": true, "prediction": true,
	}
	schemaKeys = map[string]bool{
		"responseformat": true, "responseschema": true, "responsejsonschema": true, "text": true,
		"toolchoice": true, "toolconfig": true, "functions": true, "metadata": true, "logitbias": true,
		"stop": true, "stopsequences": true, "safetysettings": true,
		"functioncall": true, "functionresponse": true, "input": true, "args": true, "arguments": true,
	}
)

// What a key other than the dialect's own fields may name, by its folded
// name. Such a key only ever raises the estimate: a server that knows it
// may honour it, one that does not ignores it.
var (
	// answerKeys count answers: OpenAI's n and best_of (which generates
	// best_of answers and returns n), Gemini's candidateCount, and those
	// of servers that copy them. Any other key ending in "count" counts
	// too.
	answerKeys = map[string]bool{
		"n": true, "bestof": true, "candidatecount": true, "numreturnsequences": true,
		"numgenerations": true, "numcompletions": true, "numchoices": true, "numcandidates": true,
		"samplecount": true, "numsamples": true,
	}
	// outputKeys are output caps without "token" in their name (any key
	// with it is one): Ollama's num_predict, Llama's max_gen_len on
	// Bedrock. A key with "budget" in it is a thinking budget.
	outputKeys = map[string]bool{"numpredict": true, "maxgenlen": true}
	// keptKeys, where they hold anything, refer to context the provider
	// keeps: the Responses API's previous_response_id and conversation,
	// Gemini's cachedContent and previous_interaction_id, the Assistants
	// API's thread and assistant, a file by id, URI, URL or as file data,
	// Anthropic's container and MCP servers, a vector store.
	keptKeys = []string{"previousresponse", "previousinteraction", "conversation", "cachedcontent",
		"threadid", "assistantid", "fileid", "fileuri", "fileurl", "filedata", "container",
		"mcpserver", "vectorstore"}
	// providerTools name, in a tool's type or in a key of a tool, the
	// tools a provider runs itself, whose results enter the context on
	// its side.
	providerTools = []string{"websearch", "webfetch", "filesearch", "codeinterpreter", "codeexecution",
		"mcp", "urlcontext", "googlesearch", "googlemaps", "retrieval", "toolsearch"}
	// imageTypes and keptTypes are the types of a part that refers to an
	// image, held at mediaTokens, and to something whose size the
	// provider decides, held as kept context: a document or a file (it
	// bills a PDF's pages as text and as images), an item of a stored
	// response (the Responses API's item_reference), a file put in a code
	// execution container (Anthropic's container_upload).
	imageTypes = map[string]bool{"image": true, "imageurl": true, "inputimage": true, "computerscreenshot": true}
	keptTypes  = map[string]bool{"document": true, "file": true, "inputfile": true, "itemreference": true, "containerupload": true}
)

// fold returns key as any parser might match it: case folded (the Kelvin
// sign is a k, as Go's encoding/json folds it) and without the separators
// a spelling may add (max_output_tokens and maxOutputTokens are one).
func fold(key string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return unicode.ToLower(unicode.ToUpper(r))
	}, key)
}

// readBody reads body into r: its models, output cap, thinking budget,
// answers, predicted output and kept context, and returns the images it
// refers to. A body that is not JSON throughout names no output cap or
// thinking budget of its own, whatever it says before its flaw, and
// every value of a body of several is read.
func (r *request) readBody(body []byte) (media int64) {
	if len(body) == 0 {
		return 0
	}
	text, exact := pythonText(body)
	w := walker{d: json.NewDecoder(bytes.NewReader(text)), r: r}
	w.d.UseNumber()
	docs := 0
	for ; !w.ended; docs++ {
		w.value(placeTop, "", document)
	}
	if docs != 2 || w.broken || !exact { // one document, then the end
		r.output.own, r.thoughts.own = false, false
	}
	return w.media
}

// pythonText returns body as Python's json.loads reads bytes, in JSON's
// UTF-8: decoded from UTF-16 or UTF-32, or with its byte order mark
// dropped (each detected as Python detects it), and with the NaN,
// Infinity and -Infinity it takes for numbers made null and numbers too
// large for any count. exact says it is body as it was.
func pythonText(body []byte) (text []byte, exact bool) {
	b := body
	switch {
	case bytes.HasPrefix(b, []byte{0, 0, 0xfe, 0xff}), bytes.HasPrefix(b, []byte{0xff, 0xfe, 0, 0}):
		text = decodeUTF32(b[4:], b[0] == 0)
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}), bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		text = decodeUTF16(b[2:], b[0] == 0xfe)
	case bytes.HasPrefix(b, []byte{0xef, 0xbb, 0xbf}):
		text = b[3:]
	case len(b) >= 4 && b[0] == 0 && b[1] != 0, len(b) == 2 && b[0] == 0:
		text = decodeUTF16(b, true)
	case len(b) >= 4 && b[0] == 0:
		text = decodeUTF32(b, true)
	case len(b) >= 4 && b[1] == 0 && (b[2] != 0 || b[3] != 0), len(b) == 2 && b[1] == 0:
		text = decodeUTF16(b, false)
	case len(b) >= 4 && b[1] == 0:
		text = decodeUTF32(b, false)
	default:
		text, exact = b, true
	}
	if !bytes.Contains(text, []byte("NaN")) && !bytes.Contains(text, []byte("Infinity")) {
		return text, exact
	}
	var out []byte
	copied := 0 // text[:copied] is in out
	inString, escaped := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		var word, number string
		switch rest := text[i:]; {
		case c == '"':
			inString = true
			continue
		case bytes.HasPrefix(rest, []byte("NaN")):
			word, number = "NaN", "null"
		case bytes.HasPrefix(rest, []byte("-Infinity")):
			word, number = "-Infinity", "-1e999"
		case bytes.HasPrefix(rest, []byte("Infinity")):
			word, number = "Infinity", "1e999"
		default:
			continue
		}
		out = append(append(out, text[copied:i]...), number...)
		i += len(word) - 1
		copied = i + 1
	}
	if out == nil {
		return text, exact
	}
	return append(out, text[copied:]...), false
}

// decodeUTF16 returns b, UTF-16 text, in UTF-8.
func decodeUTF16(b []byte, bigEndian bool) []byte {
	units := make([]uint16, len(b)/2)
	for i := range units {
		if bigEndian {
			units[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
		} else {
			units[i] = uint16(b[2*i+1])<<8 | uint16(b[2*i])
		}
	}
	return []byte(string(utf16.Decode(units)))
}

// decodeUTF32 returns b, UTF-32 text, in UTF-8.
func decodeUTF32(b []byte, bigEndian bool) []byte {
	runes := make([]rune, len(b)/4)
	for i := range runes {
		w := b[4*i : 4*i+4]
		if bigEndian {
			runes[i] = rune(uint32(w[0])<<24 | uint32(w[1])<<16 | uint32(w[2])<<8 | uint32(w[3]))
		} else {
			runes[i] = rune(uint32(w[3])<<24 | uint32(w[2])<<16 | uint32(w[1])<<8 | uint32(w[0]))
		}
	}
	return []byte(string(runes))
}

// A walker reads the values of a body in order, and what they say into r.
type walker struct {
	d     *json.Decoder
	r     *request
	media int64 // the parts that refer to an image
	depth int   // of the arrays and objects the walk is in
	// ended says the body ended, or broke, which broken says: nothing
	// more is read.
	ended, broken bool
}

// fail ends the walk on err, which breaks the body unless it is the end
// of the body between two documents.
func (w *walker) fail(err error, between bool) {
	w.ended = true
	w.broken = w.broken || err != io.EOF || !between
}

// What a value is to the walk: a document of the body, a member of an
// object, or an element of an array.
type role uint8

const (
	document role = iota
	member
	element
)

// value reads the next value, a document, a member named key of an
// object at at, or an element at at of an array that is the value of a
// member named key (an element says what its member says: "n": [4]
// counts as much as "n": 4), and returns its first token.
func (w *walker) value(at place, key string, as role) json.Token {
	start := w.d.InputOffset()
	t, err := w.d.Token()
	if err != nil {
		w.fail(err, as == document)
		return nil
	}
	if as != document {
		w.named(at, key, t)
	}
	if d, ok := t.(json.Delim); ok && w.depth == maxDepth {
		w.skip()
	} else if ok {
		w.depth++
		defer func() { w.depth-- }()
		in := at // an element's members and elements are where the element is
		switch {
		case as == document && d == '{':
			in = placeTop
		case as != element:
			in = w.within(at, key)
		}
		// A legacy completion's prompt may be a list of prompts, each
		// answered n times: its strings, or its lists of token ids (a
		// list of numbers is one prompt).
		prompts := as == member && at == placeTop && d == '[' && fold(key) == "prompt"
		var listed int64
		for w.d.More() && !w.ended {
			if d == '[' {
				if e := w.value(in, key, element); prompts {
					if _, id := e.(json.Number); !id {
						listed++
					}
				}
				continue
			}
			t, err := w.d.Token()
			k, ok := t.(string)
			if err != nil || !ok {
				w.fail(err, false)
				return t
			}
			w.value(in, k, member)
		}
		w.r.prompts = max(w.r.prompts, listed)
		if _, err := w.d.Token(); err != nil && !w.ended { // the closing delimiter
			w.fail(err, false)
		}
	}
	if as == member && at == placeTop && fold(key) == "prediction" {
		w.r.predicted += (w.d.InputOffset() - start + bytesPerToken - 1) / bytesPerToken
	}
	return t
}

// maxDepth is the deepest nesting of arrays and objects the walk goes
// into, encoding/json's own bound (Python's is lower): the walk takes a
// call for each level, and a body of a few MiB of "[" would otherwise
// overflow the goroutine's stack.
const maxDepth = 10000

// skip reads the rest of a value nested past maxDepth, whose opening
// delimiter was read, without a call for each level. The body is broken:
// parsers refuse it, or read it as they like.
func (w *walker) skip() {
	w.broken = true
	for open := 1; open > 0; {
		t, err := w.d.Token()
		if err != nil {
			w.fail(err, false)
			return
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			open++
		case json.Delim('}'), json.Delim(']'):
			open--
		}
	}
}

// within returns the place of the members or elements of a value named
// key of an object at at.
func (w *walker) within(at place, key string) place {
	switch f := fold(key); {
	case at == placeSchema:
		return at
	case at == placeTools: // a tool's insides: its function, its schema
		return placeSchema
	case at == placeContent && schemaKeys[f]:
		return placeSchema
	case at == placeContent:
		return at
	case at == placeTop && slices.Contains(generationKeys, key):
		return placeGeneration
	case at == placeGeneration && slices.Contains(thinkingKeys, key):
		return placeThinking
	case f == "tools":
		return placeTools
	case contentKeys[f]:
		return placeContent
	case schemaKeys[f]:
		return placeSchema
	}
	return placeSettings
}

// named reads what a member named key of an object at at, whose value
// begins with t, says.
func (w *walker) named(at place, key string, t json.Token) {
	r := w.r
	f := fold(key)
	switch at {
	case placeSchema:
		return
	case placeContent:
		// In what the model reads, only a part that refers to an image
		// counts, or one that refers to a document, a file (Gemini's
		// fileData) or a stored item.
		s, _ := t.(string)
		switch s = fold(s); {
		case f == "type" && imageTypes[s]:
			w.media++
		case f == "type" && keptTypes[s], f == "filedata":
			r.kept = true
		}
		return
	case placeTools: // a tool's members: a provider's tool is named in its type or its key
		s, _ := t.(string)
		if containsAny(f, providerTools) || f == "type" && containsAny(fold(s), providerTools) {
			r.kept = true
		}
		return
	}
	switch {
	case containsAny(f, keptKeys) && holds(t),
		at == placeTop && f == "prompt" && t == json.Delim('{'): // a stored prompt, {"id": …}
		r.kept = true
	case at == placeTop && strings.EqualFold(key, "model"):
		if s, ok := t.(string); ok && s != "" && !slices.Contains(r.models, s) {
			r.models = append(r.models, s)
		}
	}
	switch {
	case at == placeTop && slices.Contains(r.topCaps, key),
		at == placeGeneration && r.dialect != dialectOpenAI && r.dialect != dialectAnthropic && slices.Contains(generationOutput, key):
		r.output.ownField(t, false)
	case at == placeThinking && r.dialect != dialectOpenAI && r.dialect != dialectAnthropic && slices.Contains(thinkingBudget, key):
		r.thoughts.ownField(t, true)
	case strings.Contains(f, "token"), outputKeys[f]:
		r.output.otherField(t)
	case strings.Contains(f, "budget"):
		r.thoughts.otherField(t)
	case answerKeys[f], strings.HasSuffix(f, "count"):
		if n, ok := number(t); ok {
			r.answers = max(r.answers, min(tokens(n), maxAnswers))
		}
	}
}

// ownField takes t, the value of the dialect's own field for f, into f: a
// positive number names it (zero too where zero is a limit: a thinking
// budget of 0 turns thinking off); null does not; any other value leaves
// f open: zero or a negative number (Ollama's -1 is no limit, Gemini's -1
// thinks as it likes), a string (which some servers read as its number,
// and others refuse or ignore), anything else.
func (f *figure) ownField(t json.Token, zeroLimits bool) {
	v, isNumber := number(t)
	_, literal := t.(json.Number)
	switch {
	case t == nil:
	case literal && (v > 0 || v == 0 && zeroLimits):
		f.largest, f.own = max(f.largest, tokens(v)), true
	default:
		f.open = true
		if isNumber && v > 0 {
			f.largest = max(f.largest, tokens(v))
		}
	}
}

// otherField takes t, the value of a field that may name f, into f: it only
// raises it, by a positive number (or a string of one), or opens it, by a
// negative one.
func (f *figure) otherField(t json.Token) {
	switch v, ok := number(t); {
	case !ok:
	case v > 0:
		f.largest = max(f.largest, tokens(v))
	case v < 0:
		f.open = true
	}
}

// number returns t as a number: a JSON number, or a string that reads as
// one (as Python's lax parsers read it: spaces and underscores aside).
func number(t json.Token) (float64, bool) {
	var s string
	switch t := t.(type) {
	case json.Number:
		s = string(t)
	case string:
		s = strings.ReplaceAll(strings.TrimSpace(t), "_", "")
	default:
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, (err == nil || math.IsInf(v, 0)) && !math.IsNaN(v)
}

// tokens returns v, a count of tokens or answers, rounded up and bounded
// by maxFigure.
func tokens(v float64) int64 {
	if v >= maxFigure {
		return maxFigure
	}
	return int64(math.Ceil(v))
}

// holds reports whether t, a value a key names, holds anything: not null,
// "", or false.
func holds(t json.Token) bool {
	return t != nil && t != "" && t != false
}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
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

// read takes the usage a JSON document (a body, an event's data, or an
// array of Gemini's chunks) reports, in any of the dialects. Counts are cumulative in every dialect
// (Anthropic's message_delta, Gemini's chunks), so the largest seen is
// the attempt's; cache tokens are input. A document with a count that is
// negative, or too large to add up, says nothing.
func (b *usageBody) read(doc []byte) {
	if !bytes.Contains(doc, usageKey) {
		return // most of a stream's events: not worth decoding
	}
	if d := bytes.TrimLeft(doc, " \t\r\n"); len(d) > 0 && d[0] == '[' {
		// Gemini's stream asked for without alt=sse: a JSON array of its
		// chunks.
		var chunks []json.RawMessage
		if json.Unmarshal(d, &chunks) == nil {
			for _, c := range chunks {
				b.readObject(c)
			}
		}
		return
	}
	b.readObject(doc)
}

// readObject is read for one JSON document that is not an array.
func (b *usageBody) readObject(doc []byte) {
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
