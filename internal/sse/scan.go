package sse

import (
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The tracker reads the few fields it needs from an event's JSON with a
// scanner over the bytes, allocating nothing per event, yet it reads them
// exactly as encoding/json's Unmarshal into the chunk shapes it used to
// would (a differential fuzz test holds the two equal): the whole value
// must be valid JSON, nested at most 10 000 deep, or nothing is taken from
// it; keys match their field's name exactly or case-folded; of a key given
// twice the last value counts, an object's fields merge, and a second array
// decodes into the first one's elements, as reflect's slices do; a value of
// the wrong type leaves its field as it was; null clears a pointer, a slice
// or a raw value and leaves a string or number alone.

// maxDepth is encoding/json's bound on nesting.
const maxDepth = 10000

// maxKeptElems and maxKeptBytes bound the storage a Tracker keeps from
// one event to the next.
const (
	maxKeptElems = 256
	maxKeptBytes = 64 << 10
)

// span is where a value lies in the event's data: a string's with its
// quotes. The zero span is no value.
type span struct{ lo, hi int }

func (s span) set() bool { return s.hi > s.lo }

// choiceEl is one element of a chat chunk's choices, as read.
type choiceEl struct {
	index        int
	content      span // a string
	toolCalls    span // raw
	refusal      span // a string
	functionCall span // raw
	finish       span // a string; cleared by null
}

// candidateEl is one element of a Gemini chunk's candidates.
type candidateEl struct {
	parts  slice[partEl]
	finish span // a string
}

// partEl is one of a candidate's parts.
type partEl struct {
	text         span // a string
	functionCall span // raw
}

// slice is a slice decoded into, reused across events: its length, and its
// capacity as the position in its element shape's growth chain, since a
// second array of the same key reuses the elements up to the capacity.
// The elements' storage (el) grows as it must, and is let go past
// maxKeptElems.
type slice[T any] struct {
	el     []T
	n      int
	capAt  int  // index into the chain of capacities
	notNil bool // for a pointer to a slice: whether it was set
	chain  *capChain
}

// reset makes the slice nil, as a fresh chunk's is.
func (s *slice[T]) reset(c *capChain) {
	s.n, s.capAt, s.notNil, s.chain = 0, 0, false, c
}

// elem returns element i of an array being decoded in order, growing the
// slice as reflect.Value.Grow(1) would: the elements past the length are
// zero in a new backing array, and kept in the old one.
func (s *slice[T]) elem(i int) *T {
	var zero T
	if i >= s.chain.at(s.capAt) { // then the length is i too
		s.capAt++
		for j := s.n; j < min(s.chain.at(s.capAt), len(s.el)); j++ {
			clearElem(&s.el[j])
		}
	}
	if i >= s.n {
		s.n = i + 1
	}
	for len(s.el) <= i {
		s.el = append(s.el, zero)
	}
	return &s.el[i]
}

// clearElem zeroes an element, keeping the storage of a candidate's parts
// for the next event.
func clearElem[T any](e *T) {
	if c, ok := any(e).(*candidateEl); ok {
		*c = candidateEl{parts: slice[partEl]{el: c.parts.el}}
		return
	}
	*e = *new(T)
}

// end ends an array of n elements: a shorter one shortens the slice, an
// empty one is a new empty slice.
func (s *slice[T]) end(n int) {
	s.n = min(s.n, n)
	if n == 0 {
		s.capAt = 0
	}
}

// capChain is the capacities a slice of one element shape goes through
// as it grows one element at a time from nil: the runtime's growth with
// its size classes, learned once by growing a slice of that shape.
type capChain struct {
	mu   sync.Mutex
	caps atomic.Pointer[[]int]
	next func(c int) int // the capacity a full slice of capacity c grows to
}

func (c *capChain) at(i int) int {
	if i == 0 {
		return 0
	}
	if caps := c.caps.Load(); caps != nil && i < len(*caps) {
		return (*caps)[i]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	caps := []int{0}
	if p := c.caps.Load(); p != nil {
		caps = append(caps[:0], *p...)
	}
	for len(caps) <= i {
		caps = append(caps, c.next(caps[len(caps)-1]))
	}
	c.caps.Store(&caps)
	return caps[i]
}

func chainOf[T any]() *capChain {
	return &capChain{next: func(c int) int { return cap(append(make([]T, c), *new(T))) }}
}

// The element shapes of the chunk the tracker once decoded into, whose
// growth the slices follow.
var (
	choiceChain = chainOf[struct {
		Index int
		Delta struct {
			Content      string
			ToolCalls    []byte
			Refusal      string
			FunctionCall []byte
		}
		FinishReason *string
	}]()
	candidateChain = chainOf[struct {
		Content struct{ Parts []struct{} }
		Finish  string
	}]()
	partChain = chainOf[struct {
		Text         string
		FunctionCall []byte
	}]()
)

// event is what the tracker reads of one event's JSON.
type event struct {
	typ, id                       span // strings
	errRaw, delta, created, usage span // raw
	index                         int
	blockType, itemType           span // content_block.type, item.type
	choices                       slice[choiceEl]
	candidates                    slice[candidateEl]
}

// scanner reads one event's data. Once it finds the data is not valid
// JSON, bad is set and it reads no further.
type scanner struct {
	b     []byte
	i     int
	depth int
	bad   bool
	key   []byte   // the current key, unquoted and folded
	short [32]byte // or that of a key of ASCII unescaped, as long as a field's name at most
	tmp   []byte
}

// begin sets the scanner to read data from offset i. Its buffers are
// kept, and no field is written that need not be: the scanner lives in
// the heap, where a write of a pointer costs.
func (s *scanner) begin(data []byte, i int) {
	s.b, s.i, s.depth, s.bad = data, i, 0, false
}

func (s *scanner) fail() {
	s.bad, s.i = true, len(s.b)
}

func (s *scanner) ws() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// read reads the event's data as a chunk into e.
func (s *scanner) read(data []byte, e *event) {
	s.begin(data, 0)
	e.typ, e.id, e.errRaw, e.delta, e.created, e.usage = span{}, span{}, span{}, span{}, span{}, span{}
	e.index, e.blockType, e.itemType = 0, span{}, span{}
	e.choices.reset(choiceChain)
	e.candidates.reset(candidateChain)
	// An event of thousands of choices or parts, or a key of a megabyte,
	// does not keep its storage for the rest of the stream.
	if cap(e.choices.el) > maxKeptElems {
		e.choices.el = nil
	}
	if cap(e.candidates.el) > maxKeptElems {
		e.candidates.el = nil
	}
	for i := range e.candidates.el {
		if cap(e.candidates.el[i].parts.el) > maxKeptElems {
			e.candidates.el[i].parts.el = nil
		}
	}
	if cap(s.key) > maxKeptBytes || cap(s.tmp) > maxKeptBytes {
		s.key, s.tmp = nil, nil
	}
	s.ws()
	if s.peek() == '{' {
		s.chunk(e)
	} else {
		s.skip()
	}
	s.ws()
	if s.i != len(s.b) {
		s.fail()
	}
}

func (s *scanner) chunk(e *event) {
	for more := s.open('{'); more; more = s.next('}') {
		switch string(s.member()) {
		case "TYPE":
			s.str(&e.typ)
		case "ERROR":
			e.errRaw = s.skip()
		case "DELTA":
			e.delta = s.skip()
		case "ID":
			s.str(&e.id)
		case "CREATED":
			e.created = s.skip()
		case "USAGE":
			e.usage = s.skip()
		case "INDEX":
			s.int(&e.index)
		case "CONTENT_BLOCK":
			s.typeOnly(&e.blockType)
		case "ITEM":
			s.typeOnly(&e.itemType)
		case "CHOICES":
			if s.ptrSlice(&e.choices.notNil, &e.choices.n, &e.choices.capAt) {
				n := 0
				for more := s.open('['); more; more = s.next(']') {
					s.choice(e.choices.elem(n))
					n++
				}
				e.choices.end(n)
			}
		case "CANDIDATES":
			if s.ptrSlice(&e.candidates.notNil, &e.candidates.n, &e.candidates.capAt) {
				n := 0
				for more := s.open('['); more; more = s.next(']') {
					s.candidate(e.candidates.elem(n))
					n++
				}
				e.candidates.end(n)
			}
		default:
			s.skip()
		}
	}
}

// ptrSlice reads what a pointer to a slice makes of the value ahead: null
// sets it nil, anything else sets it, and only an array is decoded into
// it (true: the caller reads the array).
func (s *scanner) ptrSlice(notNil *bool, n, capAt *int) bool {
	switch s.peek() {
	case 'n':
		s.skip()
		*notNil, *n, *capAt = false, 0, 0
		return false
	case '[':
		*notNil = true
		return true
	}
	*notNil = true
	s.skip()
	return false
}

// typeOnly reads a struct whose one field is type.
func (s *scanner) typeOnly(typ *span) {
	if s.peek() != '{' {
		s.skip()
		return
	}
	for more := s.open('{'); more; more = s.next('}') {
		if string(s.member()) == "TYPE" {
			s.str(typ)
		} else {
			s.skip()
		}
	}
}

func (s *scanner) choice(c *choiceEl) {
	if s.peek() != '{' {
		s.skip()
		return
	}
	for more := s.open('{'); more; more = s.next('}') {
		switch string(s.member()) {
		case "INDEX":
			s.int(&c.index)
		case "FINISH_REASON":
			if s.peek() == 'n' {
				c.finish = span{}
			}
			s.str(&c.finish)
		case "DELTA":
			if s.peek() != '{' {
				s.skip()
				continue
			}
			for more := s.open('{'); more; more = s.next('}') {
				switch string(s.member()) {
				case "CONTENT":
					s.str(&c.content)
				case "TOOL_CALLS":
					c.toolCalls = s.skip()
				case "REFUSAL":
					s.str(&c.refusal)
				case "FUNCTION_CALL":
					c.functionCall = s.skip()
				default:
					s.skip()
				}
			}
		default:
			s.skip()
		}
	}
}

func (s *scanner) candidate(c *candidateEl) {
	if s.peek() != '{' {
		s.skip()
		return
	}
	for more := s.open('{'); more; more = s.next('}') {
		switch string(s.member()) {
		case "FINISHREASON":
			s.str(&c.finish)
		case "CONTENT":
			if s.peek() != '{' {
				s.skip()
				continue
			}
			for more := s.open('{'); more; more = s.next('}') {
				if string(s.member()) != "PARTS" {
					s.skip()
					continue
				}
				switch s.peek() {
				case 'n':
					s.skip()
					c.parts.n, c.parts.capAt = 0, 0
				case '[':
					c.parts.chain = partChain
					n := 0
					for more := s.open('['); more; more = s.next(']') {
						s.part(c.parts.elem(n))
						n++
					}
					c.parts.end(n)
				default:
					s.skip()
				}
			}
		default:
			s.skip()
		}
	}
}

func (s *scanner) part(p *partEl) {
	if s.peek() != '{' {
		s.skip()
		return
	}
	for more := s.open('{'); more; more = s.next('}') {
		switch string(s.member()) {
		case "TEXT":
			s.str(&p.text)
		case "FUNCTIONCALL":
			p.functionCall = s.skip()
		default:
			s.skip()
		}
	}
}

// anthropicDelta reads an Anthropic delta's type, text and stop_reason
// from raw, valid JSON.
func (s *scanner) anthropicDelta(data []byte, raw span) (typ, text, stop span) {
	s.begin(data[:raw.hi], raw.lo)
	if !raw.set() || s.peek() != '{' {
		return
	}
	for more := s.open('{'); more; more = s.next('}') {
		switch string(s.member()) {
		case "TYPE":
			s.str(&typ)
		case "TEXT":
			s.str(&text)
		case "STOP_REASON":
			s.str(&stop)
		default:
			s.skip()
		}
	}
	return
}

// open reads the opening bracket of an object or array and reports
// whether a member or element follows; if not, the closing one is read.
func (s *scanner) open(bracket byte) bool {
	if s.peek() != bracket {
		s.fail()
		return false
	}
	s.i++
	if s.depth++; s.depth > maxDepth {
		s.fail()
		return false
	}
	s.ws()
	if s.peek() == bracket+2 { // '}' and ']' are 2 past '{' and '['
		s.i++
		s.depth--
		return false
	}
	return !s.bad
}

// next reads what follows a member or element: a comma (true: another
// follows) or the closing bracket.
func (s *scanner) next(closing byte) bool {
	s.ws()
	switch s.peek() {
	case ',':
		s.i++
		s.ws()
		return !s.bad
	case closing:
		s.i++
		s.depth--
		return false
	}
	s.fail()
	return false
}

// member reads a member's key and colon, and returns the key unquoted and
// case-folded as encoding/json folds it to find its field.
func (s *scanner) member() []byte {
	k := s.colon()
	if s.bad {
		return nil
	}
	raw := s.b[k.lo+1 : k.hi-1]
	n := 0
	for ; n < len(raw); n++ { // the bytes as they are, if all ASCII and unescaped
		c := raw[n]
		if c == '\\' || c >= utf8.RuneSelf {
			break
		}
		if n < len(s.short) {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			s.short[n] = c
		}
	}
	switch {
	case n == len(raw) && n <= len(s.short):
		return s.short[:n]
	case n == len(raw):
		return nil // longer than any field's name
	}
	s.key = s.key[:0]
	s.tmp = unquote(s.tmp[:0], s.b[k.lo:k.hi])
	for i := 0; i < len(s.tmp); {
		c := s.tmp[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			s.key = append(s.key, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(s.tmp[i:])
		s.key = utf8.AppendRune(s.key, foldRune(r))
		i += n
	}
	return s.key
}

// colon reads a member's key and colon, and returns where the key lies.
func (s *scanner) colon() span {
	var k span
	if s.peek() != '"' || !s.str(&k) {
		s.fail()
		return k
	}
	s.ws()
	if s.peek() != ':' {
		s.fail()
		return k
	}
	s.i++
	s.ws()
	return k
}

// foldRune is the smallest rune of r's fold set.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// str reads a string into *dst, if the value ahead is one, and reports
// whether it was; any other value is skipped and leaves *dst as it was.
func (s *scanner) str(dst *span) bool {
	b, i := s.b, s.i
	if i >= len(b) || b[i] != '"' {
		s.skip()
		return false
	}
	lo := i
	i++
	for {
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			s.fail()
			return false
		}
		switch b[i] {
		case '"':
			i++
			s.i, *dst = i, span{lo, i}
			return true
		case '\\':
			if i+1 >= len(b) {
				s.fail()
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					s.fail()
					return false
				}
				i += 6
			default:
				s.fail()
				return false
			}
		default: // a control character
			s.fail()
			return false
		}
	}
}

// plainByte tells the bytes that stand for themselves in a JSON string.
var plainByte = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= ' ' && c != '"' && c != '\\'
	}
	return t
}()

