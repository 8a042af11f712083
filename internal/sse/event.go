package sse

import "github.com/rebound-go/rebound/internal/jsonscan"

// The tracker reads the few fields it needs from an event's JSON with
// jsonscan, allocating nothing per event: keys are read by their text,
// and an event that gives a field the tracker reads twice at one level,
// or spells one another way ("Choices", "finish_Reason"), is not read, as
// an event that is not JSON is not: no provider sends one, and a reader
// that took one field where an SDK takes another would misjudge the
// stream. A value of the wrong type leaves its field unset; null unsets
// one.

// maxKeptElems bounds the elements a Tracker keeps storage for from one
// event to the next.
const maxKeptElems = 256

// maxKeptBytes bounds the bytes it keeps for a string it had to unquote.
const maxKeptBytes = 64 << 10

type span = jsonscan.Span

// The names read at each level of an event.
var (
	eventNames       = jsonscan.NewNames("type", "error", "delta", "id", "created", "usage", "index", "content_block", "item", "choices", "candidates")
	choiceNames      = jsonscan.NewNames("index", "finish_reason", "delta")
	choiceDeltaNames = jsonscan.NewNames("content", "tool_calls", "refusal", "function_call")
	candidateNames   = jsonscan.NewNames("finishReason", "content")
	contentNames     = jsonscan.NewNames("parts")
	partNames        = jsonscan.NewNames("text", "functionCall")
	typeNames        = jsonscan.NewNames("type")
	deltaNames       = jsonscan.NewNames("type", "text", "stop_reason")
)

// The indexes of eventNames.
const (
	evType = iota
	evError
	evDelta
	evID
	evCreated
	evUsage
	evIndex
	evContentBlock
	evItem
	evChoices
	evCandidates
)

// choiceEl is one element of a chat chunk's choices, as read.
type choiceEl struct {
	index        int
	content      span // a string
	toolCalls    span // raw
	refusal      span // a string
	functionCall span // raw
	finish       span // a string
}

// candidateEl is one element of a Gemini chunk's candidates: its parts
// are event.parts[lo:hi].
type candidateEl struct {
	lo, hi int
	finish span // a string
}

// partEl is one of a candidate's parts.
type partEl struct {
	text         span // a string
	functionCall span // raw
}

// event is what the tracker reads of one event's JSON.
type event struct {
	eventFields
	choices    []choiceEl
	candidates []candidateEl
	parts      []partEl
}

// eventFields are an event's fields but its elements: what is cleared for
// each event, without a pointer to write.
type eventFields struct {
	typ, id                       span // strings
	errRaw, delta, created, usage span // raw
	index                         int
	blockType, itemType           span // content_block.type, item.type
	// deltaType, deltaText and stopReason are an Anthropic delta's type,
	// text and stop_reason.
	deltaType, deltaText, stopReason span
	// choices and candidates are set when the event has them (not null),
	// even as a value of another type, which then holds no elements.
	choicesSet, candidatesSet bool
}

// read reads data, an event's trimmed data, into e with s; false if it
// is not JSON, or gives or spells a field twice.
func (e *event) read(s *jsonscan.Scanner, data []byte) bool {
	e.eventFields = eventFields{}
	e.choices, e.candidates, e.parts = e.choices[:0], e.candidates[:0], e.parts[:0]
	// An event of thousands of choices or parts does not keep its
	// storage for the rest of the stream.
	if cap(e.choices) > maxKeptElems {
		e.choices = nil
	}
	if cap(e.candidates) > maxKeptElems {
		e.candidates = nil
	}
	if cap(e.parts) > maxKeptElems {
		e.parts = nil
	}
	s.Reset(data)
	if s.Next() != jsonscan.Object {
		s.Skip()
		return s.End()
	}
	for m := s.Object(eventNames); m.Next(); {
		switch m.Name() {
		case evType:
			e.typ = str(s)
		case evError:
			e.errRaw = s.Skip()
		case evDelta:
			e.readDelta(s)
		case evID:
			e.id = str(s)
		case evCreated:
			e.created = s.Skip()
		case evUsage:
			e.usage = s.Skip()
		case evIndex:
			e.index = integer(s)
		case evContentBlock:
			e.blockType = typeOnly(s)
		case evItem:
			e.itemType = typeOnly(s)
		case evChoices:
			e.choicesSet = s.Next() != jsonscan.Null
			if s.Next() != jsonscan.Array {
				s.Skip()
				continue
			}
			for a := s.Array(); a.Next(); {
				e.choices = append(e.choices, choiceEl{})
				e.readChoice(s, &e.choices[len(e.choices)-1])
			}
		case evCandidates:
			e.candidatesSet = s.Next() != jsonscan.Null
			if s.Next() != jsonscan.Array {
				s.Skip()
				continue
			}
			for a := s.Array(); a.Next(); {
				e.candidates = append(e.candidates, candidateEl{lo: len(e.parts), hi: len(e.parts)})
				e.readCandidate(s, len(e.candidates)-1)
			}
		default:
			s.Skip()
		}
	}
	return s.End()
}

