package proxy

import (
	"strconv"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// A conversation, as a key pool keeps it on the key that holds the
// provider's prompt cache of it (fallback.Chain.Conversation), is named
// from the request's body alone, so that every replica names it alike:
//
//   - by what the client calls it: OpenAI's "prompt_cache_key", else its
//     "user", else its "safety_identifier", else Anthropic's
//     "metadata"."user_id" (a string; null or "" is none);
//   - else by the start of its prompt: the system prompt (Anthropic's
//     "system", Responses' "instructions", Gemini's "systemInstruction",
//     and the messages at the head of the prompt whose role is "system"
//     or "developer"), the "tools", and the first message whose role is
//     "user" (of Gemini's "contents", the first with no role or "user";
//     Responses' "input" given as a string is that message).
//
// The prompt is the body's "messages", "input" or "contents". A body with
// none, and no name, is of no conversation; so is one that does not say
// clearly: a name this reads given twice in an object or spelled another
// way (jsonscan's rules), a name that is not a string, a role spelled
// another way, two prompts or two system prompts. The proxy never guesses
// which reading the provider takes: such a request goes by headroom.
//
// The name is a hash: FNV-64a of "n" and the client's name, its escapes
// resolved; or of the parts of the prompt's start, in the order above,
// each after a letter that says which ("s", "m", "t", "u"), written as
// the JSON the client sent without white space between tokens and
// without any "cache_control" member (Anthropic's cache breakpoint moves
// from turn to turn: the conversation does not). Past canonDepth nested
// objects and arrays a value is hashed as sent.

// The names a conversation is read by.
var (
	conversationNames = jsonscan.NewNames(
		"prompt_cache_key", "user", "safety_identifier", "metadata",
		"messages", "input", "contents",
		"system", "instructions", "systemInstruction", "system_instruction",
		"tools",
	)
	metadataNames     = jsonscan.NewNames("user_id")
	roleNames         = jsonscan.NewNames("role")
	roles             = jsonscan.NewNames("system", "developer", "user")
	cacheControlNames = jsonscan.NewNames("cache_control")
)

// The indexes of conversationNames and roles.
const (
	convPromptCacheKey = iota
	convUser
	convSafetyIdentifier
	convMetadata
	convMessages
	convInput
	convContents
	convSystem
	convInstructions
	convSystemInstruction
	convSystemInstructionSnake
	convTools
	convNames

	roleSystem    = 0
	roleDeveloper = 1
	roleUser      = 2
)

// canonDepth is how deep the hash of a prompt's start writes values
// without white space or cache breakpoints; deeper, it writes them as
// sent.
const canonDepth = 64

// conversationOf returns the name of the conversation of body, a request's
// JSON, or "" for none.
func conversationOf(body []byte) string {
	var s jsonscan.Scanner
	s.Strict = true
	s.Reset(body)
	if s.Next() != jsonscan.Object {
		return ""
	}
	var at [convNames]jsonscan.Span
	for m := s.Object(conversationNames); m.Next(); {
		v := s.Skip()
		if n := m.Name(); n != jsonscan.Other {
			at[n] = v
		}
	}
	if !s.End() {
		return "" // among others, a name given twice or spelled another way
	}
	var buf [64]byte // a name's text, if it has escapes
	for _, n := range [...]int{convPromptCacheKey, convUser, convSafetyIdentifier} {
		switch name, refused := clientName(&s, at[n], buf[:0]); {
		case refused:
			return ""
		case name != nil:
			return named(name)
		}
	}
	if v := at[convMetadata]; v.Set() && body[v.Lo] == '{' {
		s.Reset(body[v.Lo:v.Hi])
		var id jsonscan.Span
		for m := s.Object(metadataNames); m.Next(); {
			if v := s.Skip(); m.Name() == 0 {
				id = v
			}
		}
		if s.Err() != nil {
			return ""
		}
		switch name, refused := clientName(&s, id, buf[:0]); {
		case refused:
			return ""
		case name != nil:
			return named(name)
		}
	}
	return promptStart(body, &at)
}

// named returns the name of the conversation the client calls name.
func named(name []byte) string {
	h := fnv64(fnvOffset)
	h.byte('n')
	h.write(name)
	return strconv.FormatUint(uint64(h), 16)
}

// clientName returns the text of the name whose value lies at v, in the
// document s read: nil for none (no value, null, ""), refused for a value
// that is not a string. A name with escapes is appended to dst; one
// without is not copied.
func clientName(s *jsonscan.Scanner, v jsonscan.Span, dst []byte) (name []byte, refused bool) {
	if !v.Set() {
		return nil, false
	}
	switch s.Bytes(v)[0] {
	case 'n':
		return nil, false
	case '"':
	default:
		return nil, true
	}
	if text := s.Text(dst, v); len(text) > 0 {
		return text, false
	}
	return nil, false
}

// promptStart returns the name of the conversation whose prompt's start
// lies in body, its top-level names at at; "" for none.
func promptStart(body []byte, at *[convNames]jsonscan.Span) string {
	prompt, system := jsonscan.Span{}, jsonscan.Span{}
	contents := false
	for _, n := range [...]int{convMessages, convInput, convContents} {
		if at[n].Set() {
			if prompt.Set() {
				return "" // two prompts: which does the provider read?
			}
			prompt, contents = at[n], n == convContents
		}
	}
	for _, n := range [...]int{convSystem, convInstructions, convSystemInstruction, convSystemInstructionSnake} {
		if at[n].Set() {
			if system.Set() {
				return ""
			}
			system = at[n]
		}
	}
	if !prompt.Set() {
		return ""
	}
	p := prompter{h: fnvOffset}
	p.s.Strict, p.w.Strict = true, true
	if system.Set() && !p.part('s', body[system.Lo:system.Hi]) {
		return ""
	}
	first := prompt // Responses' input as a string: a message of the user's
	switch body[prompt.Lo] {
	case '"':
	case '[':
		var ok bool
		if first, ok = p.head(body[prompt.Lo:prompt.Hi], contents); !ok {
			return ""
		}
		first.Lo, first.Hi = first.Lo+prompt.Lo, first.Hi+prompt.Lo
	default:
		return ""
	}
	if v := at[convTools]; v.Set() && !p.part('t', body[v.Lo:v.Hi]) {
		return ""
	}
	if first.Set() && !p.part('u', body[first.Lo:first.Hi]) {
		return ""
	}
	if p.parts == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(p.h), 16)
}

