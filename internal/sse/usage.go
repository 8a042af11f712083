package sse

// Usage is what a JSON document (a whole answer, or one event's data)
// reports of its token usage, in the places the dialects put it: OpenAI's
// and Anthropic's "usage", Anthropic's message_start "message.usage", the
// Responses API's "response.usage", Gemini's "usageMetadata" and whether
// one of its "candidates" has a "finishReason".
type Usage struct {
	Top, Message, Response UsageCounts
	Metadata               UsageMetadata
	// HasTop, HasMessage, HasResponse and HasMetadata tell which of the
	// above the document set (to an object; null unsets them).
	HasTop, HasMessage, HasResponse, HasMetadata bool
	// Finished: a candidate's finishReason is a string not empty.
	Finished bool
}

// UsageCounts are the token counts of OpenAI's Chat Completions (prompt,
// completion) and of the Responses API and Anthropic (input, output, and
// Anthropic's cache writes and reads).
type UsageCounts struct {
	PromptTokens, CompletionTokens, InputTokens, OutputTokens int64
	CacheCreationInputTokens, CacheReadInputTokens            int64
}

// UsageMetadata are Gemini's token counts.
type UsageMetadata struct {
	PromptTokenCount, CandidatesTokenCount, ThoughtsTokenCount int64
}

// UsageRead is how ReadUsage read a document.
type UsageRead int

const (
	// UsageDecoded: the Usage is what encoding/json's Unmarshal into the
	// shapes above gives, without an error.
	UsageDecoded UsageRead = iota
	// UsageInvalid: Unmarshal would return an error (the document is not
	// valid JSON, or a value is not of its field's type).
	UsageInvalid
	// UsageUnsure: the document gives "candidates" more than once, whose
	// elements encoding/json reuses from one array to the next; the caller
	// decodes it with encoding/json.
	UsageUnsure
)

// ReadUsage reads doc's token usage as encoding/json's Unmarshal into a
// struct of the dialects' shapes would (pointers for usage and
// usageMetadata, structs for message and response, a slice for
// candidates), with the scanner the Tracker uses, allocating nothing for
// keys of ASCII unescaped.
func ReadUsage(doc []byte) (Usage, UsageRead) {
	var s scanner
	var u Usage
	r := s.usageDoc(doc, &u)
	return u, r
}

// usageDoc reads the document into u.
func (s *scanner) usageDoc(doc []byte, u *Usage) UsageRead {
	s.begin(doc, 0)
	s.ws()
	typeErr, candidatesSeen := false, false
	switch s.peek() {
	case '{':
		for more := s.open('{'); more; more = s.next('}') {
			switch string(s.member()) {
			case "USAGE":
				typeErr = s.usagePtr(&u.Top, &u.HasTop) || typeErr
			case "MESSAGE":
				typeErr = s.usageHolder(&u.Message, &u.HasMessage) || typeErr
			case "RESPONSE":
				typeErr = s.usageHolder(&u.Response, &u.HasResponse) || typeErr
			case "USAGEMETADATA":
				typeErr = s.metadataPtr(u) || typeErr
			case "CANDIDATES":
				if candidatesSeen {
					return UsageUnsure
				}
				candidatesSeen = true
				typeErr = s.candidates(u) || typeErr
			default:
				s.skip()
			}
		}
	case 'n':
		s.skip()
	default:
		s.skip()
		typeErr = true
	}
	s.ws()
	if s.i != len(s.b) {
		s.fail()
	}
	if s.bad || typeErr {
		return UsageInvalid
	}
	return UsageDecoded
}

// usageHolder reads a struct whose one field is usage (message,
// response), and reports a value of the wrong type.
func (s *scanner) usageHolder(c *UsageCounts, set *bool) (typeErr bool) {
	switch s.peek() {
	case 'n':
		s.skip() // null leaves a struct as it was
		return false
	case '{':
	default:
		s.skip()
		return true
	}
	for more := s.open('{'); more; more = s.next('}') {
		if string(s.member()) == "USAGE" {
			typeErr = s.usagePtr(c, set) || typeErr
		} else {
			s.skip()
		}
	}
	return typeErr
}