// int reads an integer into *dst, if the value ahead is a number that
// fits one; anything else is skipped and leaves *dst as it was.
func (s *scanner) int(dst *int) {
	v := s.skip()
	if !v.set() || s.bad {
		return
	}
	b := s.b[v.lo:v.hi]
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return // a string, a literal, a fraction or an exponent
		}
		if n > (1<<63)/10 {
			return
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		*dst = int(-n)
	case !neg && n < 1<<63:
		*dst = int(n)
	}
}

// skip reads any value and returns where it lies.
func (s *scanner) skip() span {
	lo := s.i
	switch c := s.peek(); {
	case c == '{':
		for more := s.open('{'); more; more = s.next('}') {
			s.colon()
			s.skip()
		}
	case c == '[':
		for more := s.open('['); more; more = s.next(']') {
			s.skip()
		}
	case c == '"':
		var v span
		s.str(&v)
	case c == 't':
		s.word("true")
	case c == 'f':
		s.word("false")
	case c == 'n':
		s.word("null")
	case c == '-' || '0' <= c && c <= '9':
		s.number()
	default:
		s.fail()
	}
	if s.bad {
		return span{}
	}
	return span{lo, s.i}
}

func (s *scanner) word(w string) {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		s.fail()
		return
	}
	s.i += len(w)
}

// number reads a number as JSON spells one.
func (s *scanner) number() {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		s.fail()
		return
	}
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			s.fail()
			return
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			s.fail()
		}
	}
}

func (s *scanner) digits() bool {
	lo := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > lo
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unquote appends the text of q, a valid JSON string with its quotes, to
// dst, as encoding/json decodes it: escapes resolved, a lone surrogate and
// invalid UTF-8 replaced by U+FFFD.
func unquote(dst, q []byte) []byte {
	q = q[1 : len(q)-1]
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\':
			switch q[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(q[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' {
						if r2 := hex4(q[i+2 : i+6]); r2 >= 0 {
							if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
								dst = utf8.AppendRune(dst, d)
								i += 6
								continue
							}
						}
					}
					r = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, q[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(q[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst
}
