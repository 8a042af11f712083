package sse

import "github.com/rebound-go/rebound/internal/jsonscan"

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
	// UsageInvalid: the document says nothing of its usage: it is not
	// valid JSON, a value is not of its field's type (Unmarshal would
	// return an error), or it gives a field ReadUsage reads twice at one
	// level, or spells one another way (jsonscan's rules), where readers
	// differ on which counts.
	UsageInvalid
)

// The names ReadUsage reads, at each level.
var (
	usageDocNames    = jsonscan.NewNames("usage", "message", "response", "usageMetadata", "candidates")
	usageHolderNames = jsonscan.NewNames("usage")
	usageNames       = jsonscan.NewNames("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
	metadataNames    = jsonscan.NewNames("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount")
	finishNames      = jsonscan.NewNames("finishReason")
)

// ReadUsage reads doc's token usage as encoding/json's Unmarshal into a
// struct of the dialects' shapes would (pointers for usage and
// usageMetadata, structs for message and response, a slice for
// candidates), with jsonscan, allocating nothing.
func ReadUsage(doc []byte) (Usage, UsageRead) {
	var s jsonscan.Scanner
	var u Usage
	s.Reset(doc)
	typeErr := false
	switch s.Next() {
	case jsonscan.Object:
		for m := s.Object(usageDocNames); m.Next(); {
			switch m.Name() {
			case 0:
				typeErr = usagePtr(&s, &u.Top, &u.HasTop) || typeErr
			case 1:
				typeErr = usageHolder(&s, &u.Message, &u.HasMessage) || typeErr
			case 2:
				typeErr = usageHolder(&s, &u.Response, &u.HasResponse) || typeErr
			case 3:
				typeErr = metadataPtr(&s, &u) || typeErr
			case 4:
				typeErr = candidates(&s, &u) || typeErr
			default:
				s.Skip()
			}
		}
	case jsonscan.Null:
		s.Skip()
	default:
		s.Skip()
		typeErr = true
	}
	if !s.End() || typeErr {
		return Usage{}, UsageInvalid
	}
	return u, UsageDecoded
}

// usageHolder reads a struct whose one field is usage (message,
// response), and reports a value of the wrong type.
func usageHolder(s *jsonscan.Scanner, c *UsageCounts, set *bool) (typeErr bool) {
	switch s.Next() {
	case jsonscan.Null:
		s.Skip() // null leaves a struct as it was
		return false
	case jsonscan.Object:
	default:
		s.Skip()
		return true
	}
	for m := s.Object(usageHolderNames); m.Next(); {
		if m.Name() == 0 {
			typeErr = usagePtr(s, c, set) || typeErr
		} else {
			s.Skip()
		}
	}
	return typeErr
}

// usagePtr reads a pointer to UsageCounts: null leaves it unset, an
// object is decoded into it.
func usagePtr(s *jsonscan.Scanner, c *UsageCounts, set *bool) (typeErr bool) {
	switch s.Next() {
	case jsonscan.Null:
		s.Skip()
		return false
	case jsonscan.Object:
	default:
		s.Skip()
		return true
	}
	*set = true
	counts := [...]*int64{&c.PromptTokens, &c.CompletionTokens, &c.InputTokens, &c.OutputTokens, &c.CacheCreationInputTokens, &c.CacheReadInputTokens}
	for m := s.Object(usageNames); m.Next(); {
		if i := m.Name(); i != jsonscan.Other {
			typeErr = !int64Field(s, counts[i]) || typeErr
		} else {
			s.Skip()
		}
	}
	return typeErr
}

// metadataPtr reads Gemini's usageMetadata, a pointer as usagePtr's.
func metadataPtr(s *jsonscan.Scanner, u *Usage) (typeErr bool) {
	switch s.Next() {
	case jsonscan.Null:
		s.Skip()
		return false
	case jsonscan.Object:
	default:
		s.Skip()
		return true
	}
	u.HasMetadata = true
	m := &u.Metadata
	counts := [...]*int64{&m.PromptTokenCount, &m.CandidatesTokenCount, &m.ThoughtsTokenCount}
	for mem := s.Object(metadataNames); mem.Next(); {
		if i := mem.Name(); i != jsonscan.Other {
			typeErr = !int64Field(s, counts[i]) || typeErr
		} else {
			s.Skip()
		}
	}
	return typeErr
}

// candidates reads Gemini's candidates, for whether one has a
// finishReason.
func candidates(s *jsonscan.Scanner, u *Usage) (typeErr bool) {
	switch s.Next() {
	case jsonscan.Null:
		s.Skip()
		return false
	case jsonscan.Array:
	default:
		s.Skip()
		return true
	}
	for a := s.Array(); a.Next(); {
		switch s.Next() {
		case jsonscan.Null:
			s.Skip()
			continue
		case jsonscan.Object:
		default:
			s.Skip()
			typeErr = true
			continue
		}
		for m := s.Object(finishNames); m.Next(); {
			if m.Name() != 0 {
				s.Skip()
				continue
			}
			switch s.Next() {
			case jsonscan.String:
				v, _ := s.Str()
				u.Finished = u.Finished || v.Len() > len(`""`)
			case jsonscan.Null:
				s.Skip() // null leaves a string as it was
			default:
				s.Skip()
				typeErr = true
			}
		}
	}
	return typeErr
}

// int64Field reads an int64 field: null leaves it as it was (true), a
// number that is an integer in range sets it (true), anything else is a
// type error (false).
func int64Field(s *jsonscan.Scanner, dst *int64) bool {
	if s.Next() == jsonscan.Null {
		s.Skip()
		return true
	}
	n, ok := s.Int()
	if ok {
		*dst = n
	}
	return ok || s.Err() != nil // a document not JSON is invalid anyway
}