// prompter hashes the parts of a prompt's start.
type prompter struct {
	h     fnv64
	parts int
	s, w  jsonscan.Scanner // s reads the prompt, w the part being hashed
}

// part hashes doc, a JSON value, after the letter that says which part it
// is, and reports whether doc is read without a fault.
func (p *prompter) part(which byte, doc []byte) bool {
	p.h.byte(which)
	p.w.Reset(doc)
	p.h.value(&p.w, 0)
	p.parts++
	return p.w.End()
}

// head hashes the messages at the head of prompt, a JSON array, whose
// role is system or developer, and returns where in prompt the first
// whose role is user lies (none without one), or false for a message
// whose role does not say clearly. Of contents (Gemini's), a message
// with no role is the user's.
func (p *prompter) head(prompt []byte, contents bool) (first jsonscan.Span, ok bool) {
	s := &p.s
	s.Reset(prompt)
	head := true
	for e := s.Array(); e.Next(); {
		if s.Next() != jsonscan.Object {
			s.Skip()
			head = false
			continue
		}
		lo, role, given := s.Offset(), jsonscan.Other, false
		for m := s.Object(roleNames); m.Next(); {
			if m.Name() != 0 {
				s.Skip()
				continue
			}
			v, isString := s.Str()
			if !isString {
				return first, false
			}
			var buf [16]byte
			text := s.Text(buf[:0], v)
			given, role = true, roles.Spelled(text)
			if role != jsonscan.Other && string(text) != roleText(role) {
				return first, false // "User", "user\u0000": which the provider reads is its own
			}
		}
		if s.Err() != nil {
			return first, false
		}
		msg := jsonscan.Span{Lo: lo, Hi: s.Offset()}
		switch {
		case head && (role == roleSystem || role == roleDeveloper):
			if !p.part('m', prompt[msg.Lo:msg.Hi]) {
				return first, false
			}
		case role == roleUser || contents && !given:
			return msg, true
		default:
			head = false
		}
	}
	return first, s.Err() == nil
}

// roleText is the text of roles' name i.
func roleText(i int) string {
	return [...]string{"system", "developer", "user"}[i]
}

// fnv64 is an FNV-64a hash being written: start it at fnvOffset.
type fnv64 uint64

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (h *fnv64) write(b []byte) {
	x := uint64(*h)
	for _, c := range b {
		x = (x ^ uint64(c)) * fnvPrime
	}
	*h = fnv64(x)
}

func (h *fnv64) byte(c byte) { *h = fnv64((uint64(*h) ^ uint64(c)) * fnvPrime) }

// value hashes the JSON value ahead of s, depth containers deep: without
// white space between tokens nor "cache_control" members, down to
// canonDepth; deeper, as it is written.
func (h *fnv64) value(s *jsonscan.Scanner, depth int) {
	switch s.Next() {
	case jsonscan.Object:
		if depth == canonDepth {
			break
		}
		h.byte('{')
		sep := false
		for m := s.Object(cacheControlNames); m.Next(); {
			if m.Name() == 0 {
				s.Skip()
				continue
			}
			if sep {
				h.byte(',')
			}
			sep = true
			h.write(s.Bytes(m.Key()))
			h.byte(':')
			h.value(s, depth+1)
		}
		h.byte('}')
		return
	case jsonscan.Array:
		if depth == canonDepth {
			break
		}
		h.byte('[')
		for e, sep := s.Array(), false; e.Next(); sep = true {
			if sep {
				h.byte(',')
			}
			h.value(s, depth+1)
		}
		h.byte(']')
		return
	}
	h.write(s.Bytes(s.Skip()))
}
