package usage

import (
	"math"
	"slices"
	"strings"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// Reading is what one JSON document (an answer, or a stream's event)
// reports of its usage.
type Reading struct {
	Counts
	// Final says the counts are the answer's last word: a whole answer's,
	// or a stream's final usage (OpenAI's usage chunk, Anthropic's
	// message_delta, response.completed, a finished Gemini chunk); an
	// Anthropic message_start's are not.
	Final bool
}

// Read returns the usage doc reports, false if it reports none, or
// reports one that cannot be told: doc is not valid JSON, a count is not
// a whole number (or is negative, or too large to add up), or a member
// Read decides by is given twice or spelled another way (jsonscan's
// rules). It allocates nothing.
func Read(doc []byte) (Reading, bool) {
	var (
		s        jsonscan.Scanner
		r        Reading
		found    bool
		final    bool // a holder whose counts are final was read
		metadata bool // Gemini's usageMetadata was read
		finished bool // and a candidate has a finishReason
	)
	s.Reset(doc)
	if s.Next() != jsonscan.Object {
		return r, false
	}
	bad := false
	for m := s.Object(topNames); m.Next(); {
		switch i := m.Name(); {
		case i == jsonscan.Other:
			s.Skip()
		case topKeys[i] == "candidates":
			finished = finishedCandidate(&s) || finished
		case holderAt[i] >= 0:
			c, ok, present := readHolder(&s, holders[holderAt[i]])
			bad = bad || !ok
			if present {
				found = true
				r.Counts = add(r.Counts, c, &bad)
				if holders[holderAt[i]] == "usageMetadata" {
					metadata = true
				} else {
					final = true
				}
			}
		default: // "message", "response": a holder within
			if s.Next() != jsonscan.Object {
				s.Skip()
				continue
			}
			for mm := s.Object(innerNames); mm.Next(); {
				if mm.Name() != 0 {
					s.Skip()
					continue
				}
				h := topKeys[i] + ".usage"
				c, ok, present := readHolder(&s, h)
				bad = bad || !ok
				if present {
					found = true
					r.Counts = add(r.Counts, c, &bad)
					final = final || h == "response.usage"
				}
			}
		}
	}
	if !s.End() || bad || !found {
		return Reading{}, false
	}
	// Gemini's counts are final in the chunk that finishes a candidate;
	// a chunk before it reports them as they grow.
	r.Final = final || metadata && finished
	return r, true
}

// add returns a and b summed; bad is set if a sum would overflow.
func add(a, b Counts, bad *bool) Counts {
	sum := func(x, y int64) int64 {
		if x > math.MaxInt64/2-y {
			*bad = true
			return 0
		}
		return x + y
	}
	return Counts{
		Input: sum(a.Input, b.Input), CacheRead: sum(a.CacheRead, b.CacheRead),
		CacheWrite: sum(a.CacheWrite, b.CacheWrite), CacheWrite1h: sum(a.CacheWrite1h, b.CacheWrite1h),
		Output: sum(a.Output, b.Output),
	}
}

// The names Read decides by, built from the Dialects table at start: the
// top-level members (holders, the objects holding one, Gemini's
// candidates), a holder's members (counts, and the objects of nested
// counts), and those nested counts, each path numbered.
var (
	holders    []string // every holder's path
	topKeys    []string // the top-level members read
	topNames   *jsonscan.Names
	holderAt   []int // of each top-level member, its holder's index in holders, -1 if none
	innerNames = jsonscan.NewNames("usage")

	paths       []string // every count's path within a holder, and every object of nested counts
	memberNames *jsonscan.Names
	memberPath  []int             // of each of memberNames, its index in paths
	nestedNames []*jsonscan.Names // of each of memberNames that holds counts, their names; else nil
	nestedPath  [][]int           // and their indexes in paths
	finishNames = jsonscan.NewNames("finishReason")
)

func init() {
	for _, d := range Dialects {
		for _, h := range d.Holders {
			if !slices.Contains(holders, h) {
				holders = append(holders, h)
			}
		}
		for _, p := range d.paths() {
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
			if parent, _, ok := strings.Cut(p, "."); ok && !slices.Contains(paths, parent) {
				paths = append(paths, parent)
			}
		}
	}
	for _, h := range holders {
		top, _, _ := strings.Cut(h, ".")
		if !slices.Contains(topKeys, top) {
			topKeys = append(topKeys, top)
		}
	}
	topKeys = append(topKeys, "candidates")
	topNames = jsonscan.NewNames(topKeys...)
	for _, k := range topKeys {
		holderAt = append(holderAt, slices.Index(holders, k))
	}
	var members []string
	for _, p := range paths {
		if !strings.Contains(p, ".") {
			members = append(members, p)
		}
	}
	memberNames = jsonscan.NewNames(members...)
	for _, m := range members {
		memberPath = append(memberPath, slices.Index(paths, m))
		var leaves []string
		var at []int
		for i, p := range paths {
			if leaf, ok := strings.CutPrefix(p, m+"."); ok {
				leaves, at = append(leaves, leaf), append(at, i)
			}
		}
		if leaves == nil {
			nestedNames, nestedPath = append(nestedNames, nil), append(nestedPath, nil)
			continue
		}
		nestedNames, nestedPath = append(nestedNames, jsonscan.NewNames(leaves...)), append(nestedPath, at)
	}
	for _, d := range Dialects {
		d.index()
	}
}

// indexes are a dialect's paths' indexes in paths, -1 for none.
type indexes struct {
	input, read, write, write5m, write1h, mark int
	output                                     []int
}

// index sets d.at from paths.
func (d *Dialect) index() {
	at := func(p string) int {
		if p == "" {
			return -1
		}
		return slices.Index(paths, p)
	}
	d.at = indexes{input: at(d.Input), read: at(d.CacheRead), write: at(d.CacheWrite), write5m: at(d.CacheWrite5m), write1h: at(d.CacheWrite1h), mark: at(d.Mark)}
	for _, p := range d.Output {
		d.at.output = append(d.at.output, at(p))
	}
}

// paths are the paths of d's counts, within a holder.
func (d *Dialect) paths() []string {
	var ps []string
	for _, p := range append([]string{d.Input, d.CacheRead, d.CacheWrite, d.CacheWrite5m, d.CacheWrite1h, d.Mark}, d.Output...) {
		if p != "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// maxPaths bounds paths: values are kept in arrays of this size.
const maxPaths = 64

// values are a holder's counts by path index, and which it has.
type values struct {
	n       [maxPaths]int64
	present uint64
}

// has reports whether the holder has the path of index i.
func (v *values) has(i int) bool { return i >= 0 && v.present&(1<<i) != 0 }

// get returns the count of the path of index i, 0 if none.
func (v *values) get(i int) int64 {
	if i < 0 {
		return 0
	}
	return v.n[i]
}

// readHolder reads the holder ahead, at path h: its counts as the
// dialect it is read as has them; ok false for a count that is not a
// whole number, or negative; present false for a holder that is null.
func readHolder(s *jsonscan.Scanner, h string) (c Counts, ok, present bool) {
	switch s.Next() {
	case jsonscan.Null:
		s.Skip()
		return c, true, false
	case jsonscan.Object:
	default:
		s.Skip()
		return c, false, false
	}
	var v values
	ok = true
	for m := s.Object(memberNames); m.Next(); {
		i := m.Name()
		if i == jsonscan.Other {
			s.Skip()
			continue
		}
		v.present |= 1 << memberPath[i]
		if nestedNames[i] == nil {
			ok = count(s, &v.n[memberPath[i]]) && ok
			continue
		}
		switch s.Next() {
		case jsonscan.Null:
			s.Skip()
			continue
		case jsonscan.Object:
		default:
			s.Skip()
			ok = false
			continue
		}
		for mm := s.Object(nestedNames[i]); mm.Next(); {
			j := mm.Name()
			if j == jsonscan.Other {
				s.Skip()
				continue
			}
			v.present |= 1 << nestedPath[i][j]
			ok = count(s, &v.n[nestedPath[i][j]]) && ok
		}
	}
	d := dialectOf(h, &v)
	if d == nil {
		return c, ok, true // an object of no counts: a holder all the same
	}
	return d.counts(&v, &ok), ok, true
}

// count reads a count: null leaves it 0 (true), a whole number not
// negative sets it (true), anything else is false.
func count(s *jsonscan.Scanner, dst *int64) bool {
	if s.Next() == jsonscan.Null {
		s.Skip()
		return true
	}
	n, ok := s.Int()
	if !ok || n < 0 {
		return s.Err() != nil // a document not JSON is refused anyway
	}
	*dst = n
	return true
}

// dialectOf is the dialect a holder at path h is read as: the first whose
// mark it has, else the first with a count it has.
func dialectOf(h string, v *values) *Dialect {
	for _, d := range Dialects {
		if slices.Contains(d.Holders, h) && v.has(d.at.mark) {
			return d
		}
	}
	for _, d := range Dialects {
		if !slices.Contains(d.Holders, h) {
			continue
		}
		if v.has(d.at.input) || v.has(d.at.read) || v.has(d.at.write) || v.has(d.at.write5m) || v.has(d.at.write1h) {
			return d
		}
		for _, i := range d.at.output {
			if v.has(i) {
				return d
			}
		}
	}
	return nil
}

// counts returns v as d's counts mean them; ok is cleared for counts
// that contradict each other (a cache read larger than an input that
// holds it).
func (d *Dialect) counts(v *values, ok *bool) Counts {
	c := Counts{Input: v.get(d.at.input), CacheRead: v.get(d.at.read), CacheWrite: v.get(d.at.write)}
	if v.has(d.at.write5m) || v.has(d.at.write1h) {
		hour := v.get(d.at.write1h)
		c.CacheWrite1h = hour
		c.CacheWrite = max(c.CacheWrite-hour, v.get(d.at.write5m), 0)
	}
	if d.InputHoldsCache {
		if c.CacheRead > c.Input {
			*ok = false
		}
		c.Input -= c.CacheRead
	}
	for _, i := range d.at.output {
		o := v.get(i)
		if c.Output > math.MaxInt64/2-o {
			*ok = false
			return Counts{}
		}
		c.Output += o
	}
	return c
}

// finishedCandidate reads Gemini's candidates, for whether one has a
// finishReason.
func finishedCandidate(s *jsonscan.Scanner) bool {
	if s.Next() != jsonscan.Array {
		s.Skip()
		return false
	}
	finished := false
	for a := s.Array(); a.Next(); {
		if s.Next() != jsonscan.Object {
			s.Skip()
			continue
		}
		for m := s.Object(finishNames); m.Next(); {
			if v, isString := s.Str(); m.Name() == 0 && isString && v.Len() > len(`""`) {
				finished = true
			}
		}
	}
	return finished
}
