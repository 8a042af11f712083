package cost

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/rebound-go/rebound/internal/provider"
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
	if at == placeSchema {
		return
	}
	r := w.r
	f := fold(key)
	switch at {
	case placeContent:
		// In what the model reads, only a part that refers to an image
		// counts, or one that refers to a document, a file (Gemini's
		// fileData) or a stored item. Only a type is folded: the text
		// the model reads is most of a body.
		switch s, _ := t.(string); {
		case f == "filedata":
			r.kept = true
		case f != "type":
		case imageTypes[fold(s)]:
			w.media++
		case keptTypes[fold(s)]:
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