// str reads a string's span; any other value is skipped, and unset.
func str(s *jsonscan.Scanner) span {
	v, _ := s.Str()
	return v
}

// integer reads an integer; any other value is skipped, and read as 0.
func integer(s *jsonscan.Scanner) int {
	n, ok := s.Int()
	if !ok || int64(int(n)) != n {
		return 0
	}
	return int(n)
}

// typeOnly reads an object's type (content_block's, item's).
func typeOnly(s *jsonscan.Scanner) (typ span) {
	if s.Next() != jsonscan.Object {
		s.Skip()
		return span{}
	}
	for m := s.Object(typeNames); m.Next(); {
		if m.Name() == 0 {
			typ = str(s)
		} else {
			s.Skip()
		}
	}
	return typ
}

// readDelta reads the event's delta: raw, and an Anthropic delta's
// fields if it is an object.
func (e *event) readDelta(s *jsonscan.Scanner) {
	if s.Next() != jsonscan.Object {
		e.delta = s.Skip()
		return
	}
	lo := s.Offset()
	for m := s.Object(deltaNames); m.Next(); {
		switch m.Name() {
		case 0:
			e.deltaType = str(s)
		case 1:
			e.deltaText = str(s)
		case 2:
			e.stopReason = str(s)
		default:
			s.Skip()
		}
	}
	e.delta = span{Lo: lo, Hi: s.Offset()}
}

func (e *event) readChoice(s *jsonscan.Scanner, c *choiceEl) {
	if s.Next() != jsonscan.Object {
		s.Skip()
		return
	}
	for m := s.Object(choiceNames); m.Next(); {
		switch m.Name() {
		case 0:
			c.index = integer(s)
		case 1:
			c.finish = str(s)
		case 2:
			if s.Next() != jsonscan.Object {
				s.Skip()
				continue
			}
			for d := s.Object(choiceDeltaNames); d.Next(); {
				switch d.Name() {
				case 0:
					c.content = str(s)
				case 1:
					c.toolCalls = s.Skip()
				case 2:
					c.refusal = str(s)
				case 3:
					c.functionCall = s.Skip()
				default:
					s.Skip()
				}
			}
		default:
			s.Skip()
		}
	}
}

// readCandidate reads candidate i, its parts appended to e.parts.
func (e *event) readCandidate(s *jsonscan.Scanner, i int) {
	if s.Next() != jsonscan.Object {
		s.Skip()
		return
	}
	for m := s.Object(candidateNames); m.Next(); {
		switch m.Name() {
		case 0:
			e.candidates[i].finish = str(s)
		case 1:
			if s.Next() != jsonscan.Object {
				s.Skip()
				continue
			}
			for c := s.Object(contentNames); c.Next(); {
				if c.Name() != 0 || s.Next() != jsonscan.Array {
					s.Skip()
					continue
				}
				for a := s.Array(); a.Next(); {
					e.parts = append(e.parts, partEl{})
					e.readPart(s, &e.parts[len(e.parts)-1])
				}
				e.candidates[i].hi = len(e.parts)
			}
		default:
			s.Skip()
		}
	}
}

func (e *event) readPart(s *jsonscan.Scanner, p *partEl) {
	if s.Next() != jsonscan.Object {
		s.Skip()
		return
	}
	for m := s.Object(partNames); m.Next(); {
		switch m.Name() {
		case 0:
			p.text = str(s)
		case 1:
			p.functionCall = s.Skip()
		default:
			s.Skip()
		}
	}
}