// usagePtr reads a pointer to UsageCounts: null unsets it, an object is
// decoded into it (into the one already set, if any).
func (s *scanner) usagePtr(c *UsageCounts, set *bool) (typeErr bool) {
	switch s.peek() {
	case 'n':
		s.skip()
		*c, *set = UsageCounts{}, false
		return false
	case '{':
	default:
		s.skip()
		return true
	}
	if !*set {
		*c, *set = UsageCounts{}, true
	}
	for more := s.open('{'); more; more = s.next('}') {
		var dst *int64
		switch string(s.member()) {
		case "PROMPT_TOKENS":
			dst = &c.PromptTokens
		case "COMPLETION_TOKENS":
			dst = &c.CompletionTokens
		case "INPUT_TOKENS":
			dst = &c.InputTokens
		case "OUTPUT_TOKENS":
			dst = &c.OutputTokens
		case "CACHE_CREATION_INPUT_TOKENS":
			dst = &c.CacheCreationInputTokens
		case "CACHE_READ_INPUT_TOKENS":
			dst = &c.CacheReadInputTokens
		default:
			s.skip()
			continue
		}
		typeErr = !s.int64(dst) || typeErr
	}
	return typeErr
}

// metadataPtr reads Gemini's usageMetadata, a pointer as usagePtr's.
func (s *scanner) metadataPtr(u *Usage) (typeErr bool) {
	switch s.peek() {
	case 'n':
		s.skip()
		u.Metadata, u.HasMetadata = UsageMetadata{}, false
		return false
	case '{':
	default:
		s.skip()
		return true
	}
	if !u.HasMetadata {
		u.Metadata, u.HasMetadata = UsageMetadata{}, true
	}
	m := &u.Metadata
	for more := s.open('{'); more; more = s.next('}') {
		var dst *int64
		switch string(s.member()) {
		case "PROMPTTOKENCOUNT":
			dst = &m.PromptTokenCount
		case "CANDIDATESTOKENCOUNT":
			dst = &m.CandidatesTokenCount
		case "THOUGHTSTOKENCOUNT":
			dst = &m.ThoughtsTokenCount
		default:
			s.skip()
			continue
		}
		typeErr = !s.int64(dst) || typeErr
	}
	return typeErr
}

// candidates reads Gemini's candidates the first time the key comes (its
// elements are then all new), for whether one has a finishReason.
func (s *scanner) candidates(u *Usage) (typeErr bool) {
	switch s.peek() {
	case 'n':
		s.skip()
		u.Finished = false
		return false
	case '[':
	default:
		s.skip()
		return true
	}
	finished := false
	for more := s.open('['); more; more = s.next(']') {
		switch s.peek() {
		case 'n':
			s.skip()
			continue
		case '{':
		default:
			s.skip()
			typeErr = true
			continue
		}
		var reason span
		for more := s.open('{'); more; more = s.next('}') {
			if string(s.member()) != "FINISHREASON" {
				s.skip()
				continue
			}
			switch s.peek() {
			case '"':
				s.str(&reason)
			case 'n':
				s.skip() // null leaves a string as it was
			default:
				s.skip()
				typeErr = true
			}
		}
		finished = finished || reason.hi-reason.lo > len(`""`)
	}
	u.Finished = finished
	return typeErr
}

// int64 reads an int64 field: null leaves it as it was (true), a number
// that is an integer in range sets it (true), anything else is a type
// error (false).
func (s *scanner) int64(dst *int64) bool {
	if s.peek() == 'n' {
		s.skip()
		return true
	}
	v := s.skip()
	if !v.set() || s.bad {
		return true // not JSON: the document is invalid anyway
	}
	b := s.b[v.lo:v.hi]
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return false // a string, a literal, an object, a fraction or an exponent
		}
		if n > (1<<63)/10 {
			return false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		*dst = int64(-n)
	case !neg && n < 1<<63:
		*dst = int64(n)
	default:
		return false
	}
	return true
}
